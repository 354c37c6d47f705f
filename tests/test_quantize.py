"""mlx_lm.convert predicted from headers (mlxfit.model.quantize) against the real converter.

Each family's tiny checkpoint is built in the test: mlx-lm's own module gives the parameter
list, tests/convert_helpers.to_hf undoes its sanitize (experts unstacked, MLA's kv_b_proj
joined and stored FP8 with weight_scale_inv, rotary buffers, MTP layers and a vision tower
added). The real mlx_lm.convert (CPU) then writes the model, and every tensor's name, dtype and
shape, the config's quantization block, the index's total_parameters, the bits per weight
convert prints and the file size are compared with the prediction.
"""

from __future__ import annotations

import json
import re

import pytest
from convert_helpers import (
    dequantized_manifest,
    lazy_converted,
    mlx_params,
    run_convert,
    to_hf,
    write_checkpoint,
)
from st_helpers import (
    DEEPSEEK_V3,
    GEMMA3,
    LLAMA64,
    NEMOTRON_H,
    QWEN3,
    QWEN3_MOE,
    QWEN3_NEXT,
    config_dict,
    invoke,
    make_qwen3_8b_bf16,
)

from mlxfit.errors import ConfigError, UsageError
from mlxfit.model.convert_rules import RULES, generated_rules
from mlxfit.model.families import mlx_lm_module
from mlxfit.model.quantize import QuantRecipe, check_recipe, plan_conversion, recipe_from_label
from mlxfit.model.tensors import TensorInfo
from mlxfit.sources.catalog import load_entry
from mlxfit.sources.folder import load_folder
from mlxfit.sources.safetensors_header import read_headers

