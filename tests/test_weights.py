from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from st_helpers import write_real, write_sparse

from mlxfit.errors import ConfigError
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import summarize_weights
from mlxfit.sources.safetensors_header import read_header

T = TensorInfo.of
Q4 = {"quantization": {"group_size": 64, "bits": 4}}


def qlinear(module: str, out: int, inp: int, bits: int = 4, group: int = 64, aux: str = "BF16"):
    """An mlx-lm affine-quantized Linear: packed U32 weight, scales and biases per group."""
    return [
        T(f"{module}.weight", "U32", [out, inp * bits // 32]),
        T(f"{module}.scales", aux, [out, inp // group]),
        T(f"{module}.biases", aux, [out, inp // group]),
    ]


# --- quantization -----------------------------------------------------------------------------


def test_affine_4bit_g64_is_4_5_bits() -> None:
    # U32 [64, 8] holds 64 x 64 weights; BF16 scales/biases [64, 1]
    s = summarize_weights(qlinear("model.layers.0.mlp.up_proj", 64, 64), Q4)
    assert s.bits_per_weight == 4.5
    assert s.param_count == 4096
    assert s.total_bytes == 2048 + 128 + 128
    assert (s.quant_mode, s.quant_bits, s.quant_group_size) == ("affine", 4, 64)


def test_bits_per_weight_from_a_sparse_file(tmp_path: Path) -> None:
    p = write_sparse(
        tmp_path / "q.safetensors",
        {
            "l.weight": ("U32", [64, 8]),
            "l.scales": ("BF16", [64, 1]),
            "l.biases": ("BF16", [64, 1]),
            "norm.weight": ("BF16", [64]),
        },
    )
    s = summarize_weights(read_header(p), Q4)
    assert s.bits_per_weight == 4.5  # the norm stays float and is not in the average
    assert s.param_count == 4096 + 64


def test_bits_per_weight_from_a_real_file(tmp_path: Path) -> None:
    # numpy has no bfloat16: F16 scales are the same size
    p = write_real(
        tmp_path / "q.safetensors",
        {
            "l.weight": np.zeros((128, 16), dtype=np.uint32),
            "l.scales": np.zeros((128, 4), dtype=np.float16),
            "l.biases": np.zeros((128, 4), dtype=np.float16),
        },
    )
    s = summarize_weights(read_header(p), {"quantization": {"group_size": 32, "bits": 4}})
    assert s.bits_per_weight == 5.0  # 4 + 32/32, as MLX_MEMORY.md lists for 4-bit g32
    assert s.param_count == 128 * 128


def test_8bit_g64_is_8_5() -> None:
    s = summarize_weights(
        qlinear("m.l", 64, 128, bits=8), {"quantization": {"group_size": 64, "bits": 8}}
    )
    assert s.bits_per_weight == 8.5


def test_per_path_override_sets_bits_for_that_module() -> None:
    config = {
        "quantization": {
            "group_size": 64,
            "bits": 4,
            "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
        }
    }
    tensors = qlinear("model.layers.0.mlp.up_proj", 64, 64) + qlinear(
        "model.layers.0.mlp.gate", 64, 64, bits=8
    )
    s = summarize_weights(tensors, config)
    # (2304 + 4352) bytes * 8 / (4096 + 4096) weights
    assert s.bits_per_weight == 6.5
    assert s.param_count == 8192
    assert s.quant_overrides == {"model.layers.0.mlp.gate": {"bits": 8, "group_size": 64}}


def test_override_false_means_unquantized() -> None:
    config = {"quantization": {"group_size": 64, "bits": 4, "model.layers.0.mlp.gate": False}}
    tensors = qlinear("a", 64, 64) + [T("model.layers.0.mlp.gate.weight", "BF16", [8, 64])]
    s = summarize_weights(tensors, config)
    assert s.quant_overrides == {}
    assert s.bits_per_weight == 4.5
    assert s.param_count == 4096 + 512


def test_mxfp4_has_no_biases() -> None:
    tensors = [T("l.weight", "U32", [64, 8]), T("l.scales", "U8", [64, 2])]
    s = summarize_weights(tensors, {"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}})
    assert s.quant_mode == "mxfp4"
    assert s.bits_per_weight == 4.25


def test_mode_defaults_fill_missing_fields() -> None:
    s = summarize_weights([], {"quantization": {"mode": "nvfp4"}})
    assert (s.quant_mode, s.quant_bits, s.quant_group_size) == ("nvfp4", 4, 16)
    assert s.bits_per_weight is None  # nothing quantized to average over


def test_quantization_config_duplicate_is_read_but_transformers_one_is_not() -> None:
    mlx = summarize_weights(
        qlinear("l", 64, 64), {"quantization_config": {"group_size": 64, "bits": 4}}
    )
    assert mlx.quant_mode == "affine" and mlx.bits_per_weight == 4.5
    fp8 = {
        "quantization_config": {"quant_method": "fp8", "bits": 8, "weight_block_size": [128, 128]}
    }
    s = summarize_weights([T("l.weight", "F8_E4M3", [64, 64])], fp8)
    assert s.quant_mode is None and s.bits_per_weight is None and s.param_count == 4096


def test_quantization_at_top_level_with_nested_text_config() -> None:
    config = {"text_config": {"hidden_size": 64}, **Q4}
    tensors = qlinear("language_model.model.layers.0.mlp.up_proj", 64, 64)
    assert summarize_weights(tensors, config).bits_per_weight == 4.5


def test_float_model_has_no_quantization() -> None:
    s = summarize_weights([T("w.weight", "BF16", [4, 8]), T("w.bias", "F32", [4])], {})
    assert (s.quant_mode, s.quant_bits, s.quant_group_size, s.bits_per_weight) == (None,) * 4
    assert s.param_count == 36
    assert s.by_dtype == {"BF16": 64, "F32": 16}


def test_bias_of_a_quantized_linear_is_a_plain_parameter() -> None:
    tensors = qlinear("q_proj", 64, 64) + [T("q_proj.bias", "BF16", [64])]
    s = summarize_weights(tensors, Q4)
    assert s.bits_per_weight == 4.5
    assert s.param_count == 4096 + 64


def test_packed_weights_without_a_quantization_block() -> None:
    with pytest.raises(ConfigError, match="config.json.*no quantization block"):
        summarize_weights(qlinear("l", 64, 64), {})


@pytest.mark.parametrize(
    "block",
    [
        {"bits": "4", "group_size": 64},
        {"bits": 4, "group_size": 0},
        {"bits": True, "group_size": 64},
        {"bits": 4, "group_size": 64, "mode": "fp3"},
        "4bit",
    ],
)
def test_bad_quantization_block(block: object) -> None:
    with pytest.raises(ConfigError, match="config.json"):
        summarize_weights([], {"quantization": block})


def test_bits_that_cannot_unpack() -> None:
    with pytest.raises(ConfigError, match="cannot unpack l.weight"):
        summarize_weights(qlinear("l", 64, 64), {"quantization": {"group_size": 64, "bits": 3}})


# --- classification ---------------------------------------------------------------------------


def moe_tensors() -> list[TensorInfo]:
    return [
        T("model.embed_tokens.weight", "BF16", [1000, 64]),
        T("model.layers.0.mlp.gate.weight", "BF16", [8, 64]),  # router: always read
        T("model.layers.0.mlp.switch_mlp.gate_proj.weight", "BF16", [8, 128, 64]),
        T("model.layers.0.mlp.switch_mlp.down_proj.weight", "BF16", [8, 64, 128]),
        T("model.layers.1.mlp.experts.0.up_proj.weight", "BF16", [128, 64]),
        T("model.layers.1.mlp.experts.1.up_proj.weight", "BF16", [128, 64]),
        T("model.layers.1.mlp.shared_experts.up_proj.weight", "BF16", [128, 64]),
        T("model.norm.weight", "BF16", [64]),
        T("lm_head.weight", "BF16", [1000, 64]),
    ]


def test_expert_bytes() -> None:
    s = summarize_weights(moe_tensors(), {})
    assert s.expert_bytes == 2 * (8 * 128 * 64) * 2 + 2 * (128 * 64) * 2
    assert s.total_bytes == s.all_bytes == sum(t.nbytes for t in moe_tensors())
    assert s.n_tensors == 9


def test_untied_lm_head() -> None:
    s = summarize_weights(moe_tensors(), {"tie_word_embeddings": False})
    assert s.lm_head_bytes == 128_000
    assert s.embedding_bytes == 128_000
    assert s.tied_embeddings is False


def test_tied_lm_head() -> None:
    tensors = [t for t in moe_tensors() if not t.name.startswith("lm_head")]
    s = summarize_weights(tensors, {"tie_word_embeddings": True})
    assert s.lm_head_bytes == 0
    assert s.tied_embeddings is True
    assert s.embedding_bytes == 128_000


def test_quantized_embedding_includes_scales_and_biases() -> None:
    tensors = qlinear("model.embed_tokens", 1000, 64) + qlinear("lm_head", 1000, 64)
    s = summarize_weights(tensors, Q4)
    per_table = 1000 * 8 * 4 + 2 * 1000 * 1 * 2
    assert s.embedding_bytes == per_table
    assert s.lm_head_bytes == per_table
    assert s.param_count == 2 * 64_000


@pytest.mark.parametrize(
    "name",
    [
        "backbone.embeddings.weight",  # Mamba / Nemotron-H
        "transformer.wte.weight",  # GPT-2 / StarCoder
        "gpt_neox.embed_in.weight",
        "language_model.model.embed_tokens.weight",
    ],
)
def test_embedding_names_by_family(name: str) -> None:
    assert summarize_weights([T(name, "BF16", [10, 4])], {}).embedding_bytes == 80


def vlm_tensors() -> list[TensorInfo]:
    return [
        T("language_model.model.embed_tokens.weight", "BF16", [100, 16]),
        T("language_model.model.layers.0.self_attn.q_proj.weight", "BF16", [16, 16]),
        T("vision_tower.vision_model.embeddings.patch_embedding.weight", "BF16", [16, 3, 4, 4]),
        T("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "F32", [32, 16]),
        T("multi_modal_projector.linear.weight", "BF16", [16, 16]),
        T("model.embed_vision.embedding_projection.weight", "BF16", [16, 8]),
        T("model.audio_tower.conv.weight", "BF16", [8, 8]),
        T("model.visual.blocks.0.attn.qkv.weight", "BF16", [48, 16]),
        T("mm_projector.0.weight", "BF16", [16, 4]),
    ]


def test_vision_towers_are_left_out_of_a_text_run() -> None:
    s = summarize_weights(vlm_tensors(), {})
    text = 100 * 16 * 2 + 16 * 16 * 2
    vision = 16 * 48 * 2 + 32 * 16 * 4 + 256 * 2 + 128 * 2 + 64 * 2 + 768 * 2 + 64 * 2
    assert s.vision_bytes == vision
    assert s.total_bytes == text
    assert s.all_bytes == text + vision
    assert sum(s.by_dtype.values()) == s.total_bytes
    assert "F32" not in s.by_dtype  # only the vision tower is F32
    assert s.embedding_bytes == 3200  # the patch embedding is not the token table
    assert s.param_count == 100 * 16 + 16 * 16


def test_with_vision_counts_the_towers() -> None:
    s = summarize_weights(vlm_tensors(), {}, with_vision=True)
    assert s.total_bytes == s.all_bytes == sum(t.nbytes for t in vlm_tensors())
    assert s.by_dtype["F32"] == 32 * 16 * 4
    assert s.with_vision is True


def test_summary_is_frozen() -> None:
    s = summarize_weights([], {})
    with pytest.raises(AttributeError):
        s.total_bytes = 1  # type: ignore[misc]


def test_dense_parameters_per_decoder_layer() -> None:
    """Prefill computes only the first layers, and layers differ in size: the summary counts
    each decoder layer's dense parameters (quantized weights unpacked), leaving out the
    embedding, the routed experts, an MTP head's layers and what sits outside the layers."""
    tensors = (qlinear("model.layers.0.mlp.up_proj", 64, 64)  # 4,096
               + qlinear("model.layers.1.mlp.up_proj", 128, 64)  # 8,192
               + [T("model.layers.1.input_layernorm.weight", "BF16", [64]),
                  T("model.layers.1.mlp.experts.0.up_proj.weight", "BF16", [8, 64]),
                  T("model.embed_tokens.weight", "BF16", [100, 64]),
                  T("model.norm.weight", "BF16", [64]),
                  T("mtp.layers.0.proj.weight", "BF16", [64, 64])])
    s = summarize_weights(tensors, Q4)
    assert s.layer_dense_params == (4096, 8192 + 64)
