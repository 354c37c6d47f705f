"""What mlx_lm.convert does to a checkpoint's tensors before it quantizes: each family's
``Model.sanitize`` (mlx-lm 0.32.2, mlx_lm/models/<family>.py) replayed on names, shapes and
dtypes only, plus which modules have a ``to_quantized`` method and which keep their dtype.

Pure: tensor descriptors in, tensor descriptors out. The families in ``RULES`` follow their
sanitize line by line and are checked against the real converter in tests/test_quantize.py.
Every other family's rules are ``generated_rules``: its quantization facts as mlx-lm's model
states them (mlx_lm_quant.py, generated), with no sanitize where its Model has none (mlx-lm
loads the tensors as they are: verified), else the generic sanitize, and the plan says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model import (
    sanitize_dense,
    sanitize_mla,
    sanitize_moe,
    sanitize_moe_fused,
    sanitize_recurrent,
    sanitize_wrappers,
)
from mlxfit.model.build_hybrid import bailing_global
from mlxfit.model.families import mlx_lm_module
from mlxfit.model.mlx_lm_quant import QUANT_FACTS
from mlxfit.model.sanitize_ops import (
    KV_B_BY_KIND,
    Rules,
    Tensors,
    conv_moveaxis,
    drop,
    fp8_left,
    model_arg,
    retag,
    split_kv_b,
    stack,
    tie,
)
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import is_vision

# --------------------------------------------------------------------------- families

def _llama(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    ts = drop(ts, lambda k: "self_attn.rotary_emb.inv_freq" not in k)
    return tie(ts, cfg, True)


def _qwen3(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    return tie(ts, cfg, False)


_QWEN_EXPERT = r"(model\.layers\.\d+\.mlp)\.experts\.(?P<e>\d+)\.(up_proj|down_proj|gate_proj)\.weight"


def _qwen3_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    ts = tie(ts, cfg, False)
    return stack(ts, _QWEN_EXPERT, lambda m: f"{m[1]}.switch_mlp.{m[3]}.weight")


_MIXTRAL = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}


def _mixtral(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    ts = tie(ts, cfg, False)
    return stack(ts, r"(model\.layers\.\d+\.block_sparse_moe)\.experts\.(?P<e>\d+)\.(w[123])\.(weight)",
                  lambda m: f"{m[1]}.switch_mlp.{_MIXTRAL[m[3]]}.{m[4]}")


def _glm4_moe_lite(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """glm4_moe_lite.py sanitize (GLM-4.7-Flash): layers from num_hidden_layers on (the MTP
    layer) dropped by index, experts stacked, kv_b_proj split as DeepSeek-V3's."""
    n = cfg.get("num_hidden_layers")

    def kept(k: str) -> bool:
        parts = k.split(".")
        return not (len(parts) >= 3 and parts[1] == "layers" and parts[2].isdigit()
                    and type(n) is int and int(parts[2]) >= n)

    ts = drop(ts, kept)
    ts = stack(ts, r"(model\.layers\.\d+\.mlp)\.experts\.(?P<e>\d+)\.(gate_proj|down_proj|up_proj)\.weight",
                lambda m: f"{m[1]}.switch_mlp.{m[3]}.weight")
    for k in [k for k in ts if k.endswith(".self_attn.kv_b_proj.weight")]:
        split_kv_b(ts, k[: -len(".kv_b_proj.weight")], cfg, "glm4_moe_lite", order=KV_B_BY_KIND)
    return ts


def _glm4_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    ts = stack(ts, r"(model\.layers\.\d+\.mlp)\.experts\.(?P<e>\d+)\.(gate_proj|down_proj|up_proj)\.weight",
                lambda m: f"{m[1]}.switch_mlp.{m[3]}.weight")
    # The MTP layer: the prefix model.layers.<num_hidden_layers>, matched as written.
    n = cfg.get("num_hidden_layers")
    return drop(ts, lambda k: not k.startswith(f"model.layers.{n}"))