BF16 = {"torch_dtype": "bfloat16"}
QWEN35_TEXT = {  # Qwen3.5-9B's text_config cut to four layers of width 256
    "model_type": "qwen3_5_text", "hidden_size": 256, "num_hidden_layers": 4,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4, "vocab_size": 2000, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "attn_output_gate": True, "max_position_embeddings": 8192,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"], "mlp_only_layers": [],
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                        "rope_theta": 10000000, "partial_rotary_factor": 0.25, "type": "default"},
}
FAMILIES = {
    "llama": dict(LLAMA64, tie_word_embeddings=False, **BF16),
    # 96-wide MLP: down_proj is left in float at group 64 but quantized at 32
    "qwen3": dict(QWEN3, hidden_size=192, intermediate_size=96 * 4, **BF16),
    "qwen3_moe": dict(QWEN3_MOE, **BF16),  # the 8-bit router predicate
    "mixtral": {"model_type": "mixtral", "hidden_size": 256, "num_hidden_layers": 2,
                "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
                "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 2000,
                "rms_norm_eps": 1e-5, "rope_theta": 1e6, **BF16},
    "deepseek_v3": dict(DEEPSEEK_V3, **BF16),  # MLA, FP8 experts dequantized on convert
    "qwen3_next": dict(QWEN3_NEXT, **BF16),  # hybrid: gated delta net, MTP dropped
    "nemotron_h": dict(NEMOTRON_H, hybrid_override_pattern="M*ME", n_routed_experts=4,
                       num_experts_per_tok=2, moe_intermediate_size=128,
                       moe_shared_expert_intermediate_size=128, n_group=1, topk_group=1,
                       n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=1.0, **BF16),
    "qwen2": {"model_type": "qwen2", "hidden_size": 256, "num_hidden_layers": 2,
              "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 2000, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
              "tie_word_embeddings": True, **BF16},  # q/k/v biases stay in float
    "gemma3": {"model_type": "gemma3", "vocab_size": 4000, "text_config": GEMMA3,
               "vision_config": {"hidden_size": 64}, **BF16},  # a VLM, tied, tower dropped
    "qwen3_5": {"model_type": "qwen3_5", "text_config": QWEN35_TEXT, "tie_word_embeddings": False,
                **BF16},  # Qwen3.5: gated delta net in a VLM wrapper, MTP and tower dropped
    "qwen3_5_moe": {"model_type": "qwen3_5_moe", "tie_word_embeddings": False, **BF16,
                    "text_config": dict(QWEN35_TEXT, model_type="qwen3_5_moe_text", num_experts=4,
                                        num_experts_per_tok=2, moe_intermediate_size=128,
                                        shared_expert_intermediate_size=128)},
    "glm4_moe": {"model_type": "glm4_moe", "hidden_size": 256, "num_hidden_layers": 3,
                 "intermediate_size": 512, "moe_intermediate_size": 128, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 64, "n_routed_experts": 4,
                 "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                 "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.0,
                 "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                 "attention_bias": True, "use_qk_norm": False, "vocab_size": 2000,
                 "max_position_embeddings": 8192, "tie_word_embeddings": False,
                 "num_nextn_predict_layers": 1, "rope_scaling": None,
                 **BF16},  # GLM-4.5: MoEGate, MTP layer dropped
    # GLM-4.7-Flash cut down: kv_b_proj split into embed_q / unembed_out, quantized; the MTP
    # layer (index num_hidden_layers) dropped; MoEGate left alone
    "glm4_moe_lite": {"model_type": "glm4_moe_lite", "hidden_size": 256, "num_hidden_layers": 3,
                      "intermediate_size": 512, "moe_intermediate_size": 128,
                      "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 64,
                      "kv_lora_rank": 64, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
                      "v_head_dim": 64, "n_routed_experts": 4, "n_shared_experts": 1,
                      "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1,
                      "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.0,
                      "rms_norm_eps": 1e-5, "rope_theta": 1e6, "vocab_size": 2000,
                      "max_position_embeddings": 8192, "tie_word_embeddings": False,
                      "num_nextn_predict_layers": 1, "partial_rotary_factor": 1.0,
                      "attention_bias": False, "scoring_func": "sigmoid",
                      "topk_method": "noaux_tc", "rope_scaling": None, **BF16},
    # DBRX: fused per-layer expert tensors split per expert (w2 transposed)
    "dbrx": {"model_type": "dbrx", "d_model": 256, "n_heads": 4, "n_layers": 2,
             "vocab_size": 2000, "max_seq_len": 4096,
             "attn_config": {"kv_n_heads": 2, "clip_qkv": 8, "rope_theta": 10000},
             "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2},
             **BF16},
    "mistral3": {"model_type": "mistral3", "vision_config": {"hidden_size": 64},
                 "text_config": dict(LLAMA64, model_type="mistral", tie_word_embeddings=False),
                 **BF16},  # a VLM wrapper: tower dropped, names under language_model.
}
RECIPES = {
    "4bit": {}, "8bit": {"q_bits": 8}, "mixed_3_6": {"quant_predicate": "mixed_3_6"},
    "mxfp4": {"q_mode": "mxfp4"}, "nvfp4": {"q_mode": "nvfp4"}, "mxfp8": {"q_mode": "mxfp8"},
    "3bit-g32-f16": {"q_bits": 3, "q_group_size": 32, "dtype": "float16"},
    "mixed_2_6-g32": {"quant_predicate": "mixed_2_6", "q_group_size": 32},
    "float32": {"dtype": "float32", "quantize": False},  # --dtype alone: a cast, no -q
}

# Every recipe where a family predicate meets each mode (the 8-bit affine routers inside an
# mxfp4/nvfp4/mxfp8 model); the rest of the families get one of each kind, to stay cheap.
ALL_RECIPES = ("llama", "qwen3_moe", "qwen3_next", "qwen3_5_moe")
SOME = ("4bit", "mixed_3_6", "mxfp4", "3bit-g32-f16")
NO_DOWN_PROJ = ("dbrx",)  # its experts are w1 / v1 / w2: the mixed recipes have no anchor


