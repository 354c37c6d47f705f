"""What mlx-lm 0.32.2 does when it distributes a model, as facts the cluster planner reads:
which model modules have a pipeline() or a shard(), how ``sharded_load`` attributes the loaded
tensors to decoder layers, how ``PipelineMixin`` splits the layers by rank, and how each
modelled ``shard()`` splits a tensor and the divisibility it needs. Pure data and arithmetic;
the model module a config loads is ``mlxfit.model.families.mlx_lm_module``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mlxfit.model.config import Layer, ModelConfig
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import is_embedding, is_expert, is_lm_head, is_lookup_table, is_vision

# --------------------------------------------------------------------------- supported modules

# Modules whose inner model is a PipelineMixin (mlx-lm 0.32.2; qwen3_5_moe inherits qwen3_5's).
PIPELINE_MODULES = frozenset({
    "bailing_hybrid", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v41", "glm4_moe",
    "glm4_moe_lite", "kimi_k25", "kimi_vl", "minimax_m3_vl", "ministral3", "mistral4",
    "muse_spark", "qwen2", "qwen3_5", "qwen3_5_moe", "qwen3_moe", "qwen3_next",
})
# Modules whose Model defines shard() (mlx-lm 0.32.2).
TENSOR_MODULES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v41", "exaone_moe", "glm4_moe",
    "glm4_moe_lite", "glm_moe_dsa", "gpt_oss", "iquestloopcoder", "kimi_k25", "kimi_k3", "llama",
    "longcat_flash", "longcat_flash_ngram", "minimax", "minimax_m3_vl", "ministral3", "mistral4",
    "muse_spark", "prism_hadamard_qwen35", "qwen2", "qwen3", "qwen3_5", "qwen3_5_moe",
    "qwen3_moe", "solar_open", "step3p5",
})
# Of those, the shard() methods mlxfit reproduces tensor by tensor (the rules below).
TENSOR_MODELLED = frozenset({
    "llama", "ministral3", "qwen2", "qwen3", "qwen3_moe", "glm4_moe", "gpt_oss", "deepseek_v2",
    "deepseek_v3", "glm4_moe_lite",
})
MLA_MODULES = frozenset({"deepseek_v3", "glm4_moe_lite"})  # heads sharded, latent replicated

# shard_linear / shard_inplace kinds by module name (the last dotted segment before the param).
_ALL_TO_SHARDED = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "q_b_proj"})
_SHARDED_TO_ALL = frozenset({"o_proj", "down_proj"})
_HEAD_SHARDED = frozenset({"embed_q", "unembed_out"})  # MLA per-head matrices: axis 0

LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")  # sharded_load's own pattern


# --------------------------------------------------------------------------- weights by layer


@dataclass(frozen=True)
class WeightsSplit:
    """The loaded weights attributed as mlx-lm's sharded_load attributes them."""

    total: int
    per_layer: tuple[int, ...]  # bytes of tensors named layers.<i>. for i < num_layers
    per_layer_experts: tuple[int, ...]
    replicated: int  # everything else: embeddings, norms, head (and layers past num_layers)
    embedding: int
    lm_head: int
    tied: bool
    expert_total: int
    lookup: int = 0  # per-layer lookup tables (replicated; decode gathers rows, no stream)

    @property
    def layer_total(self) -> int:
        return sum(self.per_layer)


def split_weights(tensors: Sequence[TensorInfo], num_layers: int,
                  with_vision: bool = False) -> WeightsSplit:
    """Attribute every loaded tensor to a decoder layer or to the replicated rest. Sums are
    exact: sum(per_layer) + replicated == total (the total ``fit`` uses)."""
    per = [0] * num_layers
    per_exp = [0] * num_layers
    total = replicated = emb = head = experts = lookup = 0
    for t in tensors:
        if is_vision(t.name) and not with_vision:
            continue
        total += t.nbytes
        lookup += t.nbytes if is_lookup_table(t.name) else 0
        exp = is_expert(t.name)
        experts += t.nbytes if exp else 0
        if is_embedding(t.name):
            emb += t.nbytes
        elif is_lm_head(t.name):
            head += t.nbytes
        m = LAYER_RE.search(t.name)
        i = int(m.group(1)) if m else -1
        if 0 <= i < num_layers and not is_vision(t.name):
            per[i] += t.nbytes
            per_exp[i] += t.nbytes if exp else 0
        else:
            replicated += t.nbytes
    return WeightsSplit(total, tuple(per), tuple(per_exp), replicated, emb, head,
                        head == 0 and emb > 0, experts, lookup)


