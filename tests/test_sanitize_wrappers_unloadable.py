"""The wrapper replays (model/sanitize_wrappers.py) on inputs mlx-lm's sanitize accepts but
tests/test_sanitize_replay.py cannot check, because what the sanitize returns loads only into a
model quantized from the checkpoint's own config (NVFP4, MXFP8, int4 compressed-tensors,
quantized kv_b_proj) or is not a valid checkpoint at all (names the tree round trip mangles;
inputs mlx-lm raises on). Compared with mlx-lm's own sanitize output, run lazily, unloaded."""

from __future__ import annotations

import pytest
from sanitize_cases_wrappers import CASES, fixture, text_fixture
from sanitize_oracle import Layout, build, mlx_sanitize

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_wrappers import SANITIZE
from mlxfit.model.tensors import MLX_TO_SAFETENSORS, SAFETENSORS_TO_MLX, TensorInfo


def _mlx(config, layout: Layout) -> Layout:
    import mlx.core as mx  # heavy, optional: only the converter tests

    model = build(config)
    weights = {k: mx.zeros(shape, dtype=getattr(mx, SAFETENSORS_TO_MLX[dt]))
               for k, (dt, shape) in layout.items()}
    out = model.sanitize(weights)
    return {k: (MLX_TO_SAFETENSORS[str(v.dtype).rsplit(".", 1)[-1]], tuple(v.shape))
            for k, v in out.items()}


def _ours(family: str, config, layout: Layout) -> Layout:
    ts = {k: TensorInfo.of(k, dt, shape) for k, (dt, shape) in layout.items()}
    return {k: (t.dtype, t.shape) for k, t in SANITIZE[family](ts, config).items()}


def _same(family: str, config, layout: Layout) -> Layout:
    want = _mlx(config, layout)
    got = _ours(family, config, layout)
    assert got == want
    assert list(got) == list(want)  # mlx-lm's order too
    return got


L = "model.language_model.layers.0."


def test_muse_spark_nvfp4_experts():
    pytest.importorskip("mlx_lm")
    cfg = fixture("muse_spark")
    e = L + "mlp.experts."
    layout = {e + "gate_up_proj": ("U8", (4, 64, 16)),
              e + "gate_up_proj_weight_scale": ("U8", (4, 64, 2)),
              e + "gate_up_proj_weight_scale_2": ("F32", (4, 2)),
              e + "gate_up_proj_input_scale": ("F32", ()),
              e + "down_proj": ("U8", (4, 32, 16)),
              e + "down_proj_weight_scale": ("U8", (4, 32, 2)),
              e + "down_proj_weight_scale_2": ("F32", (4,)),
              L + "post_attention_residual_gate.gate": ("BF16", (64,))}
    got = _same("muse_spark", cfg, layout)
    assert got[e + "gate_proj.weight"] == ("U32", (4, 32, 4))
    assert got[e + "up_proj.global_scale"] == ("F32", (4,))


def test_minimax_m3_vl_mxfp8():
    pytest.importorskip("mlx_lm")
    cfg = fixture("minimax_m3_vl")
    p = "language_model.model.layers.0.self_attn.q_proj."
    layout = {p + "weight": ("U8", (64, 64)), p + "weight_scale_inv": ("U8", (64, 2)),
              "language_model.model.norm.weight": ("BF16", (64,))}
    got = _same("minimax_m3_vl", cfg, layout)
    assert got[p + "weight"] == ("U32", (64, 16)) and got[p + "scales"] == ("U8", (64, 2))


def test_kimi_k25_int4_and_quantized_kv_b():
    pytest.importorskip("mlx_lm")
    cfg = text_fixture("kimi_k25", kv_lora_rank=64, qk_nope_head_dim=64, v_head_dim=64)
    m = "language_model.model.layers.1.mlp.experts."
    layout: Layout = {}
    for e in range(4):  # compressed-tensors int4: 8 values per int32, a scale per 32
        for w in ("gate_proj", "up_proj", "down_proj"):
            b = f"{m}{e}.{w}."
            layout.update({b + "weight_packed": ("I32", (32, 8)),
                           b + "weight_scale": ("BF16", (32, 2)),
                           b + "weight_shape": ("I64", (2,))})
    a = "language_model.model.layers.0.self_attn.kv_b_proj."
    layout.update({a + "weight": ("U32", (512, 8)), a + "scales": ("BF16", (512, 1)),
                   a + "biases": ("BF16", (512, 1))})
    got = _same("kimi_k25", cfg, layout)
    assert got["language_model.model.layers.0.self_attn.embed_q.weight"] == ("U32", (4, 64, 8))
    assert got[m.replace("experts.", "switch_mlp.") + "up_proj.biases"] == ("BF16", (4, 32, 2))


