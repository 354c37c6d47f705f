"""The mlx-lm families mlxfit sizes: one ``Family`` row per mlx-lm model module, each stating
how mlx-lm's own ``make_cache()`` builds that family's caches (mlx_lm/models/*.py, mlx-lm 0.32),
and which module a config's ``model_type`` loads.

Pure: every builder takes the config's fields (``Ctx``) and returns the per-layer plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxfit.model import build_dense as dense
from mlxfit.model import build_hybrid as hybrid
from mlxfit.model import build_mla as mla
from mlxfit.model import build_renames as renames
from mlxfit.model import build_sliding as sliding
from mlxfit.model.build_ctx import Ctx
from mlxfit.model.config import Layer

# mlx_lm/utils.py MODEL_REMAPPING, copied from mlx-lm 0.32.2: these model_types load another
# model module. tests/test_families.py fails when the installed mlx-lm (the measure extra's)
# has a different table. (Its MODEL_ARCHITECTURE_REMAPPING, by architectures, is not mirrored.)
MLX_LM_REMAPPING: dict[str, str] = {
    "mistral": "llama",
    "llava": "mistral3",
    "phi-msft": "phixtral",
    "falcon_mamba": "mamba",
    "joyai_llm_flash": "deepseek_v3",
    "kimi_k2": "deepseek_v3",
    "qwen2_5_vl": "qwen2_vl",
    "minimax_m2": "minimax",
    "iquestcoder": "llama",
    "xverse": "llama",
    "gemma4_unified": "gemma4",
    "deepseek_v41_text": "deepseek_v41",
}

# mlxfit's own aliases, not mlx-lm's (it does not remap these): the named family's builder
# sizes them, the same make_cache layout (parse_config reads MoE widths for every family).
# Most have an mlx-lm module of their own (gemma3_text.py, qwen3_5_moe.py, lfm2_moe.py, ...);
# qwen3_5_text and qwen3_5_moe_text are the text_config model_type inside a qwen3_5 wrapper.
FAMILY_ALIASES: dict[str, str] = {
    "gemma3_text": "gemma3",
    "gemma4_text": "gemma4",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
    "lfm2_moe": "lfm2",
    "lfm2-vl": "lfm2",  # lfm2-vl.py wraps lfm2's language model (text_config)
    "prism_hadamard_qwen35": "qwen3_5",  # qwen3_5 with Hadamard-rotated weights
}


# mlx_lm/utils.py MODEL_ARCHITECTURE_REMAPPING (mlx-lm 0.32.2): a (model_type, architecture)
# pair that loads another module; checked against the installed mlx-lm like the table above.
MLX_LM_ARCH_REMAPPING: dict[tuple[str, str], str] = {
    ("bailing_hybrid", "BailingMoeV3ForCausalLM"): "bailing_moe_v3",
}


def mlx_lm_module(model_type: str, architectures: tuple[str, ...] | list[str] = ()) -> str:
    """The mlx_lm.models module mlx-lm imports for ``model_type`` (utils._get_classes): an
    architecture remapping first, then the model_type remapping."""
    for arch in architectures:
        remapped = MLX_LM_ARCH_REMAPPING.get((model_type, arch))
        if remapped is not None:
            return remapped
    return MLX_LM_REMAPPING.get(model_type, model_type)


@dataclass(frozen=True)
class Family:
    build: Callable[[Ctx], list[Layer]]
    own_cache: bool  # defines make_cache() (mlx-lm then ignores --max-kv-size)
    scores_always: bool = False
    attention_free: bool = False
    gated_q: bool = False  # q_proj also produces the attention output gate (always)
    # The block pattern defines the depth: num_hidden_layers may be absent (nemotron_h.py).
    depth_from_pattern: bool = False
    # The family's own field names mapped to the standard ones before parse_config reads them.
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # Caches mlx-lm never quantizes (CacheList, deepseek_v41's LayerCache: no to_quantized):
    # --kv-bits has no effect.
    never_quantized: bool = False
    # Hand-written attention that reads the cache's arrays directly: mlx-lm fails on a
    # QuantizedKVCache (checked by the oracle), so --kv-bits is refused.
    no_quantized_attention: bool = False
    # Only its KV-shared layers fail on a QuantizedKVCache (afm7's kv-reuse layers, Gemma 4's
    # kv-shared ones hand the cache's quantized tuple to scaled_dot_product_attention): --kv-bits
    # is refused where such a layer reads a converted (full-attention) cache, run otherwise.
    shared_kv_not_quantized: bool = False
    # head_dim when the config omits it, where mlx-lm's ModelArgs has its own default rather
    # than hidden_size // heads (gemma3_text, gemma4_text: 256; cohere2: 128; gpt_oss,
    # falcon_h1: 64). Gemma 3 12B's config has no head_dim, and 3840 // 16 = 240 sized its KV
    # cache 6% small: found by the tensor cross-check (model.crosscheck).
    head_dim_default: int | None = None


# mlx-lm modules whose attention takes hidden_size // num_attention_heads and ignores a config's
# head_dim (their ModelArgs has no head_dim field, so from_dict drops it; tests/
# test_oracle_families.py checks each against mlx-lm with a mismatched head_dim).
# microsoft/Phi-tiny-MoE's config says head_dim 128 with 4096 / 16 heads: mlx-lm's phimoe
# caches 256-wide keys, 2x the KV.
IGNORES_HEAD_DIM = frozenset({
    "qwen2", "qwen2_moe", "mixtral", "phi3", "phimoe", "granite", "granitemoe", "starcoder2",
    "cohere", "internlm3", "gpt2", "lille-130m", "gptj", "dbrx", "Klear", "apertus",
    "bailing_moe", "deepseek", "gpt_neox", "hunyuan", "internlm2", "mimo", "minicpm", "nanochat",
    "phi", "phi3small", "stablelm", "granitemoehybrid", "jamba", "lfm2", "baichuan_m1",
    "nemotron-nas", "afm7", "gpt_bigcode", "plamo",
})


# One row per mlx-lm module. own_cache is True exactly where mlx_lm/models/<module>.py defines
# make_cache(). Families whose mixers are standard GQA attention share standard.
FAMILIES: dict[str, Family] = {
    "llama": Family(sliding.llama, own_cache=True),
    "ministral3": Family(sliding.llama, own_cache=True),
    "qwen2": Family(dense.qwen2, own_cache=False),
    "qwen3": Family(dense.standard, own_cache=False),
    "qwen2_moe": Family(dense.standard, own_cache=False),
    "qwen3_moe": Family(dense.standard, own_cache=False),
    "mixtral": Family(dense.standard, own_cache=False),
    "phi3": Family(dense.standard, own_cache=False),
    "phimoe": Family(dense.standard, own_cache=False),
    "gemma": Family(dense.standard, own_cache=False),
    "gemma2": Family(dense.standard, own_cache=False, scores_always=True,
                     no_quantized_attention=True),
    "gemma3": Family(sliding.gemma3, own_cache=True, head_dim_default=256),
    "gemma3n": Family(sliding.gemma3n, own_cache=True),
    "gemma4": Family(sliding.gemma4, own_cache=True, head_dim_default=256,
                     shared_kv_not_quantized=True),
    "cohere2": Family(sliding.cohere2, own_cache=True, head_dim_default=128),
    "gpt_oss": Family(sliding.gpt_oss, own_cache=True, head_dim_default=64),
    "deepseek_v3": Family(mla.mla, own_cache=False),
    "deepseek_v32": Family(mla.mla_with_indexer, own_cache=True, never_quantized=True),
    "deepseek_v2": Family(mla.deepseek_v2, own_cache=False),
    "glm4_moe_lite": Family(mla.mla, own_cache=False),
    "qwen3_next": Family(hybrid.qwen_linear, own_cache=True, gated_q=True),
    "qwen3_5": Family(hybrid.qwen_linear, own_cache=True, gated_q=True),
    "nemotron_h": Family(hybrid.nemotron_h, own_cache=True, depth_from_pattern=True),
    "granitemoehybrid": Family(hybrid.granite_hybrid, own_cache=True),
    "falcon_h1": Family(hybrid.falcon_h1, own_cache=True, never_quantized=True,
                        head_dim_default=64),
    "jamba": Family(hybrid.jamba, own_cache=True),
    "lfm2": Family(hybrid.lfm2, own_cache=True),
    "llama4": Family(sliding.llama4, own_cache=True),
    "mamba": Family(hybrid.mamba, own_cache=True, attention_free=True),
    "mamba2": Family(hybrid.mamba, own_cache=True, attention_free=True),
    "olmo2": Family(dense.standard, own_cache=False),
    # OLMo 1: hand-written attention (scores materialized; keys.transpose fails on a
    # QuantizedKVCache's tuples), OLMo-1 field names.
    "olmo": Family(dense.olmo, own_cache=False, scores_always=True, no_quantized_attention=True,
                   prepare=renames.prepare_olmo),
    "granite": Family(dense.standard, own_cache=False),
    "granitemoe": Family(dense.standard, own_cache=False),
    "starcoder2": Family(dense.standard, own_cache=False),
    "cohere": Family(dense.standard, own_cache=False),
    "glm4": Family(dense.standard, own_cache=False),
    "glm4_moe": Family(dense.standard, own_cache=False),
    "internlm3": Family(dense.standard, own_cache=False),
    "smollm3": Family(dense.standard, own_cache=False),
    "seed_oss": Family(dense.standard, own_cache=False),
    "ernie4_5": Family(dense.standard, own_cache=False),
    "ernie4_5_moe": Family(dense.standard, own_cache=False),
    "hunyuan_v1_dense": Family(dense.standard, own_cache=False),
    "olmoe": Family(dense.standard, own_cache=False),
    "dots1": Family(dense.standard, own_cache=False),
    # Added with the oracle check (issue 12); every row is verified against mlx-lm's caches.
    "olmo3": Family(sliding.olmo3, own_cache=True),
    "mellum": Family(sliding.by_layer_types, own_cache=True),
    "exaone_moe": Family(sliding.by_layer_types, own_cache=True),
    "laguna": Family(sliding.by_layer_types, own_cache=True),
    "afmoe": Family(sliding.afmoe, own_cache=True),
    "spark2_5": Family(sliding.spark2_5, own_cache=True),
    "exaone4": Family(sliding.exaone4, own_cache=True),
    "step3p5": Family(sliding.step3p5, own_cache=True),
    "mimo_v2_flash": Family(sliding.mimo_v2_flash, own_cache=True),
    "iquestloopcoder": Family(sliding.iquestloopcoder, own_cache=True),
    "youtu_llm": Family(mla.mla_decompressed, own_cache=False),
    "minicpm3": Family(mla.mla_decompressed, own_cache=False),
    "kimi_k25": Family(mla.mla, own_cache=False),
    "kimi_vl": Family(mla.mla, own_cache=False),
    "mistral4": Family(mla.mla, own_cache=False),
    "glm_moe_dsa": Family(mla.mla_with_indexer, own_cache=True, never_quantized=True),
    # LongCat's depth is num_layers; transformers' saves also carry num_hidden_layers = 2 x
    # that (sublayers), which ModelArgs does not declare (mlx_lm_reads drops it).
    "longcat_flash": Family(mla.mla_pair, own_cache=True, never_quantized=True,
                            prepare=renames.renamed({"num_layers": "num_hidden_layers"})),
    "longcat_flash_ngram": Family(mla.longcat_ngram, own_cache=True, never_quantized=True,
                                  prepare=renames.renamed({"num_layers": "num_hidden_layers"})),
    "kimi_linear": Family(hybrid.kimi_linear, own_cache=True),
    "kimi_k3": Family(hybrid.kimi_k3, own_cache=True),
    "bailing_hybrid": Family(hybrid.bailing_hybrid, own_cache=True),
    "bailing_moe_linear": Family(hybrid.bailing_moe_linear, own_cache=True),
    "olmo_hybrid": Family(hybrid.olmo_hybrid, own_cache=True),
    "recurrent_gemma": Family(hybrid.recurrent_gemma, own_cache=True,
                              prepare=renames.prepare_recurrent_gemma),
    "plamo2": Family(hybrid.plamo2, own_cache=True, no_quantized_attention=True),
    "baichuan_m1": Family(hybrid.baichuan_m1, own_cache=True, never_quantized=True),
    "rwkv7": Family(hybrid.rwkv7, own_cache=True, attention_free=True),
    "nemotron-nas": Family(dense.nemotron_nas, own_cache=True),
    "afm7": Family(dense.afm7, own_cache=True,
                   prepare=renames.renamed({"hidden_dim": "hidden_size", "num_heads":
                                      "num_attention_heads", "num_kv_heads": "num_key_value_heads",
                                      "num_layers": "num_hidden_layers"}),
                   shared_kv_not_quantized=True),
    "openelm": Family(dense.openelm, own_cache=False, prepare=renames.prepare_openelm),
    "gpt2": Family(dense.standard, own_cache=False, prepare=renames.renamed(renames.GPT2_NAMES)),
    "gpt_bigcode": Family(dense.gpt_bigcode, own_cache=False,
                          prepare=renames.renamed(renames.GPT2_NAMES)),
    "lille-130m": Family(dense.standard, own_cache=False,
                         prepare=renames.renamed(renames.GPT2_NAMES)),
    "gptj": Family(dense.standard, own_cache=False, prepare=renames.renamed(renames.GPT2_NAMES)),
    "dbrx": Family(dense.standard, own_cache=False, prepare=renames.prepare_dbrx),
    "exaone": Family(dense.standard, own_cache=False,
                     prepare=renames.renamed({"num_layers": "num_hidden_layers"})),
    "plamo": Family(dense.plamo, own_cache=False, no_quantized_attention=True),
    "gear": Family(hybrid.gear, own_cache=True),
    "muse_spark": Family(sliding.by_layer_types, own_cache=True),
    "minimax_m3_vl": Family(dense.minimax_m3, own_cache=True, never_quantized=True),
    # LayerCache: a sliding window plus compressed KV and index keys; no to_quantized, and
    # make_cache() ignores --max-kv-size.
    "deepseek_v41": Family(sliding.deepseek_v41, own_cache=True, never_quantized=True,
                           head_dim_default=512),
    # Standard GQA attention, a KVCache per layer (verified like the others).
    "Klear": Family(dense.standard, own_cache=False),
    "apertus": Family(dense.standard, own_cache=False),
    "bailing_moe": Family(dense.standard, own_cache=False),
    "bitnet": Family(dense.standard, own_cache=False),
    "deepseek": Family(dense.standard, own_cache=False),
    "glm": Family(dense.standard, own_cache=False),
    "gpt_neox": Family(dense.standard, own_cache=False),
    "helium": Family(dense.standard, own_cache=False),
    "hunyuan": Family(dense.standard, own_cache=False),
    "internlm2": Family(dense.standard, own_cache=False),
    "mimo": Family(dense.standard, own_cache=False),
    "minicpm": Family(dense.standard, own_cache=False),
    "minimax": Family(dense.standard, own_cache=False),
    "mistral3": Family(dense.llama_text, own_cache=False),
    "nanochat": Family(dense.standard, own_cache=False),
    "nemotron": Family(dense.standard, own_cache=False),
    "phi": Family(dense.standard, own_cache=False, no_quantized_attention=True),
    "phi3small": Family(dense.standard, own_cache=False, no_quantized_attention=True),
    "pixtral": Family(dense.llama_text, own_cache=False),
    "qwen2_vl": Family(dense.standard, own_cache=False),
    "qwen3_vl": Family(dense.standard, own_cache=False),
    "qwen3_vl_moe": Family(dense.standard, own_cache=False),
    "solar_open": Family(dense.standard, own_cache=False),
    "stablelm": Family(dense.standard, own_cache=False, no_quantized_attention=True),
    "talkie": Family(dense.standard, own_cache=False),
    "telechat3": Family(dense.standard, own_cache=False),
    "nanbeige": Family(dense.standard, own_cache=True),
    # llama4_text.py has no make_cache(): a KVCache on every layer (no chunked local layers,
    # unlike the llama4 wrapper) and --max-kv-size is honoured.
    "llama4_text": Family(dense.standard, own_cache=False),
    "qwen": Family(dense.standard, own_cache=False,
                   prepare=renames.renamed({"kv_channels": "head_dim"})),
    "bailing_moe_v3": Family(hybrid.bailing_moe_v3, own_cache=True),
    "muse_glimmer": Family(sliding.spark2_5, own_cache=True),
    "plamo3": Family(sliding.plamo3, own_cache=True),
    "phixtral": Family(dense.standard, own_cache=False, no_quantized_attention=True,
                       prepare=renames.renamed({"model_dim": "hidden_size", "num_heads":
                                          "num_attention_heads", "num_layers": "num_hidden_layers",
                                          "num_vocab": "vocab_size"})),
}

# Modules under mlx_lm/models/ that are not a text-generation family, and why.
NOT_TEXT_LM: dict[str, str] = {
    "__init__": "package marker",
    "activations": "activation functions shared by the models",
    "base": "BaseModelArgs, masks and the attention helper",
    "bitlinear_layers": "BitNet's quantized linear layer",
    "cache": "the cache classes (KVCache, RotatingKVCache, ArraysCache, ...)",
    "gated_delta": "the gated-delta recurrence kernel (Qwen3-Next, Kimi-Linear, ...)",
    "mla": "MultiLinear, shared by the MLA models",
    "pipeline": "PipelineMixin for pipeline-parallel generation",
    "rope_utils": "RoPE variants",
    "ssm": "the Mamba2 SSD scan",
    "switch_layers": "the MoE expert layers (SwitchGLU)",
}

# Text families mlx-lm ships that mlxfit does not size exactly, and why (none for mlx-lm
# 0.32.2). They are sized as a plain transformer and the result says so ("family_known": false).
NOT_SUPPORTED: dict[str, str] = {}

# An unknown model_type with the standard fields: a plain transformer, full KV on every layer.
GENERIC = Family(dense.standard, own_cache=False)


def resolve_family(model_type: str, architectures: tuple[str, ...] | list[str] = ()
                   ) -> tuple[str, Family | None]:
    """The family that sizes ``model_type`` and its row: mlxfit's alias, else the module mlx-lm
    loads (``architectures``: the config's, for mlx-lm's architecture remapping);
    (model_type, None) when mlxfit has no row for it."""
    name = FAMILY_ALIASES.get(model_type) or mlx_lm_module(model_type, architectures)
    family = FAMILIES.get(name)
    return (name, family) if family is not None else (model_type, None)