# --------------------------------------------------------------------------- pipeline ranks


def even_split(num_layers: int, n: int) -> tuple[int, ...]:
    """PipelineMixin.pipeline's default: base layers each, the low ranks one more."""
    base, extra = divmod(num_layers, n)
    return tuple(base + (1 if r < extra else 0) for r in range(n))


def rank_ranges(split: Sequence[int]) -> list[tuple[int, int]]:
    """Rank r runs [sum(split[r+1:]), that + split[r]) as PipelineMixin sets start/end_idx."""
    out = []
    for r, k in enumerate(split):
        start = sum(split[r + 1:])
        out.append((start, start + k))
    return out


# --------------------------------------------------------------------------- tensor-parallel rules


def tp_cfg(cfg: ModelConfig, n: int, mla: bool) -> ModelConfig:
    """The per-host model under tensor parallelism: heads, KV heads and MLP widths / n."""
    if n == 1:
        return cfg
    layers = []
    for ly in cfg.layers:
        a = ly.attn
        if a is not None:
            if a.mla is not None:
                a = replace(a, q_heads=a.q_heads // n, mla=replace(a.mla, heads=a.mla.heads // n))
            elif mla:
                a = replace(a, q_heads=a.q_heads // n)
            else:
                a = replace(a, q_heads=a.q_heads // n, kv_heads=a.kv_heads // n)
        layers.append(Layer(a, ly.state_bytes, ly.state_kind, ly.moe))
    return replace(cfg, layers=tuple(layers), intermediate=cfg.intermediate // n,
                   moe_intermediate=cfg.moe_intermediate // n,
                   shared_intermediate=cfg.shared_intermediate // n)


def tensor_kind(name: str, family: str) -> str | None:
    """'rows' (all-to-sharded), 'cols' (sharded-to-all), 'heads' (axis 0) or None
    (replicated) for a tensor inside a decoder layer of mlx-lm module ``family``."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    param, module = parts[-1], parts[-2]
    if param == "sinks":  # gpt_oss: one sink per attention head
        return "heads" if family == "gpt_oss" else None
    if module == "kv_b_proj":  # deepseek_v2 shards it; MLA (v3) turns it into embed_q/unembed_out
        return "rows" if family == "deepseek_v2" else None
    if module in _ALL_TO_SHARDED:
        return "rows"
    if module in _SHARDED_TO_ALL:
        return None if param == "bias" else "cols"
    if module in _HEAD_SHARDED:
        return "heads" if family in MLA_MODULES else None
    return None


def shard_axis(t: TensorInfo, kind: str) -> int:
    if kind == "rows":
        return len(t.shape) - 1 if t.name.endswith(".bias") else max(len(t.shape) - 2, 0)
    if kind == "cols":
        return len(t.shape) - 1
    return 0


def tp_refusal(cfg: ModelConfig, module: str, n: int) -> str | None:
    """Every divisibility mlx-lm's shard() needs and this model lacks, in the config's terms
    (None when all hold)."""
    if n == 1:
        return None
    mla = module in MLA_MODULES
    bad: list[str] = []
    why: list[str] = []
    for h in sorted({a.q_heads for a in cfg.attention_layers}):
        if h % n:
            bad.append(f"num_attention_heads {h}")
    if not mla:
        for kv in sorted({a.kv_heads for a in cfg.attention_layers}):
            if kv % n:
                bad.append(f"num_key_value_heads {kv}")
    if bad:
        why.append(f"each host takes heads/{n} whole heads")
    if cfg.intermediate and any(not ly.moe for ly in cfg.layers) and cfg.intermediate % n:
        bad.append(f"intermediate_size {cfg.intermediate}")
    if cfg.is_moe and cfg.moe_intermediate % n:
        bad.append(f"moe_intermediate_size {cfg.moe_intermediate}")
        why.append("mlx-lm splits every expert's hidden width across the hosts, it does not "
                   "place whole experts")
    if cfg.is_moe and cfg.shared_intermediate % n:
        bad.append(f"shared expert width {cfg.shared_intermediate}")
    if not bad:
        return None
    return (f"{', '.join(bad)} not divisible by {n}"
            + (f" ({'; '.join(why)})" if why else ""))
