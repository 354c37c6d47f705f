#!/usr/bin/env python3
"""Measurement campaign on MLX's CPU backend: tiny random-weight models of each family.

Every run goes through ``mlxfit.verbs.measure.run`` (mlx-lm's own model classes and its own
``generate_step``) and is written as one JSON line to ``bench/results/cpu_measurements.jsonl``
with the full config used. MLX's CPU backend counts bytes exactly, so these records are ground
truth for the weights, the caches and the transients of MLX's CPU backend; see
``bench/results/README.md`` for what carries over to Metal.

    python bench/measure_cpu.py                 # the whole campaign (~5-10 min on 2 cores)
    python bench/measure_cpu.py --only gemma3   # runs whose name contains "gemma3"
    python bench/measure_cpu.py --list          # list the runs, measure nothing
    python bench/measure_cpu.py --summary       # table of an existing results file
    python bench/measure_cpu.py --mixers        # issue 12: RWKV-7 / RG-LRU / GLA / KDA mixers
    python bench/measure_cpu.py --qwen35        # issue 26: Qwen3.5 at 0.8B- and 4B-like ratios

float32 matmuls go through BLAS; if Debian's OpenBLAS is installed
(``apt-get install libopenblas0-pthread``) the script re-executes itself with it preloaded, which
is ~40x faster than the wheel's own BLAS and changes no memory figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = HERE / "results" / "cpu_measurements.jsonl"
LONG_OUT = HERE / "results" / "cpu_measurements_long.jsonl"
MIXERS_OUT = HERE / "results" / "cpu_measurements_mixers.jsonl"
QWEN35_OUT = HERE / "results" / "cpu_measurements_qwen35.jsonl"
OPENBLAS = "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"

# --------------------------------------------------------------------------------------------
# Tiny configs, one per family. Field names are those of the Hugging Face / mlx-lm config.json.
# Every model has at least 2 layers with a cache after its first attention layer: prefill only
# evaluates the caches, so the last layer's attention and MLP are never computed.
# --------------------------------------------------------------------------------------------

LLAMA64 = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "intermediate_size": 768,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "vocab_size": 2000,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
LLAMA128 = dict(LLAMA64, hidden_size=512, intermediate_size=1024, head_dim=128)
LLAMA_WIDE = dict(
    LLAMA64, hidden_size=1024, intermediate_size=4096, num_attention_heads=8, head_dim=128
)
QWEN3 = {
    "model_type": "qwen3",
    "hidden_size": 256,
    "num_hidden_layers": 3,
    "intermediate_size": 768,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rms_norm_eps": 1e-6,
    "vocab_size": 3000,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
GEMMA3 = {
    "model_type": "gemma3_text",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "intermediate_size": 768,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "query_pre_attn_scalar": 64,
    "rms_norm_eps": 1e-6,
    "vocab_size": 4000,
    "sliding_window": 128,
    "sliding_window_pattern": 2,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
}
GPT_OSS = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 2000,
    "rms_norm_eps": 1e-5,
    "hidden_size": 256,
    "intermediate_size": 256,
    "head_dim": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "sliding_window": 128,
    "rope_theta": 150000,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
}
QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 256,
    "num_hidden_layers": 3,
    "intermediate_size": 768,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "moe_intermediate_size": 256,
    "rms_norm_eps": 1e-6,
    "vocab_size": 2000,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "max_position_embeddings": 40960,
    "norm_topk_prob": True,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "vocab_size": 2000,
    "hidden_size": 256,
    "intermediate_size": 768,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_shared_experts": 1,
    "n_routed_experts": 8,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 128,
    "q_lora_rank": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 64,
    "qk_nope_head_dim": 64,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "n_group": 1,
    "topk_group": 1,
    "num_experts_per_tok": 2,
    "moe_layer_freq": 1,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
}
QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "shared_expert_intermediate_size": 256,
    "mlp_only_layers": [],
    "moe_intermediate_size": 128,
    "rms_norm_eps": 1e-6,
    "vocab_size": 2000,
    "num_key_value_heads": 2,
    "rope_theta": 10000000.0,
    "partial_rotary_factor": 0.25,
    "max_position_embeddings": 8192,
    "head_dim": 64,
    "full_attention_interval": 2,
    "tie_word_embeddings": False,
}
QWEN3_NEXT_DENSE = dict(QWEN3_NEXT, mlp_only_layers=[0, 1, 2, 3])  # bf16 MoE cannot run on CPU

NEMOTRON_H = {
    "model_type": "nemotron_h",
    "vocab_size": 2000,
    "hidden_size": 256,
    "intermediate_size": 512,
    "max_position_embeddings": 8192,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "attention_bias": False,
    "mamba_num_heads": 8,
    "mamba_head_dim": 32,
    "mamba_proj_bias": False,
    "ssm_state_size": 64,
    "conv_kernel": 4,
    "n_groups": 2,
    "mlp_bias": False,
    "layer_norm_epsilon": 1e-5,
    "use_bias": False,
    "use_conv_bias": True,
    "hybrid_override_pattern": ["M", "*", "M", "-"],
    "num_hidden_layers": 4,
    "rope_theta": 10000.0,
}
GRANITE_HYBRID = {
    "model_type": "granitemoehybrid",
    "vocab_size": 2000,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "max_position_embeddings": 8192,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "attention_bias": False,
    "embedding_multiplier": 12.0,
    "attention_multiplier": 0.015625,
    "logits_scaling": 4.0,
    "residual_multiplier": 0.22,
    "layer_types": ["mamba", "attention", "mamba", "mamba"],
    "rms_norm_eps": 1e-5,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "shared_intermediate_size": 512,
    "mamba_n_heads": 8,
    "mamba_d_head": 32,
    "mamba_proj_bias": False,
    "mamba_d_state": 64,
    "mamba_d_conv": 4,
    "mamba_n_groups": 1,
    "mamba_conv_bias": True,
    "position_embedding_type": "rope",
    "tie_word_embeddings": True,
}

# Issue 12 item 5: the linear-recurrence mixers of the new families (mlx-lm 0.32.2), each a
# per-token op loop on the CPU backend: RWKV-7's WKV (rwkv7.py), RG-LRU (recurrent_gemma.py),
# Bailing's GLA (bailing_moe_linear.py recurrent_gla) and Kimi's KDA (kimi_linear.py, the
# vectorized-gate gated delta rule of gated_delta.py).
# The same configs tests/test_measure_cpu.py measures (tests/st_helpers.py: one copy).
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]
from st_helpers import BAILING_LINEAR, KIMI_LINEAR, RECURRENT_GEMMA, RWKV7

KV8 = {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 0}


def _q4(config: dict) -> dict:
    return dict(config, quantization={"group_size": 64, "bits": 4})


def campaign() -> list[dict]:
    """The runs: dicts with group, name, config, ctx and measure_run keyword arguments."""
    runs: list[dict] = []

    def add(group, name, config, ctx, **kw):
        tag = "_".join(f"{k}{v}" for k, v in sorted(kw.items()) if k != "quantized_kv_start")
        full = f"{group}/{name}/ctx{ctx}" + (f"/{tag}" if tag else "")
        runs.append({"group": group, "name": full, "config": config, "ctx": ctx, "kw": kw})

    # Families: contexts crossing 256-token steps and (where relevant) the 128-token window.
    for ctx in (300, 1000, 2100):
        for step in (2048, 512, 256):
            add("family", "llama_hd64", LLAMA64, ctx, prefill_step_size=step)
    add("family", "llama_hd64", LLAMA64, 300, prefill_step_size=512, **KV8)
    add("family", "llama_hd64", LLAMA64, 2100, prefill_step_size=512, **KV8)
    add("family", "llama_hd64", LLAMA64, 2100, prefill_step_size=2048, **KV8)
    for ctx in (300, 1000, 2100):
        add("family", "llama_hd128", LLAMA128, ctx, prefill_step_size=2048)
    add("family", "llama_hd128", LLAMA128, 2100, prefill_step_size=512)
    add("family", "llama_hd128", LLAMA128, 2100, prefill_step_size=512, **KV8)
    for ctx in (300, 1100, 2100):
        add("family", "qwen3", QWEN3, ctx, prefill_step_size=2048)
    add("family", "qwen3", QWEN3, 2100, prefill_step_size=256)
    add("family", "qwen3", QWEN3, 2100, prefill_step_size=2048, **KV8)
    for ctx in (100, 300, 1100, 2100):
        add("family", "gemma3_text", GEMMA3, ctx, prefill_step_size=2048)
    add("family", "gemma3_text", GEMMA3, 1100, prefill_step_size=256)
    add("family", "gemma3_text", GEMMA3, 2100, prefill_step_size=512)
    add("family", "gemma3_text", GEMMA3, 1100, prefill_step_size=512, **KV8)  # expected error
    for ctx in (100, 300, 1100, 2100):
        add("family", "gpt_oss", GPT_OSS, ctx, prefill_step_size=2048)
    add("family", "gpt_oss", GPT_OSS, 2100, prefill_step_size=256)
    for ctx in (300, 1100, 2100):
        add("family", "qwen3_moe", QWEN3_MOE, ctx, prefill_step_size=2048)
    add("family", "qwen3_moe", QWEN3_MOE, 2100, prefill_step_size=512)
    add("family", "qwen3_moe", QWEN3_MOE, 1100, prefill_step_size=2048, **KV8)
    for ctx in (300, 1100, 2100):
        add("family", "deepseek_v3", DEEPSEEK_V3, ctx, prefill_step_size=2048)
    add("family", "deepseek_v3", DEEPSEEK_V3, 2100, prefill_step_size=256)
    add("family", "deepseek_v3", DEEPSEEK_V3, 1100, prefill_step_size=512, **KV8)
    for ctx in (300, 1100, 2100):
        add("family", "qwen3_next", QWEN3_NEXT, ctx, prefill_step_size=2048)
    add("family", "qwen3_next", QWEN3_NEXT, 2100, prefill_step_size=256)
    add("family", "qwen3_next", QWEN3_NEXT, 1100, prefill_step_size=2048, **KV8)
    for ctx in (300, 1100, 2100):
        add("family", "nemotron_h", NEMOTRON_H, ctx, prefill_step_size=2048)
    add("family", "nemotron_h", NEMOTRON_H, 2100, prefill_step_size=256)
    add("family", "nemotron_h", NEMOTRON_H, 2100, prefill_step_size=512)
    for ctx in (300, 1100, 2100):
        add("family", "granitemoehybrid", GRANITE_HYBRID, ctx, prefill_step_size=2048)
    add("family", "granitemoehybrid", GRANITE_HYBRID, 2100, prefill_step_size=512)

    # bf16 and quantized weights (no BLAS for these: kept short).
    add("bf16", "llama_hd64", LLAMA64, 1000, prefill_step_size=2048, dtype="bfloat16")
    add("bf16", "llama_hd64", LLAMA64, 2100, prefill_step_size=2048, dtype="bfloat16")
    add("bf16", "llama_hd64", LLAMA64, 2100, prefill_step_size=512, dtype="bfloat16")
    add("bf16", "llama_hd64", LLAMA64, 2100, prefill_step_size=512, dtype="bfloat16", **KV8)
    add("bf16", "llama_hd128", LLAMA128, 2100, prefill_step_size=2048, dtype="bfloat16")
    add("bf16", "llama_wide", LLAMA_WIDE, 600, prefill_step_size=512, dtype="bfloat16")
    add("bf16", "gemma3_text", GEMMA3, 1100, prefill_step_size=2048, dtype="bfloat16")
    add("bf16", "gpt_oss", GPT_OSS, 1100, prefill_step_size=2048, dtype="bfloat16")  # error
    add("bf16", "qwen3_moe", QWEN3_MOE, 1100, prefill_step_size=2048, dtype="bfloat16")  # error
    add("bf16", "nemotron_h", NEMOTRON_H, 1100, prefill_step_size=512, dtype="bfloat16")
    add("bf16", "qwen3_next_dense", QWEN3_NEXT_DENSE, 1100, prefill_step_size=512, dtype="bfloat16")
    add("q4", "llama_hd64_q4", _q4(LLAMA64), 1100, prefill_step_size=512, dtype="bfloat16")
    add("q4", "llama_hd64_q4", _q4(LLAMA64), 2100, prefill_step_size=2048, dtype="float32")
    add("q4", "qwen3_moe_q4", _q4(QWEN3_MOE), 1100, prefill_step_size=2048, dtype="float32")

    # A wide llama: how the non-attention transient scales with the widths.
    for ctx in (1100, 2100):
        add("wide", "llama_wide", LLAMA_WIDE, ctx, prefill_step_size=2048)
    add("wide", "llama_wide", LLAMA_WIDE, 2100, prefill_step_size=512)

    # Chunk sweep at 4096: the per-chunk-token transient.
    for step in (256, 512, 1024, 2048):
        add("chunk", "llama_hd64", LLAMA64, 4096, prefill_step_size=step)
    for step in (512, 2048):
        add("chunk", "qwen3_moe", QWEN3_MOE, 4096, prefill_step_size=step)
        add("chunk", "nemotron_h", NEMOTRON_H, 4096, prefill_step_size=step)

    # Width probes (llama): one dimension at a time, for the activation coefficients.
    probes = {
        "i1536": dict(LLAMA64, intermediate_size=1536),
        "i3072": dict(LLAMA64, intermediate_size=3072),
        "h512": dict(LLAMA64, hidden_size=512),
        "h1024": dict(LLAMA64, hidden_size=1024),
        "nh8": dict(LLAMA64, num_attention_heads=8),
        "nh16": dict(LLAMA64, num_attention_heads=16),
        "kv1": dict(LLAMA64, num_key_value_heads=1),
        "kv4": dict(LLAMA64, num_key_value_heads=4),
        "hd128": dict(LLAMA64, head_dim=128),
        "L4": dict(LLAMA64, num_hidden_layers=4),
        "L1": dict(LLAMA64, num_hidden_layers=1),
        "v32k": dict(LLAMA64, vocab_size=32000),
    }
    for tag, cfg in probes.items():
        for ctx, step in ((2100, 2048), (4096, 2048), (4096, 512)):
            add("probe", f"llama_{tag}", cfg, ctx, prefill_step_size=step)

    # Second configs of the families with their own transient terms (MLA, sinks, Mamba,
    # linear attention), so that a coefficient is not fitted on one shape only.
    dsv3_b = dict(DEEPSEEK_V3, num_attention_heads=8, num_key_value_heads=8, kv_lora_rank=256)
    nemo_b = dict(NEMOTRON_H, mamba_num_heads=16, hybrid_override_pattern=["M", "*", "M", "-"])
    qnext_b = dict(QWEN3_NEXT, linear_num_value_heads=8)
    oss_b = dict(GPT_OSS, num_attention_heads=8)
    for ctx, step in ((2100, 2048), (4096, 2048), (4096, 512)):
        add("family2", "deepseek_v3_h8_r256", dsv3_b, ctx, prefill_step_size=step)
        add("family2", "nemotron_h_mh16", nemo_b, ctx, prefill_step_size=step)
        add("family2", "gpt_oss_h8", oss_b, ctx, prefill_step_size=step)
    for ctx, step in ((1100, 2048), (2100, 512)):
        add("family2", "qwen3_next_hv8", qnext_b, ctx, prefill_step_size=step)

    # Decode and cache rules: growth past a 256 step while decoding, --max-kv-size.
    add("decode", "llama_hd64", LLAMA64, 2100, prefill_step_size=2048, gen_tokens=100)
    add("decode", "llama_hd64", LLAMA64, 2100, prefill_step_size=512, gen_tokens=300, **KV8)
    # llama.py defines make_cache(), so make_prompt_cache ignores max_kv_size for it; qwen3
    # has none and gets RotatingKVCache(max_kv_size, keep=4) on every layer.
    add("decode", "llama_hd64", LLAMA64, 2100, prefill_step_size=512, max_kv_size=512)
    add("decode", "qwen3", QWEN3, 2100, prefill_step_size=512, max_kv_size=512)
    add("decode", "qwen3", QWEN3, 2100, prefill_step_size=2048, max_kv_size=512, gen_tokens=20)
    add("decode", "qwen3", QWEN3, 300, prefill_step_size=2048, max_kv_size=512, gen_tokens=20)
    # A short prompt and a long generation: the decode phase holds the peak.
    add("decode", "llama_hd64", LLAMA64, 1500, prefill_step_size=2048, gen_tokens=1400)
    add("decode", "gemma3_text", GEMMA3, 1100, prefill_step_size=512, gen_tokens=40)
    add("decode", "qwen3_next", QWEN3_NEXT, 1100, prefill_step_size=2048, gen_tokens=40)

    # Repeats: the run-to-run spread of the CPU backend's peaks (its scheduler runs ahead of
    # the kernels by a variable amount).
    for rep in (1, 2, 3):
        add("repeat", f"llama_hd64_rep{rep}", LLAMA64, 2100, prefill_step_size=512)
        add("repeat", f"gemma3_text_rep{rep}", GEMMA3, 2100, prefill_step_size=2048)
        add("repeat", f"nemotron_h_rep{rep}", NEMOTRON_H, 2100, prefill_step_size=512)
    return runs


def long_campaign() -> list[dict]:
    """Issue 18: MLA prefill and hybrid (gated-delta) layers at long prompts, tiny widths so
    each run stays short on a shared CPU (``--long``; written to cpu_measurements_long.jsonl)."""
    runs: list[dict] = []

    def add(name, config, ctx, **kw):
        tag = "_".join(f"{k}{v}" for k, v in sorted(kw.items()))
        runs.append({"group": "long", "name": f"long/{name}/ctx{ctx}/{tag}", "config": config,
                     "ctx": ctx, "kw": kw})

    # Attention cost grows with the square of the prompt on the CPU's own BLAS (~3 GFLOP/s):
    # MLA and the hybrid at narrower widths than the campaign's so 8K-16K prompts stay short.
    mla = dict(DEEPSEEK_V3, max_position_embeddings=40960, hidden_size=128, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=64, q_lora_rank=96,
               qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=32, intermediate_size=256,
               moe_intermediate_size=64, first_k_dense_replace=2)
    for ctx in (2100, 4200, 8400):
        add("mla_mini", mla, ctx, prefill_step_size=2048)
    add("mla_mini", mla, 8400, prefill_step_size=512)
    # One full-attention layer, the last (never computed in prefill): the runs measure the
    # gated-delta state and scan at long prompts.
    qn = dict(QWEN3_NEXT, max_position_embeddings=40960, hidden_size=128,
              full_attention_interval=4, linear_num_value_heads=4, linear_num_key_heads=2,
              linear_value_head_dim=32, linear_key_head_dim=32, intermediate_size=256,
              moe_intermediate_size=64, shared_expert_intermediate_size=128)
    qn_big = dict(qn, hidden_size=256, linear_num_value_heads=16, linear_num_key_heads=4,
                  linear_value_head_dim=64, linear_key_head_dim=64)
    for ctx in (8400, 16500):
        add("qwen3_next_mini", qn, ctx, prefill_step_size=2048)
        add("qwen3_next_hv16_d64", qn_big, ctx, prefill_step_size=2048)
    # Mamba2 (SSD scan) the same way: the attention layer last.
    ssm = dict(NEMOTRON_H, max_position_embeddings=40960, hybrid_override_pattern=["M", "-", "M", "*"])
    ssm_big = dict(ssm, mamba_num_heads=32, mamba_head_dim=64, hidden_size=512)
    for ctx in (8400, 16500):
        add("nemotron_h_mini", ssm, ctx, prefill_step_size=2048)
        add("nemotron_h_mh32_d64", ssm_big, ctx, prefill_step_size=2048)
    return runs


def mixers_campaign() -> list[dict]:
    """Issue 12 item 5: the prefill transient of the RWKV-7, RG-LRU, GLA and KDA mixers at
    chunks 256-1024, two widths each and bf16 (``--mixers``; cpu_measurements_mixers.jsonl).
    Where the last layer is a full-attention one, it is never computed in prefill: those
    configs isolate the mixer."""
    runs: list[dict] = []

    def add(name, config, ctx, **kw):
        tag = "_".join(f"{k}{v}" for k, v in sorted(kw.items()))
        runs.append({"group": "mixers", "name": f"mixers/{name}/ctx{ctx}/{tag}",
                     "config": config, "ctx": ctx, "kw": kw})

    rwkv_h8 = dict(RWKV7, hidden_size=512)  # 8 heads of 64
    rwkv_d32 = dict(RWKV7, head_dim=32)  # 8 heads of 32
    for step in (256, 512, 1024):
        add("rwkv7", RWKV7, 1100, prefill_step_size=step)
    add("rwkv7_h8", rwkv_h8, 1100, prefill_step_size=1024)
    add("rwkv7_d32", rwkv_d32, 1100, prefill_step_size=1024)
    add("rwkv7", RWKV7, 600, prefill_step_size=512, dtype="bfloat16")
    add("rwkv7", RWKV7, 1100, prefill_step_size=1024, dtype="bfloat16")
    add("rwkv7_h8", rwkv_h8, 1100, prefill_step_size=1024, dtype="bfloat16")

    rg_wide = dict(RECURRENT_GEMMA, hidden_size=512, num_attention_heads=8)
    rg_lru = dict(RECURRENT_GEMMA, block_types=["recurrent", "recurrent", "recurrent",
                                                "attention"])  # attention last: never run
    for step in (256, 1024):
        add("recurrent_gemma", RECURRENT_GEMMA, 1100, prefill_step_size=step)
    add("recurrent_gemma", RECURRENT_GEMMA, 2100, prefill_step_size=1024)
    add("recurrent_gemma_w512", rg_wide, 1100, prefill_step_size=1024)
    for step in (256, 1024):
        add("recurrent_gemma_lru_only", rg_lru, 1100, prefill_step_size=step)
    add("recurrent_gemma", RECURRENT_GEMMA, 1100, prefill_step_size=1024, dtype="bfloat16")

    gla = dict(BAILING_LINEAR, layer_group_size=4)  # layers 0-2 GLA, 3 global (never run)
    gla_d128 = dict(gla, hidden_size=512)  # 4 heads of 128
    gla_dense = dict(gla, num_experts=None)  # bf16 MoE has no CPU path
    for step in (256, 512, 1024):
        add("bailing_gla_only", gla, 1100, prefill_step_size=step)
    add("bailing_gla_only_d128", gla_d128, 1100, prefill_step_size=1024)
    for step in (256, 1024):
        add("bailing_moe_linear", BAILING_LINEAR, 1100, prefill_step_size=step)
    add("bailing_gla_only_dense", gla_dense, 1100, prefill_step_size=1024, dtype="bfloat16")
    add("bailing_gla_only_d128_dense", dict(gla_d128, num_experts=None), 1100,
        prefill_step_size=1024, dtype="bfloat16")

    kda_only = dict(KIMI_LINEAR, linear_attn_config=dict(
        KIMI_LINEAR["linear_attn_config"], kda_layers=[1, 2, 3]))  # MLA last: never run
    kda_h8 = dict(kda_only, linear_attn_config=dict(kda_only["linear_attn_config"], num_heads=8))
    for step in (256, 1024):
        add("kimi_linear", KIMI_LINEAR, 1100, prefill_step_size=step)
    for step in (256, 1024):
        add("kimi_kda_only", kda_only, 1100, prefill_step_size=step)
    add("kimi_kda_only_h8", kda_h8, 1100, prefill_step_size=1024)
    add("kimi_kda_only_dense", dict(kda_only, first_k_dense_replace=4), 1100,
        prefill_step_size=1024, dtype="bfloat16")
    return runs


# Issue 26: Qwen3.5's text model (qwen3_5.py: packed in_proj_qkv, in_proj_z/b/a, gated RMSNorm)
# at the two width ratios of the published small models: 0.8B-like (as many value heads as key
# heads: conv_dim = 3 x Hv x Dv) and 4B/9B-like (twice as many: conv_dim = 2 x Hv x Dv).
QWEN35_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "rms_norm_eps": 1e-6,
    "vocab_size": 2000,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
    "rope_parameters": {"type": "default", "mrope_section": [11, 11, 10], "rope_theta": 100000,
                        "partial_rotary_factor": 0.25},
}


def qwen35_campaign() -> list[dict]:
    """Issue 26: Qwen3.5 hybrids at 0.8B-like (Hv = Hk) and 4B-like (Hv = 2 Hk) head ratios, the
    full-attention layer last (so prefill computes the gated-delta layers only) and every fourth
    (attention computed too), float32 and bf16 (``--qwen35``; cpu_measurements_qwen35.jsonl)."""
    runs: list[dict] = []

    def add(name, text, ctx, **kw):
        tag = "_".join(f"{k}{v}" for k, v in sorted(kw.items()))
        runs.append({"group": "qwen35", "name": f"qwen35/{name}/ctx{ctx}/{tag}",
                     "config": {"model_type": "qwen3_5", "text_config": text,
                                "tie_word_embeddings": True}, "ctx": ctx, "kw": kw})

    r08 = dict(QWEN35_TEXT)  # Hk = Hv = 4: the 0.8B's ratio (16/16)
    r4b = dict(QWEN35_TEXT, linear_num_value_heads=8)  # Hv = 2 Hk: the 4B/9B ratio (32/16)
    wide08 = dict(r08, hidden_size=512, linear_num_key_heads=8, linear_num_value_heads=8)
    wide4b = dict(r4b, hidden_size=512, linear_num_key_heads=8, linear_num_value_heads=16)
    for name, text in (("r08_hv4", r08), ("r4b_hv8", r4b), ("r08_hv8_h512", wide08),
                       ("r4b_hv16_h512", wide4b)):
        add(name, text, 1100, prefill_step_size=512)
        add(name, text, 2100, prefill_step_size=1024, dtype="bfloat16")
    # Attention computed in prefill (layer 2 of 4 is full attention).
    add("r4b_hv8_attn", dict(r4b, full_attention_interval=2), 2100, prefill_step_size=1024)
    return runs


def _maybe_reexec_with_openblas(args) -> None:
    if args.no_openblas or os.environ.get("MLXFIT_BENCH_CHILD") == "1":
        return
    if OPENBLAS in os.environ.get("LD_PRELOAD", "") or not os.path.exists(OPENBLAS):
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = (OPENBLAS + " " + env.get("LD_PRELOAD", "")).strip()
    env["MLXFIT_BENCH_CHILD"] = "1"
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _mb(x) -> str:
    return "-" if x is None else f"{x / 1e6:.2f}"


def _transient(rec: dict) -> dict:
    """Transient at the peak: peak - weights - the caches' bytes at that moment.

    For a prefill peak, the caches at that moment are those after the peak chunk (they reach their
    new capacity within the chunk: full attention rounded up to 256 tokens, rotating caches at
    window - 1 + chunk). For a decode peak, the caches at the end of the run.
    """
    weights = rec["active_after_load_bytes"]
    best = None
    for c in rec["chunks"]:
        t = c["peak_bytes"] - weights - c["cache_bytes_after"]
        if best is None or c["peak_bytes"] > best["peak"]:
            best = {
                "peak": c["peak_bytes"],
                "cache": c["cache_bytes_after"],
                "transient": t,
                "chunk": c["tokens"],
                "keys": c["processed"],
                "phase": "prefill",
            }
    if rec["decode_peak_bytes"] > best["peak"]:
        best = {
            "peak": rec["decode_peak_bytes"],
            "cache": rec["cache_bytes_end"],
            "transient": rec["decode_peak_bytes"] - weights - rec["cache_bytes_end"],
            "chunk": 1,
            "keys": rec["ctx"],
            "phase": "decode",
        }
    return best


def summarize(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    hdr = (
        f"{'run':58s} {'peak MB':>8s} {'wts MB':>7s} {'cache MB':>8s} {'trans MB':>8s} "
        f"{'B/chunk tok':>11s} {'phase':>7s} {'pf tok/s':>8s}"
    )
    print(hdr)
    for r in rows:
        if "error" in r:
            print(f"{r['name']:58s} ERROR {r['error'][:60]}")
            continue
        b = _transient(r)
        per_tok = b["transient"] / b["chunk"]
        print(
            f"{r['name']:58s} {_mb(r['peak_bytes']):>8s} {_mb(r['active_after_load_bytes']):>7s} "
            f"{_mb(b['cache']):>8s} {_mb(b['transient']):>8s} {per_tok:11.0f} {b['phase']:>7s} "
            f"{r['prefill_tok_s'] or 0:8.0f}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", action="append", default=[], help="substring of run names")
    ap.add_argument("--list", action="store_true", help="list the runs and exit")
    ap.add_argument("--append", action="store_true", help="append instead of overwriting")
    ap.add_argument("--summary", action="store_true", help="print a table of --out and exit")
    ap.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS")
    ap.add_argument("--long", action="store_true",
                    help="the long-prompt MLA / hybrid runs of issue 18 instead of the campaign")
    ap.add_argument("--mixers", action="store_true",
                    help="issue 12's RWKV-7 / RG-LRU / GLA / KDA mixer runs instead")
    ap.add_argument("--qwen35", action="store_true",
                    help="issue 26's Qwen3.5 runs at 0.8B-like and 4B-like head ratios instead")
    args = ap.parse_args(argv)
    if args.long and args.out == DEFAULT_OUT:
        args.out = LONG_OUT
    if args.mixers and args.out == DEFAULT_OUT:
        args.out = MIXERS_OUT
    if args.qwen35 and args.out == DEFAULT_OUT:
        args.out = QWEN35_OUT

    if args.summary:
        summarize(args.out)
        return 0
    runs = [r for r in (long_campaign() if args.long else mixers_campaign() if args.mixers
                        else qwen35_campaign() if args.qwen35 else campaign())
            if not args.only or any(s in r["name"] for s in args.only)]
    if args.list:
        for r in runs:
            print(r["name"])
        print(f"{len(runs)} runs")
        return 0
    _maybe_reexec_with_openblas(args)

    sys.path.insert(0, str(REPO / "src"))
    from mlxfit.verbs.measure.run import measure_run

    args.out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    with open(args.out, "a" if args.append else "w") as fh:
        for i, run in enumerate(runs, 1):
            t0 = time.perf_counter()
            base = {"name": run["name"], "group": run["group"]}
            try:
                rec = measure_run(run["config"], run["ctx"], **run["kw"])
                rec = {**base, **rec}
                status = (
                    f"peak {_mb(rec['peak_bytes'])} MB, weights "
                    f"{_mb(rec['active_after_load_bytes'])} MB, cache "
                    f"{_mb(rec['cache_bytes_end'])} MB"
                )
            except Exception as e:  # noqa: BLE001 - an mlx-lm failure is a result too
                rec = {
                    **base,
                    "config": run["config"],
                    "ctx": run["ctx"],
                    **run["kw"],
                    "error": f"{type(e).__name__}: {e}",
                }
                status = "ERROR " + rec["error"][:100]
            rec["wall_seconds"] = time.perf_counter() - t0
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(
                f"[{i:3d}/{len(runs)} {time.perf_counter() - t_start:6.1f}s] "
                f"{run['name']}: {status}",
                flush=True,
            )
            gc.collect()
    print(f"done: {len(runs)} runs in {time.perf_counter() - t_start:.1f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