def _recipe(kw: dict) -> QuantRecipe:
    return QuantRecipe(bits=kw.get("q_bits"), group_size=kw.get("q_group_size"),
                       mode=kw.get("q_mode", "affine"), predicate=kw.get("quant_predicate"),
                       dtype=kw.get("dtype"), quantize=kw.get("quantize", True))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    pytest.importorskip("mlx_lm")
    base = tmp_path_factory.mktemp("hf")
    return {f: write_checkpoint(base / f, cfg, to_hf(f, cfg, mlx_params(cfg)))
            for f, cfg in FAMILIES.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_prediction_is_what_convert_writes(family, checkpoints, tmp_path):
    """Every recipe on one family: 0 tensors differ, 0 bytes differ; the file size within the
    stated uncertainty of the header's offset digits."""
    src = load_folder(checkpoints[family], family, "folder", None)
    for label, kw in RECIPES.items():
        if family not in ALL_RECIPES and label not in SOME:
            continue
        if family in NO_DOWN_PROJ and "mixed" in label:
            continue  # convert refuses the recipe (test_quantized_source_and_recipe_...)
        dst = tmp_path / label
        printed = run_convert(checkpoints[family], dst, **kw)
        real = {t.name: t for t in read_headers([dst / "model.safetensors"])}
        plan = plan_conversion(src.tensors, src.config, mlx_lm_module(src.config["model_type"]),
                               _recipe(kw))
        pred = {t.name: t for t in plan.tensors}
        assert pred == real, (label, sorted(set(pred) ^ set(real))[:5])
        assert plan.weight_bytes == sum(t.nbytes for t in real.values())
        config = json.loads((dst / "config.json").read_text())
        assert config.get("quantization") == plan.config.get("quantization"), label
        index = json.loads((dst / "model.safetensors.index.json").read_text())["metadata"]
        assert index["total_parameters"] == plan.total_parameters, label
        if plan.recipe.quantize:
            assert f"{plan.bits_per_weight:.3f} bits per weight" in printed, (label, printed)
        size = (dst / "model.safetensors").stat().st_size
        assert abs(size - plan.disk_bytes) <= plan.header_uncertainty_bytes, label


def test_families_exercise_what_they_claim(checkpoints):
    """The checkpoints hold what the comparison is about: FP8 with scales, per-expert tensors,
    rotary buffers, MTP layers, a vision tower; and each converts to something else."""
    def names(f):
        return [t.name for t in load_folder(checkpoints[f], f, "folder", None).tensors]
    ds = load_folder(checkpoints["deepseek_v3"], "d", "folder", None)
    assert any(t.dtype == "F8_E4M3" for t in ds.tensors)
    assert any(n.endswith("weight_scale_inv") for n in names("deepseek_v3"))
    assert any(".experts.3." in n for n in names("qwen3_moe"))
    assert any("rotary_emb.inv_freq" in n for n in names("llama"))
    assert any(n.startswith("mtp.") for n in names("nemotron_h"))
    assert any("vision_tower" in n for n in names("mistral3"))
    assert any(n.startswith("vision_tower.") for n in names("gemma3"))
    assert any(n.endswith("q_proj.bias") for n in names("qwen2"))
    assert any(n.endswith("mlp.experts.gate_up_proj") for n in names("qwen3_5_moe"))
    assert any(n.startswith("model.visual.") for n in names("qwen3_5"))
    assert any(n.startswith("mtp.") for n in names("qwen3_5"))
    assert any(n.startswith("model.layers.3.mlp.experts.0.") for n in names("glm4_moe"))
    assert any(n.endswith("self_attn.kv_b_proj.weight") for n in names("glm4_moe_lite"))
    assert any(n.startswith("model.layers.3.") for n in names("glm4_moe_lite"))  # MTP layer
    assert any(n.endswith("ffn.experts.mlp.w2") for n in names("dbrx"))
    plan = plan_conversion(ds.tensors, ds.config, "deepseek_v3", QuantRecipe())
    assert not any(t.dtype.startswith("F8") for t in plan.tensors)
    assert any(n.endswith("embed_q.scales") for n in (t.name for t in plan.tensors))


PAIRS = [  # (bf16 catalog entry, its published mlx-community quantization, recipe)
    ("mlx-community/Qwen3-8B-bf16", "mlx-community/Qwen3-8B-4bit", QuantRecipe(bits=4)),
    ("mlx-community/Qwen3-8B-bf16", "mlx-community/Qwen3-8B-6bit", QuantRecipe(bits=6)),
    ("mlx-community/Qwen3-0.6B-bf16", "mlx-community/Qwen3-0.6B-8bit", QuantRecipe(bits=8)),
    ("mlx-community/Meta-Llama-3.1-8B-Instruct-bf16", "mlx-community/Llama-3.1-8B-Instruct-4bit",
     QuantRecipe(bits=4)),
]


@pytest.mark.parametrize(("bf16", "quant", "recipe"), PAIRS)
def test_real_dimensions_match_published_quantizations(bf16, quant, recipe):
    """At real sizes: the bf16 catalog manifest converted on paper equals the manifest of the
    published quantization, tensor for tensor."""
    a, b = load_entry(bf16), load_entry(quant)
    plan = plan_conversion(a.tensors, a.config, mlx_lm_module(a.config["model_type"]), recipe)
    assert {t.name: t for t in plan.tensors} == {t.name: t for t in b.tensors}
    assert plan.weight_bytes == b.total_bytes
    assert plan.config["quantization"] == b.config["quantization"]


ROUND_TRIPS = [  # (published quantization read back in float, published target, recipe)
    ("mlx-community/Qwen3-235B-A22B-4bit", "mlx-community/Qwen3-235B-A22B-8bit", QuantRecipe(bits=8)),
    ("mlx-community/Qwen3-Next-80B-A3B-Instruct-8bit",
     "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit", QuantRecipe(bits=4)),
    ("mlx-community/DeepSeek-V3-0324-4bit", "mlx-community/DeepSeek-V3-0324-4bit", QuantRecipe()),
    ("mlx-community/NVIDIA-Nemotron-Nano-9B-v2-4bits", "mlx-community/NVIDIA-Nemotron-Nano-9B-v2-6bit",
     QuantRecipe(bits=6)),
    ("mlx-community/Mixtral-8x7B-Instruct-v0.1-4bit", "mlx-community/Mixtral-8x7B-Instruct-v0.1-4bit",
     QuantRecipe()),
]


@pytest.mark.parametrize(("source", "target", "recipe"), ROUND_TRIPS)
def test_large_models_round_trip_to_published_quantizations(source, target, recipe):
    """MoE routers at 8 bits, MLA, a hybrid at real sizes: a published quantization unpacked to
    float and converted on paper is the published one, per-layer config entries included."""
    tensors, config = dequantized_manifest(load_entry(source))
    b = load_entry(target)
    plan = plan_conversion(tensors, config, mlx_lm_module(config["model_type"]), recipe)
    assert {t.name: t for t in plan.tensors} == {t.name: t for t in b.tensors}
    assert plan.config["quantization"] == b.config["quantization"]
    assert plan.verified


@pytest.mark.parametrize("name", ["deepseek-ai__DeepSeek-V3", "Qwen__Qwen3-Next-80B-A3B-Thinking"])
def test_real_configs_against_mlx_lms_quantizer(name):
    """Real configs at full size: mlx-lm's model built lazily (nothing evaluated) and
    quantized by quantize_model, against the prediction from its HF layout (DeepSeek-V3's FP8
    experts and kv_b_proj; Qwen3-Next's MTP and routers): tensors, config block, shard count."""
    pytest.importorskip("mlx_lm")
    cfg = config_dict(name)
    family = mlx_lm_module(cfg["model_type"])
    hf = to_hf(family, cfg, mlx_params(cfg))
    tensors = [TensorInfo.of(k, d, s) for k, (d, s) in hf.items()]
    for kw in ({}, {"quant_predicate": "mixed_3_6"}, {"q_mode": "mxfp4"}):
        real, block, shards, _ = lazy_converted(cfg, kw)
        plan = plan_conversion(tensors, cfg, family, _recipe(kw))
        assert {t.name: (t.dtype, t.shape) for t in plan.tensors} == real, kw
        assert plan.config["quantization"] == block, kw
        assert plan.shards == shards, kw


# zai-org/GLM-4.7-Flash's dimensions (as vLLM's glm4_moe_lite config test quotes them): issue 24
# reports mlx_lm.convert writing 24,336,479,232 B of weights for its 6-bit conversion.
GLM47_FLASH = {
    "model_type": "glm4_moe_lite", "architectures": ["Glm4MoeLiteForCausalLM"],
    "vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240,
    "moe_intermediate_size": 1536, "num_hidden_layers": 47, "num_attention_heads": 20,
    "num_key_value_heads": 20, "rms_norm_eps": 1e-5, "attention_bias": False,
    "max_position_embeddings": 202752, "rope_theta": 1e6, "rope_scaling": None,
    "partial_rotary_factor": 1.0, "q_lora_rank": 768, "kv_lora_rank": 512,
    "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256, "n_routed_experts": 64,
    "n_shared_experts": 1, "num_experts_per_tok": 4, "norm_topk_prob": True,
    "routed_scaling_factor": 1.8, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
    "first_k_dense_replace": 1, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_glm_4_7_flash_6bit_at_real_size():
    """GLM-4.7-Flash's HF layout (kv_b_proj joined, experts per expert, the MTP layer) to 6
    bits, against mlx-lm's own model quantized lazily: every tensor, and the bytes the real
    conversion wrote (issue 24: the generic rules predicted 7 MB less)."""
    pytest.importorskip("mlx_lm")
    hf = to_hf("glm4_moe_lite", GLM47_FLASH, mlx_params(GLM47_FLASH))
    tensors = [TensorInfo.of(k, d, s) for k, (d, s) in hf.items()]
    real, block, shards, _ = lazy_converted(GLM47_FLASH, {"q_bits": 6})
    plan = plan_conversion(tensors, GLM47_FLASH, "glm4_moe_lite", QuantRecipe(bits=6))
    assert {t.name: (t.dtype, t.shape) for t in plan.tensors} == real
    assert plan.config["quantization"] == block
    assert plan.shards == shards
    assert plan.weight_bytes == 24_336_479_232
    assert plan.verified


def _family_configs() -> dict[str, dict]:
    """One real config per mlx-lm family among the catalog and the fixture configs, without
    its quantization block."""
    from st_helpers import CONFIGS

    from mlxfit.sources.catalog import catalog_ids

    found: dict[str, dict] = {}
    configs = [load_entry(rid).config for rid in catalog_ids()]
    configs += [json.loads(p.read_text()) for p in sorted(CONFIGS.glob("*.json"))]
    configs += [json.loads(p.read_text()) for p in sorted((CONFIGS / "published").glob("*.json"))
                if p.name != "MANIFEST.json"]
    for c in configs:
        c = {k: v for k, v in c.items() if k not in ("quantization", "quantization_config")}
        found.setdefault(mlx_lm_module(c["model_type"]), c)
    return found


def test_every_familys_quantization_at_real_size():
    """For each family of the catalog and the real configs (about 40, at their real sizes):
    mlx-lm's model built lazily in float and quantized by quantize_model (4-bit; and mxfp4)
    against the prediction from the same float layout: which modules quantize, the routers'
    8-bit predicates, MoEGate left alone, cast rules, the config block."""
    pytest.importorskip("mlx_lm")
    families = _family_configs()
    assert len(families) >= 40
    for family, cfg in families.items():
        # mxfp4 where a router predicate puts 8-bit affine layers in an mxfp4 model
        rules = RULES.get(family) or generated_rules(family)
        for kw in ({}, {"q_mode": "mxfp4"})[: 2 if rules.predicate else 1]:
            real, block, _, source = lazy_converted(cfg, kw)
            tensors = [TensorInfo.of(k, d, s) for k, (d, s) in source.items()]
            plan = plan_conversion(tensors, dict(cfg, torch_dtype=None), family, _recipe(kw))
            assert {t.name: (t.dtype, t.shape) for t in plan.tensors} == real, (family, kw)
            assert plan.config["quantization"] == block, (family, kw)


@pytest.mark.parametrize(("kw", "words"), [
    ({"mode": "mxfp4", "bits": 8}, "mxfp4 quantization requires 4 bits"),
    ({"mode": "nvfp4", "group_size": 32}, "requires group size 16"),
    ({"bits": 7}, "supports affine bits 1, 2, 3, 4, 5, 6, 8"),
    ({"bits": 3, "group_size": 16}, "affine group sizes 32, 64, 128"),
    ({"predicate": "mixed_3_6", "mode": "mxfp4"}, "only support affine"),
    ({"predicate": "mixed_9_9"}, "must be one of mixed_2_6"),
    ({"dtype": "float8"}, "must be one of float16"),
])
def test_invalid_combinations_refused(kw, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        check_recipe(QuantRecipe(**kw))


def test_quantized_source_and_recipe_without_down_proj_refused():
    q = load_entry("mlx-community/Qwen3-8B-4bit")
    with pytest.raises(UsageError, match="already MLX-quantized"):
        plan_conversion(q.tensors, q.config, "qwen3", QuantRecipe())
    a = load_entry("mlx-community/Qwen3-0.6B-bf16")
    renamed = [t.__class__.of(t.name.replace("down_proj", "w2"), t.dtype, t.shape)
               for t in a.tensors]
    with pytest.raises(UsageError, match="no down_proj"):
        plan_conversion(renamed, a.config, "qwen3", QuantRecipe(predicate="mixed_3_6"))


def test_fp8_sources(checkpoints):
    """DeepSeek-V3's 128x128 FP8 is dequantized on convert; ue8m0 32x32 blocks load as mxfp8
    (quantized already); FP8 in a family whose sanitize keeps it is refused, not mis-sized."""
    ds = load_folder(checkpoints["deepseek_v3"], "d", "folder", None)
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    plan = plan_conversion(ds.tensors, dict(ds.config, quantization_config=fp8), "deepseek_v3",
                           QuantRecipe())
    assert plan.weight_bytes > 0
    mx8 = dict(fp8, scale_fmt="ue8m0", weight_block_size=[32, 32])
    with pytest.raises(UsageError, match="loads as mxfp8"):
        plan_conversion(ds.tensors, dict(ds.config, quantization_config=mx8), "deepseek_v3",
                        QuantRecipe())
    with pytest.raises(ConfigError, match="qwen3 sanitize does not dequantize"):
        plan_conversion(ds.tensors, ds.config, "qwen3", QuantRecipe())


def test_labels():
    assert [recipe_from_label(s).label for s in ("4", "8bit", "mixed_3_6", "mxfp4")] == [
        "4bit", "8bit", "mixed_3_6", "mxfp4"]
    with pytest.raises(UsageError, match="not a quantization"):
        recipe_from_label("q4_k_m")


def test_cli_fit_sizes_the_conversion():
    """The report names the command and sizes the converted weights; JSON carries the plan,
    whose bytes are the fit's weights."""
    res = invoke("fit", "mlx-community/Qwen3-8B-bf16", "--machine", "M4 Pro 24GB",
                 "--q-bits", "4", "--json")
    doc = json.loads(res.stdout)
    plan = doc["quantization_plan"]
    assert plan["command"] == "mlx_lm.convert --hf-path mlx-community/Qwen3-8B-bf16 -q --q-bits 4"
    assert doc["weights_bytes"] == plan["weight_bytes"] == load_entry(
        "mlx-community/Qwen3-8B-4bit").total_bytes
    bad = invoke("fit", "mlx-community/Qwen3-8B-4bit", "--q-bits", "4", "--machine", "M4 Pro 24GB")
    assert bad.exit_code == 2 and "already MLX-quantized" in bad.stderr
    bad = invoke("fit", "mlx-community/Qwen3-8B-bf16", "--q-mode", "mxfp4", "--q-bits", "8")
    assert bad.exit_code == 2 and "--q-bits 8: mxfp4" in bad.stderr


def test_cli_matrix_quants_and_pick_and_cluster():
    """matrix --quants: one column set per quant, each the fit of that conversion; pick
    --catalog --quants lists the predicted variants; cluster sizes the conversion."""
    res = invoke("matrix", "mlx-community/Qwen3-8B-bf16", "--quants", "4,8,mxfp4",
                 "--chips", "M4 Pro", "--json")
    doc = json.loads(res.stdout)
    assert [q["label"] for q in doc["quants"]] == ["4bit", "8bit", "mxfp4"]
    four = doc["quants"][0]
    one = json.loads(invoke("fit", "mlx-community/Qwen3-8B-bf16", "--machine",
                            four["rows"][0]["name"], "--q-bits", "4", "--json").stdout)
    assert four["rows"][0]["total_bytes"] == one["total_bytes"]
    assert four["rows"][0]["max_safe_context"] == one["max_safe_context"]
    assert doc["quants"][1]["weights_bytes"] == load_entry("mlx-community/Qwen3-8B-8bit").total_bytes
    text = invoke("matrix", "mlx-community/Qwen3-8B-bf16", "--quants", "4,mixed_3_6",
                  "--chips", "M4 Pro").stdout
    assert "mixed_3_6" in text and "--quant-predicate mixed_3_6" in text
    bad = invoke("matrix", "mlx-community/Qwen3-8B-bf16", "--quants", "4,q4_k")
    assert bad.exit_code == 2 and "--quants: 'q4_k' is not a quantization" in bad.stderr

    picked = json.loads(invoke("pick", "--catalog", "--machine", "M4 Pro 24GB", "--quants", "4",
                               "--json").stdout)
    names = [c["model"] for c in picked["catalog"]]
    assert "mlx-community/Qwen3-8B-bf16 as 4bit" in names
    assert not any("Qwen3-8B-4bit as" in n for n in names)  # quantized entries are not converted

    cl = json.loads(invoke("cluster", "mlx-community/Qwen3-8B-bf16", "--host", "M4 Pro 24GB",
                           "--host", "M4 Pro 24GB", "--q-bits", "4", "--json").stdout)
    assert any("mlx_lm.convert --hf-path mlx-community/Qwen3-8B-bf16 -q --q-bits 4" in n
               for n in cl["notes"])
    fit = json.loads(invoke("fit", "mlx-community/Qwen3-8B-bf16", "--machine", "M4 Pro 24GB",
                            "--q-bits", "4", "--json").stdout)
    # cluster's JSON carries the same conversion fit sizes (one plan_to_json), and its weights
    assert cl["quantization_plan"] == fit["quantization_plan"]
    assert cl["weights_bytes"] == fit["weights_bytes"] == cl["quantization_plan"]["weight_bytes"]
    text = invoke("cluster", "mlx-community/Qwen3-8B-bf16", "--host", "M4 Pro 24GB",
                  "--host", "M4 Pro 24GB", "--q-bits", "4").stdout
    assert "as `mlx_lm.convert --hf-path mlx-community/Qwen3-8B-bf16 -q --q-bits 4` would" in text


def test_hub_checkpoint_sized_as_converted(tmp_path, monkeypatch):
    """The Hub source: Qwen3-8B's bf16 headers (sparse 16 GB shards on a local stand-in for the
    Hub) sized as --q-bits 4 are the published 4-bit repo's bytes; no tensor data is read."""
    import huggingface_hub.constants as hfc
    from hub_server import FakeHub
    from huggingface_hub.utils import close_session

    import mlxfit

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("MLXFIT_CACHE_DIR", str(tmp_path / "mlxfit-cache"))
    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", False)  # frozen by huggingface_hub at import
    folder = make_qwen3_8b_bf16(tmp_path / "q8b", config_dict("Qwen__Qwen3-8B"), 4)
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        hub.add_model("Qwen/Qwen3-8B", folder)
        r = mlxfit.fit("Qwen/Qwen3-8B", 4096, machine="M4 Max 64GB", q_bits=4)
        close_session()
        # the JSON, and the first 100 KB of each of the 4 shards (headers kept, the rest dropped)
        assert hub.bytes_sent() < 500_000
    plan = r.weights_detail.conversion
    assert r.source_kind == "hub"
    assert r.weights_bytes == plan.weight_bytes == load_entry(
        "mlx-community/Qwen3-8B-4bit").total_bytes
    assert plan.command == "mlx_lm.convert --hf-path Qwen/Qwen3-8B -q --q-bits 4"


def test_pick_names_the_conversion_it_sizes():
    """A predicted conversion in pick ("<id> as 4bit") carries the plan fit gives the same
    conversion (its mlx_lm.convert command names the source repo); a script no longer has to
    parse the id. Stored entries carry null."""
    picked = json.loads(invoke("pick", "--catalog", "--machine", "M4 Pro 24GB", "--quants", "4",
                               "--json").stdout)
    rows = {c["model"]: c for c in picked["catalog"]}
    conv = rows["mlx-community/Qwen3-8B-bf16 as 4bit"]
    fit = json.loads(invoke("fit", "mlx-community/Qwen3-8B-bf16", "--machine", "M4 Pro 24GB",
                            "--q-bits", "4", "--json").stdout)
    assert conv["quantization_plan"] == fit["quantization_plan"]
    assert conv["quantization_plan"]["command"].startswith(
        "mlx_lm.convert --hf-path mlx-community/Qwen3-8B-bf16 ")
    assert conv["weights_bytes"] == fit["weights_bytes"]
    assert rows["mlx-community/Qwen3-8B-bf16"]["quantization_plan"] is None
    assert all((c["quantization_plan"] is None) == (" as " not in name)
               for name, c in rows.items())
