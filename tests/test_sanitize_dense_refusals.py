"""Checkpoints mlx-lm's dense-family sanitize (or the strict load after it) refuses: the
replay (model/sanitize_dense.py) refuses them too, in one line, where mlx-lm raises a
KeyError, a shape error or a strict-load ValueError. Each case is first run through mlx-lm's
own sanitize (tests/sanitize_oracle.py) to show that it really fails there."""

from __future__ import annotations

import pytest
from sanitize_cases_dense import fixture, small, without
from sanitize_oracle import Layout, mlx_sanitize, model_layout, unstack

from mlxfit.errors import ConfigError
from mlxfit.model.convert_rules import sanitized
from mlxfit.model.tensors import TensorInfo


def _minicpm_tied() -> tuple[dict, Layout]:
    cfg = small("minicpm", dim_model_base=64, tie_word_embeddings=True)
    return cfg, model_layout(cfg)


def _minicpm_no_embedding() -> tuple[dict, Layout]:
    cfg = small("minicpm", dim_model_base=64)
    layout = model_layout(cfg)
    return cfg, without(without(layout, "lm_head.weight"), "model.embed_tokens.weight")


def _ministral3(extra: Layout) -> tuple[dict, Layout]:
    cfg = fixture("ministral3", torch_dtype="bfloat16")
    return cfg, {**model_layout(cfg), **extra}


def _mellum(drop_expert: bool) -> tuple[dict, Layout]:
    cfg = fixture("mellum", torch_dtype="bfloat16")
    layout = unstack(model_layout(cfg), r"(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight",
                     lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    k = "model.layers.1.mlp.experts.3.up_proj.weight"
    if drop_expert:
        return cfg, without(layout, k)
    return cfg, {**layout, k: ("BF16", (16, 64))}


def _gpt2_vector() -> tuple[dict, Layout]:
    cfg = fixture("gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
                  n_ctx=64, torch_dtype="bfloat16")
    layout = {k.removeprefix("model."): v for k, v in model_layout(cfg).items()}
    layout["h.0.attn.c_proj.weight"] = ("BF16", (4096,))
    return cfg, layout


CASES = {
    "minicpm tied": _minicpm_tied,
    "minicpm without embedding": _minicpm_no_embedding,
    "ministral3 scale without weight": lambda: _ministral3(
        {"model.layers.0.self_attn.x_proj.weight_scale_inv": ("F32", ())}),
    "ministral3 scale not broadcastable": lambda: _ministral3(
        {"model.layers.0.self_attn.q_proj.weight_scale_inv": ("F32", (3,))}),
    "mellum expert missing": lambda: _mellum(True),
    "mellum experts differ": lambda: _mellum(False),
    "gpt2 Conv1D weight not 2-D": _gpt2_vector,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_like_mlx_lm(case):
    pytest.importorskip("mlx_lm")
    cfg, layout = CASES[case]()
    with pytest.raises((KeyError, ValueError)):
        mlx_sanitize(cfg, layout)
    family = cfg["model_type"]
    with pytest.raises(ConfigError) as err:
        sanitized([TensorInfo.of(k, dt, shape) for k, (dt, shape) in layout.items()], cfg, family)
    assert "\n" not in str(err.value)