def test_tree_round_trip_names():
    """pixtral's sanitize is mlx.utils' unflatten/flatten: integer segments are list indices,
    written back as str(int), in numeric order; a name that is also a prefix gains a dot."""
    pytest.importorskip("mlx_lm")
    cfg = fixture("pixtral")
    layout = {"a.10.x": ("BF16", (2,)), "a.02.y": ("BF16", (2,)), "a.-1.z": ("BF16", (2,)),
              "b": ("BF16", (2,)), "b.c": ("BF16", (2,)), "v.01.w": ("F32", (1,)),
              "vision_tower.x": ("BF16", (2,))}
    got = _same("pixtral", cfg, layout)
    assert "a.2.y" in got and "a.0.z" in got and "b." in got and "vision_tower.x" not in got


@pytest.mark.parametrize("family, config, layout", [
    ("gemma3n", fixture("gemma3n"), {"language_model.x": ("BF16", (2,))}),
    ("pixtral", fixture("pixtral"), {}),
    ("qwen3_vl_moe", fixture("qwen3_vl_moe"), {"model.language_model.x": ("BF16", (2,))}),
    ("llama4", fixture("llama4"), {
        "language_model.model.layers.1.feed_forward.experts.gate_up_proj": ("BF16", (2, 4, 5))}),
    ("gemma4_text", fixture("gemma4_text"), {
        "model.layers.0.experts.gate_up_proj": ("BF16", (2, 3, 4))}),
    ("kimi_vl", fixture("kimi_vl"), {
        "language_model.model.layers.0.mlp.experts.0.up_proj.weight": ("BF16", (2, 2))}),
    ("muse_spark", fixture("muse_spark", vision_config={
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "patch_size": 4, "pos_emb_height": 4, "pos_emb_width": 4}), {
        "model.vision_tower.layers.0.attn.q_proj.weight": ("BF16", (4, 4))}),
])
def test_refused_where_mlx_lm_raises(family, config, layout):
    """An input mlx-lm's sanitize raises on is a one-line ConfigError in the replay."""
    pytest.importorskip("mlx_lm")
    with pytest.raises(Exception) as raised:
        _mlx(config, layout)
    assert not isinstance(raised.value, ConfigError)
    with pytest.raises(ConfigError) as refused:
        _ours(family, config, layout)
    assert "\n" not in str(refused.value)


def test_lfm2_vl_pytorch_conv_layout_is_refused():
    """lfm2-vl's sanitize leaves a PyTorch conv weight (C, 1, K) as it is; mlx-lm's strict
    load then refuses it, and so does the replay (a conversion mlx-lm cannot make)."""
    pytest.importorskip("mlx_lm")
    cfg, layout = CASES["lfm2-vl"]()[0]
    torch = {k: (dt, (s[0], s[2], s[1]) if k.endswith("conv.conv.weight") else s)
             for k, (dt, s) in layout.items()}
    assert torch != layout
    with pytest.raises(ValueError, match="shape"):
        mlx_sanitize(cfg, torch)
    with pytest.raises(ConfigError, match="conv.conv.weight"):
        _ours("lfm2-vl", cfg, torch)


def test_kimi_vl_unsplit_kv_b_proj_is_refused():
    """kimi_vl's sanitize does not split kv_b_proj (DeepSeek-V3's does); mlx-lm's strict load
    then refuses the HF layout, and so does the replay."""
    pytest.importorskip("mlx_lm")
    cfg, layout = CASES["kimi_vl"]()[0]
    hf: Layout = {}
    for k, (dt, shape) in layout.items():
        if k.endswith("embed_q.weight"):
            hf[k.replace("embed_q", "kv_b_proj")] = (dt, (shape[0] * 32, shape[1]))
        elif not k.endswith("unembed_out.weight"):
            hf[k] = (dt, shape)
    with pytest.raises(ValueError, match="kv_b_proj"):
        mlx_sanitize(cfg, hf)
    with pytest.raises(ConfigError, match="kv_b_proj"):
        _ours("kimi_vl", cfg, hf)