def _qwen3_next(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    moe = any(k.startswith("model.layers.") and k.endswith(".mlp.experts.0.up_proj.weight")
              for k in ts)
    if not moe:  # its sanitize returns the weights untouched when no layer has experts
        return ts
    ts = drop(ts, lambda k: "mtp." not in k)
    ts = tie(ts, cfg, False)
    ts = stack(ts, _QWEN_EXPERT, lambda m: f"{m[1]}.switch_mlp.{m[3]}.weight")
    return conv_moveaxis(ts)


def _nemotron_h(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    ts = drop(ts, lambda k: not k.startswith("mtp."))
    ts = conv_moveaxis(ts)
    return stack(ts, r"(backbone\.layers\.\d+\.mixer)\.experts\.(?P<e>\d+)\.(down_proj|up_proj)\.weight",
                  lambda m: f"{m[1]}.switch_mlp.{'fc2' if m[3] == 'down_proj' else 'fc1'}.weight")


def _mistral3(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """The Mistral 3 / LLaVA wrapper: towers dropped, the text model's own sanitize, then
    everything under ``language_model.``."""
    lm: Tensors = {}
    for k, v in ts.items():
        if "vision_tower" in k or "multi_modal_projector" in k:
            continue
        if k.startswith("model.language_model."):
            k = "model." + k.removeprefix("model.language_model.")
        else:
            k = k.removeprefix("language_model.")
        lm[k] = retag(v, name=k)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    # mistral3.Model picks ministral3 / mistral4 / llama by text_config.model_type; ministral3
    # and llama drop rotary buffers and tie as text_config says (absent: False, its
    # ModelArgs.__post_init__). mistral4 (MLA) is not modelled.
    if text.get("model_type") == "mistral4":
        raise ConfigError("mistral3 with a mistral4 text model: not modelled by mlxfit's "
                          "converter rules")
    inner = _llama(lm, dict(text, tie_word_embeddings=text.get("tie_word_embeddings", False)))
    return {"language_model." + k: retag(v, name="language_model." + k) for k, v in inner.items()}


def _gemma3(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """The Gemma 3 wrapper: the vision_tower and multi_modal_projector subtrees dropped, the
    rest kept under language_model. (gemma3_text's sanitize only unties a missing lm_head)."""
    if not any(k.startswith("language_model.") for k in ts):
        raise ConfigError("mlx-lm's gemma3 sanitize reads weights under language_model.*; this "
                          "checkpoint has none (mlx_lm.convert would fail on it)")
    return drop(ts, lambda k: k.split(".", 1)[0] not in ("vision_tower", "multi_modal_projector"))


def _qwen3_5_names(ts: Tensors) -> Tensors:
    """The Qwen3.5 wrapper: towers dropped, everything under language_model."""
    out: Tensors = {}
    for k, v in ts.items():
        if k.startswith(("vision_tower", "model.visual")):
            continue
        if k.startswith("model.language_model"):
            k = k.replace("model.language_model", "language_model.model")
        elif not k.startswith("language_model."):
            k = "language_model." + k
        out[k] = retag(v, name=k)
    return out


def _qwen3_5_text(ts: Tensors) -> Tensors:
    # TextModel.sanitize: MTP dropped, conv1d transposed (its tie pop looks for an unprefixed
    # "lm_head.weight", which the wrapper's names never are).
    return conv_moveaxis(drop(ts, lambda k: "mtp." not in k))


def _qwen3_5(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    return _qwen3_5_text(_qwen3_5_names(ts))


def _qwen3_5_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """Qwen3.5-MoE: the fused experts.gate_up_proj (E, 2I, H) split into switch_mlp's gate and
    up (E, I, H); experts.down_proj renamed."""
    ts = _qwen3_5_names(ts)
    out: Tensors = {}
    moved: Tensors = {}
    for k, v in ts.items():
        m = re.fullmatch(r"(language_model\.model\.layers\.\d+\.mlp)\.experts\.gate_up_proj", k)
        if m and len(v.shape) == 3:
            e, two_i, h = v.shape
            for part in ("gate_proj", "up_proj"):
                name = f"{m[1]}.switch_mlp.{part}.weight"
                moved[name] = TensorInfo.of(name, v.dtype, (e, two_i // 2, h))
            down = f"{m[1]}.experts.down_proj"
            if down in ts:
                name = f"{m[1]}.switch_mlp.down_proj.weight"
                moved[name] = retag(ts[down], name=name)
        elif not re.fullmatch(r"language_model\.model\.layers\.\d+\.mlp\.experts\.down_proj", k):
            out[k] = v
    return _qwen3_5_text({**out, **moved})


def _dbrx(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """dbrx.py sanitize: each fused ``...experts.mlp.w1|v1|w2`` (E*ffn, d_model) split into
    per-expert ``...experts.<e>.<w>.weight`` (w2 transposed), appended after the rest; nothing
    else changes (an MLX-layout checkpoint passes through)."""
    ffn = cfg.get("ffn_config") if isinstance(cfg.get("ffn_config"), dict) else {}
    n = ffn.get("moe_num_experts")
    out = {k: v for k, v in ts.items() if "experts.mlp" not in k}
    for k, v in ts.items():
        if "experts.mlp" not in k:
            continue
        if type(n) is not int or n < 1 or len(v.shape) != 2 or v.shape[0] % n:
            raise ConfigError(f"{k}: shape {list(v.shape)} does not split into "
                              f"ffn_config.moe_num_experts={n!r} experts as mlx-lm's dbrx does")
        rows = v.shape[0] // n
        shape = (v.shape[1], rows) if k.endswith("w2") else (rows, v.shape[1])
        for e in range(n):
            name = k.replace(".mlp", f".{e}") + ".weight"
            out[name] = TensorInfo.of(name, v.dtype, shape)
    return out


def _generic(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    ts = drop(ts, lambda k: "rotary_emb.inv_freq" not in k and not is_vision(k))
    ts = tie(ts, cfg, False)
    ts = stack(ts, r"(.+)\.experts\.(?P<e>\d+)\.([^.]+)\.weight",
                lambda m: f"{m[1]}.switch_mlp.{m[3]}.weight")
    return conv_moveaxis(ts)


_GATE8 = {"group_size": 64, "bits": 8}
RULES: dict[str, Rules] = {
    "llama": Rules(_llama),
    "qwen2": Rules(_llama),  # drops the same rotary buffers, ties by default
    "qwen3": Rules(_qwen3),
    "qwen3_moe": Rules(_qwen3_moe, predicate=(("mlp.gate", _GATE8),)),
    "mixtral": Rules(_mixtral),
    # deepseek_v3.py sanitize, also what kimi_k25 runs on its language model.
    "deepseek_v3": Rules(sanitize_wrappers.deepseek_v3_text, not_quantizable=("mlp.gate",),
                         keep_dtype=("e_score_correction_bias",)),
    "qwen3_next": Rules(_qwen3_next,
                        predicate=(("mlp.gate", _GATE8), ("shared_expert_gate", _GATE8))),
    "nemotron_h": Rules(_nemotron_h, not_quantizable=("mixer.gate",),
                        keep_dtype=("e_score_correction_bias", "A_log")),
    "mistral3": Rules(_mistral3),
    "gemma3": Rules(_gemma3),
    "gemma3_text": Rules(lambda ts, cfg: ts),  # its sanitize renames nothing
}


def _has_experts(cfg: dict[str, Any]) -> bool:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    n = text.get("num_experts", cfg.get("num_experts", 0))
    return isinstance(n, int) and n > 0


RULES.update({
    "glm4_moe": Rules(_glm4_moe, not_quantizable=("mlp.gate",),
                      keep_dtype=("e_score_correction_bias",)),
    "glm4_moe_lite": Rules(_glm4_moe_lite, not_quantizable=("mlp.gate",),
                           keep_dtype=("e_score_correction_bias",)),
    "dbrx": Rules(_dbrx),
})
_QWEN35 = {"predicate": (("mlp.gate", _GATE8), ("shared_expert_gate", _GATE8)),
           "predicate_if": _has_experts, "keep_dtype": ("A_log",)}
RULES["qwen3_5"] = Rules(_qwen3_5, **_QWEN35)
RULES["qwen3_5_moe"] = Rules(_qwen3_5_moe, **_QWEN35)
GENERIC = Rules(_generic, verified=False)

# Families mlx_lm.convert -q cannot quantize, and why (checked against quantize_model in
# tests/test_mlx_lm_args.py): afm7.py's FusedLinear.to_quantized(group_size, bits) takes no
# mode, and quantize_model always passes one (TypeError).
QUANTIZE_FAILS: dict[str, str] = {
    "afm7": "its FusedLinear.to_quantized takes no 'mode', which quantize_model always passes",
}


def _generic_tied(default: bool) -> Callable[[Tensors, dict[str, Any]], Tensors]:
    """The generic sanitize with the family's own tie_word_embeddings default (its ModelArgs:
    bailing_moe_v3 and muse_spark tie unless the config says otherwise)."""
    def sanitize(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        return _generic(ts, dict(cfg, tie_word_embeddings=text.get("tie_word_embeddings",
                                                                    default)))
    return sanitize


def _bailing_v3_skip(path: str, cfg: dict[str, Any]) -> bool:
    """bailing_moe_v3.py quant_predicate: attention.q_proj / g_proj quantize on KDA (linear)
    layers only; the global MLA layers keep them in float."""
    parts = path.split(".")
    group, n = cfg.get("layer_group_size"), cfg.get("num_hidden_layers")
    if (not path.endswith(("attention.q_proj", "attention.g_proj")) or len(parts) < 3
            or not parts[2].isdigit() or type(group) is not int or type(n) is not int
            or group < 1):
        return False
    return bailing_global(int(parts[2]), group, n)


LAYER_SKIPS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "bailing_moe_v3": _bailing_v3_skip,
}


# Every family's own sanitize replayed, by kind (model/sanitize_*.py).
REPLAYED: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    **sanitize_dense.SANITIZE, **sanitize_recurrent.SANITIZE, **sanitize_wrappers.SANITIZE,
    **sanitize_moe.SANITIZE, **sanitize_moe_fused.SANITIZE, **sanitize_mla.SANITIZE,
}


def generated_rules(family: str) -> Rules:
    """A family without hand-written rules: the generic sanitize (not checked against mlx-lm's
    own sanitize of an HF checkpoint, so unverified) with the quantization facts read from
    mlx-lm's model (model/mlx_lm_quant.py: routers at 8 bits, MoEGate and BitLinear left in
    float, cast exceptions), which tests/test_mlx_lm_args.py checks against quantize_model."""
    facts = QUANT_FACTS.get(family)
    if facts is None:
        return GENERIC
    tie = model_arg({}, family, "tie_word_embeddings")
    # Without a Model.sanitize, mlx_lm.convert loads the tensors as they are: nothing to
    # approximate, so the rules are mlx-lm's own. With one, its replay (REPLAYED, checked
    # against mlx-lm's sanitize in tests/test_sanitize_replay.py), else the generic rules.
    own = facts["sanitize"]
    replay = REPLAYED.get(family)
    sanitize = replay or (_generic_tied(bool(tie)) if own else _as_loaded)
    return Rules(sanitize,
                 not_quantizable=tuple(facts["not_quantizable"]),
                 keep_dtype=tuple(facts["keep_dtype"]),
                 predicate=tuple(facts["predicate"].items()),
                 verified=not own or replay is not None, skip=LAYER_SKIPS.get(family))


def _as_loaded(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    return ts


def sanitized(tensors: list[TensorInfo] | tuple[TensorInfo, ...], config: dict[str, Any],
              family: str) -> tuple[Tensors, Rules]:
    """The tensors mlx-lm's ``family`` module loads after its sanitize, and its rules."""
    rules = RULES.get(family) or generated_rules(family)
    ts = {t.name: t for t in tensors}
    ts = rules.sanitize(ts, config)
    if family not in ("deepseek_v3",):
        fp8_left(ts, family)
    return ts, rules


def loaded_tensors(tensors: list[TensorInfo] | tuple[TensorInfo, ...],
                   config: dict[str, Any]) -> tuple[TensorInfo, ...]:
    """The tensors ``mlx_lm.load`` holds: its loader runs the family's sanitize on every
    checkpoint, so an HF-layout one is held as the sanitize leaves it (FP8 blocks dequantized to
    bfloat16, MTP layers, rotary buffers and towers dropped, experts stacked); an MLX-layout one
    passes through. Only where the family's sanitize is replayed and verified; a family mlxfit
    does not know keeps its tensors as stored."""
    mt = config.get("model_type")
    archs = config.get("architectures")
    if not isinstance(mt, str):
        return tuple(tensors)
    family = mlx_lm_module(mt, [a for a in archs if isinstance(a, str)]
                           if isinstance(archs, list) else [])
    rules = RULES.get(family) or generated_rules(family)
    if family not in RULES and family not in QUANT_FACTS or not rules.verified:
        return tuple(tensors)
    return tuple(rules.sanitize({t.name: t for t in tensors}, config).values())
