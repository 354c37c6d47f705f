"""Checkpoint layouts for the moe families' sanitize replays (model/sanitize_moe.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sanitize_oracle import Case, Layout, fixture, model_layout, unstack, with_extra


def per_expert(layout: Layout, stacked: str, experts: str,
               names: dict[str, str] | None = None) -> Layout:
    """Each stacked ``<p>.<stacked>.<proj>.<weight|bias>`` (E, ...) written as the HF
    checkpoint's E tensors ``<p>.<experts>.<e>.<names[proj]>.<weight|bias>``."""
    pattern = rf"(.+)\.{re.escape(stacked)}\.(\w+)\.(weight|bias)"
    names = names or {}
    return unstack(layout, pattern,
                   lambda m, e: f"{m[1]}.{experts}.{e}.{names.get(m[2], m[2])}.{m[3]}")


def _layers(layout: Layout, src: int, dst: int) -> Layout:
    """Layer ``src``'s tensors renamed to layer ``dst`` (an MTP layer written like a decoder
    layer)."""
    head = f"model.layers.{src}."
    return {f"model.layers.{dst}." + k[len(head):]: v for k, v in layout.items()
            if k.startswith(head)}


def _deepseek() -> list[Case]:
    cfg = fixture("deepseek", hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                  n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                  num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    return [(cfg, per_expert(mlx, "switch_mlp", "experts")), (cfg, mlx)]


def _qwen2_moe() -> list[Case]:
    cfg = fixture("qwen2_moe", hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                  num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
                  shared_expert_intermediate_size=64, num_key_value_heads=2, vocab_size=128,
                  torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    return [(cfg, per_expert(mlx, "switch_mlp", "experts")), (cfg, mlx)]


def _olmoe() -> list[Case]:
    cfg = fixture("olmoe", hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                  vocab_size=128, torch_dtype="bfloat16")  # tied, as the fixture
    mlx = model_layout(cfg)
    return [(cfg, per_expert(mlx, "switch_mlp", "experts")), (cfg, mlx)]


def _phixtral() -> list[Case]:
    cfg = fixture("phixtral", model_dim=64, num_heads=4, num_layers=2, num_vocab=128,
                  rotary_dim=8, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    return [(cfg, per_expert(mlx, "switch_mlp", "mlp")), (cfg, mlx)]


def _phimoe() -> list[Case]:
    cfg = fixture("phimoe", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, num_local_experts=4, num_hidden_layers=2,
                  vocab_size=128, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf = per_expert(mlx, "switch_mlp", "experts",
                    {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"})
    return [(cfg, hf), (cfg, mlx)]


def _klear() -> list[Case]:
    # mlp_only_layers [0] and decoder_sparse_step 2: layers 1 and 3 have experts.
    cfg = fixture("Klear", hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                  vocab_size=128, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    return [(cfg, per_expert(mlx, "experts", "experts")), (cfg, mlx)]


def _granite_hf(mlx: Layout) -> Layout:
    """switch_mlp's gate and up written as HF's input_linear (E, 2I, H), down as
    output_linear."""
    out: Layout = {}
    for k, (dt, shape) in mlx.items():
        if k.endswith(".switch_mlp.gate_proj.weight"):
            out[k.replace("switch_mlp.gate_proj", "input_linear")] = (
                dt, (shape[0], 2 * shape[1], *shape[2:]))
        elif k.endswith(".switch_mlp.down_proj.weight"):
            out[k.replace("switch_mlp.down_proj", "output_linear")] = (dt, shape)
        elif not k.endswith(".switch_mlp.up_proj.weight"):
            out[k] = (dt, shape)
    return out


def _granitemoe() -> list[Case]:
    base = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
            "vocab_size": 128, "torch_dtype": "bfloat16"}
    untied = fixture("granitemoe", tie_word_embeddings=False, **base)
    tied = fixture("granitemoe", **base)
    tied_mlx = model_layout(tied)
    head = {"lm_head.weight": ("BF16", (128, 64))}
    return [(untied, _granite_hf(model_layout(untied))),
            (tied, with_extra(_granite_hf(tied_mlx), head)),
            (tied, tied_mlx)]


def _rotary(n: int, head_dim: int) -> Layout:
    return {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": ("F32", (head_dim // 2,))
            for i in range(n)}


def _dots1() -> list[Case]:
    base = {"vocab_size": 128, "num_hidden_layers": 3, "torch_dtype": "bfloat16"}
    untied = fixture("dots1", **base)
    tied = fixture("dots1", tie_word_embeddings=True, **base)
    hf = per_expert(model_layout(untied), "experts", "experts")
    tied_hf = per_expert(model_layout(tied), "experts", "experts")
    head = {"lm_head.weight": ("BF16", (128, 64))}
    return [(untied, with_extra(hf, _rotary(3, 16))),
            (tied, with_extra(tied_hf, {**head, **_rotary(3, 16)}))]


def _solar_open() -> list[Case]:
    cfg = fixture("solar_open", num_hidden_layers=3, moe_intermediate_size=64,
                  torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf = per_expert(mlx, "switch_mlp", "experts")
    # The MTP layer, model.layers.3: a decoder layer with experts, plus its own projections.
    mtp = {**_layers(hf, 2, 3), "model.layers.3.eh_proj.weight": ("BF16", (64, 128)),
           "model.layers.3.enorm.weight": ("BF16", (64,)),
           "model.layers.3.hnorm.weight": ("BF16", (64,)),
           "model.layers.3.shared_head.norm.weight": ("BF16", (64,))}
    return [(cfg, with_extra(hf, mtp)), (cfg, mlx)]


def _afmoe() -> list[Case]:
    base = {"hidden_size": 64, "vocab_size": 128, "num_hidden_layers": 3, "num_dense_layers": 1,
            "layer_types": ["full_attention", "sliding_attention", "full_attention"],
            "torch_dtype": "bfloat16"}
    untied = fixture("afmoe", **base)
    tied = fixture("afmoe", tie_word_embeddings=True, **base)
    hf = per_expert(model_layout(untied), "experts", "experts")
    tied_hf = per_expert(model_layout(tied), "experts", "experts")
    head = {"lm_head.weight": ("BF16", (128, 64))}
    return [(untied, with_extra(hf, _rotary(3, 32))),
            (tied, with_extra(tied_hf, {**head, **_rotary(3, 32)}))]


def _ernie4_5_moe() -> list[Case]:
    cfg = fixture("ernie4_5_moe", hidden_size=64, vocab_size=128, num_hidden_layers=3,
                  moe_intermediate_size=64, moe_use_aux_free=True, moe_layer_start_index=1,
                  torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf = per_expert(mlx, "switch_mlp", "experts")
    # ERNIE-4.5's MTP block and its routers' aux-free statistics, which mlx-lm drops.
    extra = {f"model.layers.{i}.mlp.moe_statics.e_score_correction_bias": ("F32", (1, 4))
             for i in (1, 2)}
    extra.update({"model.mtp_block.0.input_layernorm.weight": ("BF16", (64,)),
                  "model.mtp_block.0.self_attn.q_proj.weight": ("BF16", (64, 64)),
                  "model.mtp_linear_proj.0.weight": ("BF16", (64, 128)),
                  "model.mtp_hidden_norm.0.weight": ("BF16", (64,)),
                  "model.mtp_emb_norm.0.weight": ("BF16", (64,))})
    return [(cfg, with_extra(hf, extra)), (cfg, mlx)]


def _exaone_hf(mlx: Layout) -> Layout:
    hf = per_expert(mlx, "switch_mlp", "experts")
    return {k.replace(".mlp.gate.e_score_correction_bias", ".mlp.e_score_correction_bias"): v
            for k, v in hf.items()}


def _exaone_moe() -> list[Case]:
    base = {"hidden_size": 64, "vocab_size": 128, "num_hidden_layers": 3,
            "is_moe_layer": [False, True, True],
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "torch_dtype": "bfloat16"}
    untied = fixture("exaone_moe", **base)
    tied = fixture("exaone_moe", tie_word_embeddings=True, **base)
    mtp = {"mtp.layers.0.input_layernorm.weight": ("BF16", (64,)),
           "mtp.fc.weight": ("BF16", (64, 128)),
           "mtp.norm.weight": ("BF16", (64,))}
    head = {"lm_head.weight": ("BF16", (128, 64))}
    tied_mlx = model_layout(tied)
    return [(untied, with_extra(_exaone_hf(model_layout(untied)), mtp)),
            (tied, with_extra(_exaone_hf(tied_mlx), head)),
            (tied, tied_mlx)]


CASES: dict[str, Callable[[], list[Case]]] = {
    "deepseek": _deepseek,
    "qwen2_moe": _qwen2_moe,
    "olmoe": _olmoe,
    "phixtral": _phixtral,
    "phimoe": _phimoe,
    "Klear": _klear,
    "granitemoe": _granitemoe,
    "dots1": _dots1,
    "solar_open": _solar_open,
    "afmoe": _afmoe,
    "ernie4_5_moe": _ernie4_5_moe,
    "exaone_moe": _exaone_moe,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {}
