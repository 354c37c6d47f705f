"""Checkpoint layouts for the dense families' sanitize replays (model/sanitize_dense.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sanitize_oracle import Case, Layout, fixture, model_layout, rename, unstack, with_extra


def _internlm2() -> list[Case]:
    cfg = fixture("internlm2", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                  vocab_size=256, torch_dtype="bfloat16")
    hf = model_layout(cfg)
    rope = {f"model.layers.{i}.attention.rope.inv_freq": ("F32", (8,)) for i in range(2)}
    return [(cfg, {**hf, **rope})]


# The usual small decoder: 2 layers, hidden 64, 4 heads (2 kv), vocab 256.
_SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
          "vocab_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
          "torch_dtype": "bfloat16"}


def small(family: str, **changes: Any) -> dict[str, Any]:
    return fixture(family, **{**_SMALL, **changes})


def _inv_freq(template: str, layers: int = 2) -> Layout:
    """One rotary inv_freq buffer per layer (``template`` formatted with the layer index)."""
    return {template.format(i): ("F32", (8,)) for i in range(layers)}


_SELF_ATTN_ROPE = "model.layers.{}.self_attn.rotary_emb.inv_freq"


def without(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k != key}


def tied_cases(base: dict[str, Any], extra: Layout | None = None,
               default: bool = True) -> list[Case]:
    """Tied (by the family's ModelArgs default, the key left out, where that ties) with the HF
    checkpoint's lm_head.weight that the sanitize pops, then untied."""
    extra = extra or {}
    untied = {**base, "tie_word_embeddings": False}
    head = model_layout(untied)["lm_head.weight"]
    tied = (without(base, "tie_word_embeddings") if default
            else {**base, "tie_word_embeddings": True})
    return [(tied, {**model_layout(tied), "lm_head.weight": head, **extra}),
            (untied, {**model_layout(untied), **extra})]


def dropping_case(family: str, extra: Layout, **changes: Any) -> list[Case]:
    cfg = small(family, **changes)
    return [(cfg, with_extra(model_layout(cfg), extra))]


def _plamo3() -> dict[str, Any]:
    return small("plamo3", head_dim=16, sliding_window_pattern=2, window_size=16)


def _youtu_llm() -> dict[str, Any]:
    return small("youtu_llm", num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
                 qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)


def _talkie() -> list[Case]:
    cfg = small("talkie", head_dim=16)
    extra = {"model.rotary.inv_freq": ("F32", (8,)), "model.blocks.0.attn.rope_cos": ("F32", (64, 8)),
             "model.blocks.0.attn.rope_sin": ("F32", (64, 8))}
    return [(cfg, with_extra(model_layout(cfg), extra))]


def _lille() -> list[Case]:
    cfg = fixture("lille-130m", n_layer=2, num_hidden_layers=2, n_embd=64, n_head=4,
                  n_kv_heads=2, vocab_size=256, torch_dtype="bfloat16")
    extra = _inv_freq("transformer.layers.{}.attention.rotary_emb.inv_freq")
    return [(cfg, with_extra(model_layout(cfg), extra))]


def _minicpm() -> list[Case]:
    """Untied only: the sanitize gives a tied model the lm_head.weight it lacks (copied from
    the embedding when absent), so mlx-lm's strict load refuses every tied checkpoint."""
    cfg = small("minicpm", dim_model_base=64)
    mlx = model_layout(cfg)
    return [(cfg, without(mlx, "lm_head.weight")), (cfg, mlx)]


def _apertus() -> list[Case]:
    """HF stores xIELU's alpha_p / alpha_n as (1,); tie_word_embeddings is required."""
    out = []
    for tied in (True, False):
        cfg = small("apertus", tie_word_embeddings=tied)
        hf = {k: (dt, (1,) if k.endswith(("alpha_p", "alpha_n")) else shape)
              for k, (dt, shape) in model_layout(cfg).items()}
        if tied:
            hf["lm_head.weight"] = ("BF16", (256, 64))
        out.append((cfg, hf))
    return out


def _mimo() -> list[Case]:
    mtp = {"model.mtp_layers.0.input_layernorm.weight": ("BF16", (64,)),
           "model.mtp_layers.0.self_attn.q_proj.weight": ("BF16", (64, 64))}
    return tied_cases(small("mimo"), {**_inv_freq(_SELF_ATTN_ROPE), **mtp}, default=False)


def _gptj() -> list[Case]:
    cfg = fixture("gptj", n_layer=2, n_embd=64, n_head=4, rotary_dim=8, vocab_size=256,
                  n_positions=64, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf = rename(mlx, lambda k: k.replace("model.", "transformer.", 1))
    for i in range(2):
        hf[f"transformer.h.{i}.attn.bias"] = ("U8", (1, 1, 64, 64))  # a bool mask (the oracle maps no BOOL)
        hf[f"transformer.h.{i}.attn.masked_bias"] = ("F32", ())
    return [(cfg, hf), (cfg, mlx)]


_GPT2_T = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def _gpt2() -> list[Case]:
    """HF GPT-2: unprefixed names, Conv1D weights stored (in, out), the causal mask buffer."""
    cfg = fixture("gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
                  n_ctx=64, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf: Layout = {}
    for k, (dt, shape) in mlx.items():
        k = k.removeprefix("model.")
        hf[k] = (dt, shape[::-1] if k.endswith(_GPT2_T) else shape)
    for i in range(2):
        hf[f"h.{i}.attn.bias"] = ("F32", (1, 1, 64, 64))
    return [(cfg, hf), (cfg, mlx)]


def _gpt_neox() -> list[Case]:
    cfg = fixture("gpt_neox", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  vocab_size=256, torch_dtype="bfloat16")
    mlx = model_layout(cfg)

    def hf_name(k: str) -> str:
        if k.startswith("model.embed_out."):
            return k.removeprefix("model.")
        return k.replace("model.h.", "gpt_neox.layers.").replace("model.", "gpt_neox.")

    hf = rename(mlx, hf_name)
    for i in range(2):
        hf[f"gpt_neox.layers.{i}.attention.bias"] = ("U8", (1, 1, 64, 64))  # a bool mask (the oracle maps no BOOL)
        hf[f"gpt_neox.layers.{i}.attention.masked_bias"] = ("F32", ())
        hf[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = ("F32", (8,))
    return [(cfg, hf), (cfg, mlx)]


_MELLUM_STACKED = r"(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight"


def _mellum() -> list[Case]:
    """Per-expert HF tensors (untied, then tied with the lm_head it pops), and a stacked MLX
    layout that returns early."""
    base = fixture("mellum", torch_dtype="bfloat16", tie_word_embeddings=False)
    (tied, tied_l), (untied, untied_l) = tied_cases(base, default=False)

    def per_expert(layout: Layout) -> Layout:
        return unstack(layout, _MELLUM_STACKED,
                       lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")

    return [(untied, per_expert(untied_l)), (tied, per_expert(tied_l)), (tied, tied_l)]


def _ministral3() -> list[Case]:
    """FP8-style scales: weight_scale_inv after its weight (F32 scalar: the product is F32)
    and before it, activation scales dropped; an integer weight (what mx.load makes of F8)
    times a bfloat16 scale."""
    base = fixture("ministral3", torch_dtype="bfloat16")
    (tied, tied_l), (untied, untied_l) = tied_cases(base, _inv_freq(_SELF_ATTN_ROPE, 4))
    p = "model.layers.0.self_attn."
    scaled = dict(tied_l)
    scaled[p + "q_proj.weight_scale_inv"] = ("F32", ())
    scaled[p + "q_proj.activation_scale"] = ("F32", ())
    before = {"model.layers.1.mlp.up_proj.weight_scale_inv": ("BF16", (1,))}
    u8 = {**untied_l, p + "k_proj.weight": ("U8", untied_l[p + "k_proj.weight"][1]),
          p + "k_proj.weight_scale_inv": ("BF16", ())}
    return [(tied, {**before, **scaled}), (untied, u8)]


def _muse_glimmer() -> list[Case]:
    """Meta's language_model.* nesting with the vision tower, and transformers'
    model.language_model.*."""
    cfg = small("muse_glimmer", head_dim=16, sliding_window=16)
    mlx = model_layout(cfg)
    towers = {"vision_tower.blocks.0.weight": ("BF16", (8, 8)),
              "vision_adapter.proj.weight": ("BF16", (8, 8)),
              "vision_projection.weight": ("BF16", (64, 8))}
    meta = {**towers, **rename(mlx, lambda k: "language_model." + k)}
    hf = rename(mlx, lambda k: k.replace("model.", "model.language_model.", 1))
    return [(cfg, meta), (cfg, hf)]


def _baichuan_m1() -> list[Case]:
    cfg = fixture("baichuan_m1", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                  vocab_size=256, sliding_window_layers=[0], torch_dtype="bfloat16")
    return [(cfg, model_layout(cfg))]


CASES: dict[str, Callable[[], list[Case]]] = {
    "baichuan_m1": _baichuan_m1,
    "internlm2": _internlm2,
    "internlm3": lambda: dropping_case(
        "internlm3", _inv_freq("model.layers.{}.attention.rope.inv_freq"), head_dim=16),
    "nanbeige": lambda: dropping_case("nanbeige", _inv_freq(_SELF_ATTN_ROPE)),
    "olmo2": lambda: dropping_case("olmo2", _inv_freq(_SELF_ATTN_ROPE)),
    "phi3small": lambda: dropping_case(
        "phi3small", _inv_freq(_SELF_ATTN_ROPE), ff_intermediate_size=128),
    "lille-130m": _lille,
    "talkie": _talkie,
    "granite": lambda: tied_cases(small("granite")),
    "seed_oss": lambda: tied_cases(small("seed_oss", head_dim=16)),
    "hunyuan_v1_dense": lambda: tied_cases(small("hunyuan_v1_dense"), default=False),
    "nemotron-nas": lambda: tied_cases(fixture("nemotron-nas", torch_dtype="bfloat16"),
                                       default=False),
    "plamo3": lambda: tied_cases(_plamo3()),
    "youtu_llm": lambda: tied_cases(_youtu_llm()),
    "glm": lambda: tied_cases(small("glm", head_dim=16), _inv_freq(_SELF_ATTN_ROPE)),
    "smollm3": lambda: tied_cases(small("smollm3"), _inv_freq(_SELF_ATTN_ROPE)),
    "bitnet": lambda: tied_cases(small("bitnet"), _inv_freq(_SELF_ATTN_ROPE)),
    "minicpm": _minicpm,
    "apertus": _apertus,
    "mimo": _mimo,
    "gptj": _gptj,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "mellum": _mellum,
    "ministral3": _ministral3,
    "muse_glimmer": _muse_glimmer,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {}
# family -> why its sanitize changes values only (the replay is then the identity, tested on a
# layout whose every sanitize line runs)
VALUES_ONLY: dict[str, str] = {
    "baichuan_m1": "lm_head rows renormalised in float32 and cast back to their dtype",
}
