"""Real published configs in, KV/state bytes out, against numbers worked by hand from mlx-lm's
rules (mlx_lm/models/cache.py and each family's make_cache). Each expected value is written out
as arithmetic on the config's numbers, not computed by the code under test."""

from __future__ import annotations

import json

import pytest
from st_helpers import CONFIGS, config_dict
from st_helpers import load_config as load

from mlxfit.estimate.memory import Run, kv_bytes_final, state_term
from mlxfit.model.parse import parse_config


def kv(name: str, ctx: int, **kw) -> int:
    return kv_bytes_final(load(name), Run(ctx=ctx, **kw))


# --- full caches: capacity in 256-token steps -------------------------------------------------


def test_qwen3_8b_full_cache_three_contexts():
    """36 layers x 8 kv heads x 128 x (K+V) x 2 bytes = 147,456 B/token.
    ctx 1000: prefill 999 in one chunk -> 1024 slots; the last prompt token fits -> 1024.
    ctx 4097: prefill 4096 = two 2048 chunks -> 4096 slots; token 4097 overflows -> +256 = 4352.
    ctx 32768: prefill 32767 = 15 x 2048 + 2047 -> 30720 + 2048 = 32768 slots, token fits."""
    per_tok = 36 * 8 * 128 * 2 * 2
    assert per_tok == 147_456
    assert kv("Qwen__Qwen3-8B.json", 1000) == 1024 * per_tok
    assert kv("Qwen__Qwen3-8B.json", 4097) == 4352 * per_tok
    assert kv("Qwen__Qwen3-8B.json", 32768) == 32768 * per_tok


def test_llama31_8b_and_70b():
    """Llama 3.1: head_dim = hidden / heads = 128. 8B: 32 x 8 x 128 x 4 = 131,072 B/token;
    70B: 80 layers -> 327,680 B/token. ctx 8192 -> 8192 slots; ctx 300 -> 512 (299 -> 512)."""
    assert kv("meta-llama__Meta-Llama-3.1-8B.json", 8192) == 8192 * 131_072
    assert kv("meta-llama__Meta-Llama-3.1-8B.json", 300) == 512 * 131_072
    assert kv("meta-llama__Meta-Llama-3.1-70B.json", 8192) == 8192 * 327_680


def test_generated_tokens_grow_in_steps():
    """Qwen3-0.6B (28 x 8 x 128 x 4 = 114,688 B/token), ctx 2300 with 200 generated:
    prompt 2100 -> prefill 2099 = 2048 + 51 -> 2048 + 256 = 2304 slots; decode to 2300 fits."""
    assert kv("Qwen__Qwen3-0.6B.json", 2300, gen=200) == 2304 * 114_688
    # ctx 2400, gen 200: prompt 2200 -> prefill 2199 -> 2304; decode to 2400 -> 2560.
    assert kv("Qwen__Qwen3-0.6B.json", 2400, gen=200) == 2560 * 114_688


def test_odd_prefill_step_trims_then_steps():
    """Step 1000 (not a multiple of 256): chunk 1 -> 1024 slots; chunk 2 (offset 1000,
    1000 % 256 != 0) trims to 1000 and adds 1024 -> 2024; chunk 3 -> 2000 + 1024 = 3024;
    remainder 499 at offset 3000 fits (3499 > 3024? yes: trims to 3000, + 512 = 3512).
    Qwen3-0.6B ctx 3500: prefill 3499 tokens; the last token 3500 fits in 3512."""
    assert kv("Qwen__Qwen3-0.6B.json", 3500, prefill_step_size=1000) == 3512 * 114_688


def test_mistral_sliding_window_ignored_and_qwen2_use_sliding_false():
    """mistral maps to llama.py, which ignores a bare sliding_window: full cache on all 32
    layers (32 x 8 x 128 x 4 = 131,072 B/token) even beyond the 4096 window.
    Qwen2.5-7B: 28 x 4 x 128 x 4 = 57,344 B/token, full despite sliding_window 131072."""
    assert kv("mistralai__Mistral-7B-v0.1.json", 16384) == 16384 * 131_072
    assert kv("Qwen__Qwen2.5-7B.json", 16384) == 16384 * 57_344
    assert kv("microsoft__Phi-3-mini-4k-instruct.json", 4096) == 4096 * 32 * 32 * 96 * 4


def test_gemma2_full_cache_everywhere():
    """mlx-lm's gemma2 has no sliding cache: 42 x 8 x 256 x 4 = 344,064 B/token."""
    assert kv("google__gemma-2-9b-it.json", 8192) == 8192 * 344_064
    assert load("google__gemma-2-9b-it.json").scores_always


# --- sliding windows -------------------------------------------------------------------------


def test_gemma3_27b_pattern_and_window():
    """medgemma-27b (Gemma 3 27B): 62 layers, pattern 6 -> layers 5, 11, ..., 59 are full
    (10 layers), 52 sliding with window 1024. Per layer per token 16 x 128 x 4 = 8,192 B.
    ctx 65536: full 10 x 65536 x 8192; sliding 52 x 1024 x 8192 (trimmed to the window).
    ctx 700: prefill 699 -> full 768 slots; sliding holds 699, grows one step on the last token
    -> min(1024, 699 + 256) = 955."""
    per = 16 * 128 * 4
    assert kv("google__medgemma-27b-it.json", 65536) == 10 * 65536 * per + 52 * 1024 * per
    assert kv("google__medgemma-27b-it.json", 700) == 10 * 768 * per + 52 * 955 * per
    cfg = load("google__medgemma-27b-it.json")
    full = [i for i, ly in enumerate(cfg.layers) if ly.attn.cache.name == "full"]
    assert full == list(range(5, 62, 6))


def test_gemma3_4b_head_dim_256():
    """Gemma 3 4B: 34 layers, pattern 6 -> full at 5, 11, 17, 23, 29 (5 layers); 29 sliding
    (window 1024); 4 kv heads x 256 x 4 = 4,096 B per layer-token."""
    per = 4 * 256 * 4
    assert kv("Creekside__gemma-3-4b-text__variant.json", 32768) == (
        5 * 32768 * per + 29 * 1024 * per)


def test_gpt_oss_alternating_window_128():
    """gpt-oss-20b: 24 layers alternate sliding (128) / full; 8 kv heads x 64 x 4 = 2,048 B.
    ctx 8192: 12 x 8192 x 2048 + 12 x 128 x 2048."""
    assert kv("openai__gpt-oss-20b.json", 8192) == 12 * 8192 * 2048 + 12 * 128 * 2048
    cfg = load("openai__gpt-oss-20b.json")
    assert all(a.sinks for a in cfg.attention_layers)
    assert cfg.is_moe and cfg.num_experts == 32 and cfg.top_k == 4


def test_gemma4_global_head_dim_and_kv_heads():
    """Gemma 4 26B-A4B: full layers use global_head_dim 512 and (k_eq_v) 2 global kv heads:
    2 x 512 x 4 = 4,096 B/token; sliding layers 8 x 256 x 4 = 8,192 B/token, window 1024.
    5 full + 25 sliding layers (layer_types)."""
    d = config_dict("google__gemma-4-26B-A4B")
    n_full = d["text_config"]["layer_types"].count("full_attention")
    assert n_full == 5
    assert kv("google__gemma-4-26B-A4B.json", 16384) == 5 * 16384 * 4096 + 25 * 1024 * 8192


def test_gemma4_kv_shared_layers_own_nothing():
    """num_kv_shared_layers = 10 on the same 30 layers: the last 10 layers read earlier caches.
    Layers 20..29 in the fixture are sliding except 23 and 29 (every 6th is full)."""
    d = config_dict("google__gemma-4-26B-A4B")
    d["text_config"]["num_kv_shared_layers"] = 10
    cfg = parse_config(d)
    types = d["text_config"]["layer_types"]
    own_full = types[:20].count("full_attention")
    own_sliding = 20 - own_full
    got = kv_bytes_final(cfg, Run(ctx=16384))
    assert got == own_full * 16384 * 4096 + own_sliding * 1024 * 8192


# --- MLA, linear attention, SSM, conv, chunked -------------------------------------------------


def test_deepseek_v3_and_kimi_mla_latent():
    """MLA caches kv_lora_rank (512) + qk_rope_head_dim (64) per token per layer in bf16:
    61 layers x 576 x 2 = 70,272 B/token, for DeepSeek V3 and Kimi K2 (kimi_k2 -> deepseek_v3)."""
    assert kv("deepseek-ai__DeepSeek-V3.json", 32768) == 32768 * 61 * 576 * 2
    assert kv("moonshotai__Kimi-K2-Instruct.json", 32768) == 32768 * 61 * 576 * 2


def test_deepseek_v2_full_per_head():
    """DeepSeek-V2-Lite caches full per-head K (128 nope + 64 rope) and V (128) for 16 heads:
    27 x 16 x (192 + 128) x 2 = 276,480 B/token."""
    assert kv("deepseek-ai__DeepSeek-V2-Lite.json", 4096) == 4096 * 276_480


def test_qwen3_next_linear_layers_and_state():
    """Qwen3-Next: every 4th layer is full attention (12 of 48): 2 kv x 256 x 4 = 2,048 B per
    layer-token. The 36 linear layers hold conv (4-1) x (2 x 16 x 128 + 32 x 128) x 2 bytes
    = 49,152 plus a float32 recurrent state 32 x 128 x 128 x 4 = 2,097,152."""
    cfg = load("Qwen__Qwen3-Next-80B-A3B-Thinking.json")
    assert kv("Qwen__Qwen3-Next-80B-A3B-Thinking.json", 8192) == 12 * 8192 * 2048
    assert cfg.state_bytes == 36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4)
    assert cfg.is_moe and cfg.num_experts == 512 and cfg.top_k == 10


def test_qwen35_layer_types():
    """Qwen3.5-9B: layer_types mark 8 full layers of 32: 4 kv x 256 x 4 = 4,096 B/layer-token;
    24 linear layers: conv 3 x (2 x 16 x 128 + 32 x 128) x 2 + 32 x 128 x 128 x 4."""
    cfg = load("mlx-community__Qwen3.5-9B-MLX-8bit.json")
    assert kv("mlx-community__Qwen3.5-9B-MLX-8bit.json", 4096) == 8 * 4096 * 4096
    assert cfg.state_bytes == 24 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4)


def test_nemotron_h_pattern():
    """Nemotron-H 56B: hybrid_override_pattern has 10 '*' (attention: 8 kv x 128 x 4 = 4,096
    B/token) and 54 'M' Mamba2 layers, each conv (4-1) x (256 x 64 + 2 x 8 x 256) x 2 and SSM
    256 x 64 x 256 x 4 bytes. The '-' MLP layers hold nothing."""
    d = config_dict("nvidia__Nemotron-H-56B-Base-8K")
    pat = d["hybrid_override_pattern"]
    assert pat.count("*") == 10 and pat.count("M") == 54
    cfg = load("nvidia__Nemotron-H-56B-Base-8K.json")
    assert kv("nvidia__Nemotron-H-56B-Base-8K.json", 8192) == 10 * 8192 * 4096
    assert cfg.state_bytes == 54 * (3 * (256 * 64 + 2 * 8 * 256) * 2 + 256 * 64 * 256 * 4)


def test_lfm2_conv_layers():
    """LFM2.5-1.2B: 6 full-attention layers (8 kv x 64 x 4 = 2,048 B/token), 10 conv layers
    holding (conv_L_cache 3 - 1) x hidden 2048 x 2 bytes = 8,192 B each."""
    cfg = load("LiquidAI__LFM2.5-1.2B-Instruct-mlx-4bit.json")
    assert kv("LiquidAI__LFM2.5-1.2B-Instruct-mlx-4bit.json", 4096) == 6 * 4096 * 2048
    assert cfg.state_bytes == 10 * 2 * 2048 * 2


def test_llama4_chunked_layers():
    """Llama 4 Scout: 3 of every 4 layers keep at most attention_chunk_size (8192) tokens
    (36 ChunkedKVCache layers), 12 global layers the whole context; 8 x 128 x 4 = 4,096 B.
    ctx 32768: 12 x 32768 x 4096 + 36 x 8192 x 4096 (a single-token update after prefill
    keeps 8192 + 1 -> 8448 slots in 256 steps)."""
    got = kv("meta-llama__Llama-4-Scout-17B-16E-Instruct.json", 32768)
    assert got == 12 * 32768 * 4096 + 36 * 8448 * 4096
    cfg = load("meta-llama__Llama-4-Scout-17B-16E-Instruct.json")
    assert cfg.is_moe and cfg.num_experts == 16 and cfg.top_k == 1


def test_moe_fields_of_every_naming():
    """Mixtral num_local_experts 8 / top-2; Qwen3-30B-A3B num_experts 128 / top-8;
    DeepSeek V3 n_routed_experts 256 / top-8 with 3 dense layers first."""
    mix = load("mistralai__Mixtral-8x7B-v0.1.json")
    assert (mix.num_experts, mix.top_k) == (8, 2)
    q = load("Qwen__Qwen3-30B-A3B.json")
    assert (q.num_experts, q.top_k) == (128, 8)
    ds = load("deepseek-ai__DeepSeek-V3.json")
    assert (ds.num_experts, ds.top_k) == (256, 8)
    assert [ly.moe for ly in ds.layers[:4]] == [False, False, False, True]
    assert ds.shared_intermediate == 1 * 2048


# --- quantized KV and --max-kv-size --------------------------------------------------------------


def test_quantized_kv_above_start():
    """Qwen3-8B, --kv-bits 8 --kv-group-size 64, ctx 8192 > start 5000: every element costs
    8/8 + 2 x 2 / 64 = 1.0625 B; 36 x 8 x 128 x 2 elements per token -> 78,336 B/token."""
    per = 36 * 8 * 128 * 2 * (1 + 4 / 64)
    assert kv("Qwen__Qwen3-8B.json", 8192, kv_bits=8) == int(8192 * per)
    # Below the start the cache stays bf16.
    assert kv("Qwen__Qwen3-8B.json", 4096, kv_bits=8) == 4096 * 147_456


def test_max_kv_size_only_without_own_cache():
    """--max-kv-size makes Qwen3 (no make_cache) rotate at 4096 tokens; llama.py defines
    make_cache, so mlx-lm ignores it for Llama and the cache stays full."""
    assert kv("Qwen__Qwen3-8B.json", 16384, max_kv_size=4096) == 4096 * 147_456
    assert kv("meta-llama__Meta-Llama-3.1-8B.json", 16384, max_kv_size=4096) == 16384 * 131_072


# ctx 1024 on every fixture, bf16 activations (2 B/element, K + V: x 4 per kv head-dim). The
# 1023-token prefill is one chunk -> 1024 slots in 256 steps and token 1024 fits: every full
# cache holds 1024 tokens. A window of 1024 (Gemma) ends full too: the prefill leaves 1023, the
# last token grows it by min(256, 1024 - 1023) = 1. gpt-oss's 128-token windows trim to 128.
# Llama 4's 8192-token chunks are not reached. Per token: layers x kv heads x head dim x 4 B
# (head dim = hidden / heads where the config has none); MLA as in the DeepSeek test above;
# recurrent and conv state are not KV (state_bytes, tested above).
KV_AT_1024 = {
    "Creekside__gemma-3-4b-text__variant": 1024 * 34 * 4 * 256 * 4,  # 5 full + 29 window 1024
    "LiquidAI__LFM2.5-1.2B-Instruct-mlx-4bit": 1024 * 6 * 8 * 64 * 4,  # 6 attention layers
    "Qwen__Qwen2.5-72B-Instruct": 1024 * 80 * 8 * (8192 // 64) * 4,
    "Qwen__Qwen2.5-7B-Instruct": 1024 * 28 * 4 * (3584 // 28) * 4,
    "Qwen__Qwen2.5-7B": 1024 * 57_344,
    "Qwen__Qwen3-0.6B": 1024 * 114_688,
    "Qwen__Qwen3-235B-A22B": 1024 * 94 * 4 * 128 * 4,
    "Qwen__Qwen3-30B-A3B": 1024 * 48 * 4 * 128 * 4,
    "Qwen__Qwen3-32B": 1024 * 64 * 8 * 128 * 4,
    "Qwen__Qwen3-4B__variant": 1024 * 36 * 8 * 128 * 4,
    "Qwen__Qwen3-8B": 1024 * 147_456,
    "Qwen__Qwen3-Next-80B-A3B-Thinking": 1024 * 12 * 2 * 256 * 4,  # 12 full of 48
    "deepseek-ai__DeepSeek-V2-Lite": 1024 * 27 * 16 * (192 + 128) * 2,
    "deepseek-ai__DeepSeek-V3": 1024 * 61 * (512 + 64) * 2,
    "georgehenney__Qwen3-8B-heretic-mlx-4bit": 1024 * 36 * 8 * 128 * 4,  # 36 full_attention
    "google__gemma-2-9b-it": 1024 * 42 * 8 * 256 * 4,
    "google__gemma-4-26B-A4B": 1024 * (5 * 2 * 512 + 25 * 8 * 256) * 4,  # window 1024 fills
    "google__medgemma-27b-it": 1024 * 62 * 16 * 128 * 4,  # 10 full + 52 window 1024
    "meta-llama__Llama-3.2-1B-Instruct__variant": 1024 * 16 * 8 * 64 * 4,
    "meta-llama__Llama-3.2-3B": 1024 * 28 * 8 * 128 * 4,
    "meta-llama__Llama-4-Scout-17B-16E-Instruct": 1024 * 48 * 8 * 128 * 4,
    "meta-llama__Llama-4-Scout-17B-16E-Instruct__variant": 1024 * 48 * 8 * 128 * 4,
    "meta-llama__Meta-Llama-3.1-70B": 1024 * 327_680,
    "meta-llama__Meta-Llama-3.1-8B": 1024 * 131_072,
    "microsoft__Phi-3-mini-4k-instruct": 1024 * 32 * 32 * 96 * 4,
    "mistralai__Mistral-7B-v0.1": 1024 * 131_072,
    "mistralai__Mixtral-8x7B-v0.1": 1024 * 32 * 8 * (4096 // 32) * 4,
    "mlx-community__Qwen3.5-9B-MLX-8bit": 1024 * 8 * 4 * 256 * 4,  # 8 full of 32
    "moonshotai__Kimi-K2-Instruct": 1024 * 61 * (512 + 64) * 2,
    "nvidia__Nemotron-H-56B-Base-8K": 1024 * 10 * 8 * 128 * 4,  # the 10 '*' layers
    "openai__gpt-oss-120b": (18 * 1024 + 18 * 128) * 8 * 64 * 4,  # 18 full + 18 window 128
    "openai__gpt-oss-20b": (12 * 1024 + 12 * 128) * 8 * 64 * 4,
    "unsloth__Mistral-Small-24B-Instruct-2501__variant": 1024 * 40 * 8 * 128 * 4,
}


def test_kv_table_covers_every_fixture():
    assert sorted(KV_AT_1024) == sorted(p.stem for p in CONFIGS.glob("*.json"))


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.json")))
def test_every_fixture_parses_with_a_plan(name):
    cfg = load(name)
    assert len(cfg.layers) == cfg.num_layers
    # A plan without any attention or state would size nothing: every fixture has one.
    assert cfg.attention_layers or cfg.state_bytes > 0
    assert kv_bytes_final(cfg, Run(ctx=1024)) == KV_AT_1024[name]


# --- families added with the mlx-lm oracle (issue 12) ------------------------------------------


def _family(name: str):
    import json
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "families" / name
    return parse_config(json.loads(path.read_text()), where=name)


def test_kimi_linear_48b_mla_and_kda_layers():
    """Kimi-Linear-48B-A3B: 7 full-attention layers (4, 8, ..., 24, 27, 1-based) cache the MLA
    latent, kv_lora_rank 512 + qk_rope 64 = 576 bf16 values per token; the 20 KDA layers hold
    q/k/v convs 3 x (4-1) x 32 x 128 x 2 B = 73,728 B and a float32 state 32 x 128 x 128 x 4 =
    2,097,152 B. ctx 700: prefill 699 -> 768 slots. KV 7 x 768 x 576 x 2 = 6,193,152 B; state
    20 x 2,170,880 = 43,417,600 B; together 49,610,752 B (the issue's "50 MB"), where a plain
    transformer of 27 x 32 heads x 72 x 2 x 2 B per token would hold 27 x 768 x 9,216 B."""
    cfg = _family("moonshotai__Kimi-Linear-48B-A3B-Instruct__variant.json")
    assert kv_bytes_final(cfg, Run(ctx=700)) == 7 * 768 * 576 * 2
    assert cfg.state_bytes == 20 * (3 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4)
    assert kv_bytes_final(cfg, Run(ctx=700)) + cfg.state_bytes == 49_610_752


def test_llama4_chunked_cache_trims_to_the_chunk_then_steps():
    """Llama 4 Scout, ctx 33,000 at step 2048: 36 chunked layers (chunk 8192) and 12 full; 8 kv
    heads x 128 x 4 B = 4,096 B per token. Prefill 32,999 = 16 x 2048 + 231: before each call
    the ChunkedKVCache trims to its last 8192 rows (an exact slice), then the update appends
    ceil(n/256) x 256 rows: after the last chunk 8192 + 256; the last prompt token the same.
    Full layers: 32,768 + 256 = 33,024 slots."""
    cfg = load("meta-llama__Llama-4-Scout-17B-16E-Instruct.json")
    per = 8 * 128 * 4
    assert kv(("meta-llama__Llama-4-Scout-17B-16E-Instruct.json"), 33000) == (
        36 * (8192 + 256) * per + 12 * 33024 * per)
    assert sum(1 for a in cfg.attention_layers if a.cache.name == "chunked") == 36


def test_llama4_text_alone_has_no_chunked_layers():
    """A bare llama4_text config (the text model without the llama4 wrapper) loads
    mlx_lm/models/llama4_text.py, which has no make_cache(): a KVCache on all 48 layers. At
    33,000 tokens (prefill 32,999 -> 33,024 slots) that is 48 x 33,024 x 4,096 B, not the
    wrapper's 36 chunked layers."""
    text = config_dict("meta-llama__Llama-4-Scout-17B-16E-Instruct")["text_config"]
    # the wrapper states tie_word_embeddings; llama4_text's ModelArgs requires it of its own
    cfg = parse_config({**text, "model_type": "llama4_text", "tie_word_embeddings": False})
    assert cfg.family == "llama4_text" and not cfg.own_cache
    assert kv_bytes_final(cfg, Run(ctx=33000)) == 48 * 33024 * 8 * 128 * 4


def test_recurrent_gemma_ignores_the_config_conv_width():
    """recurrent_gemma builds every block with lru_width = hidden and conv width 4 whatever the
    config says: recurrent blocks hold (3 x 128 + 128) x 2 B = 1,024 B (fixture hidden 128,
    conv1d_width 3); blocks cycle recurrent, recurrent, attention over 4 layers -> 3 recurrent.
    The attention block is MQA (1 kv head x 32) in a RotatingKVCache of 1024: at ctx 300 it
    holds 299 + 256 = 555 rows x 32 x 2 x 2 B."""
    cfg = _family("recurrent_gemma.json")
    assert cfg.state_bytes == 3 * 1024
    assert kv_bytes_final(cfg, Run(ctx=300)) == 555 * 32 * 2 * 2


def test_jamba_mamba_state_in_the_activation_dtype():
    """jamba fixture: 4 Mamba layers (attn period 2, offset 1) with inner = mamba_expand x hidden
    = 128 x 128 = 16,384,
    d_conv 4, d_state 128: conv 3 x 16,384 x 2 B + SSM 16,384 x 128 x 2 B (bf16 like its inputs,
    not float32) = 4,292,608 B per layer."""
    cfg = _family("jamba.json")
    assert cfg.state_bytes == 4 * (3 * 16384 * 2 + 16384 * 128 * 2)


def test_deepseek_v41_window_compressed_kv_and_pending_rows():
    """deepseek_v41_compressed.json: 8 layers, head_dim 64, window 128, index_head_dim 32;
    ratios 0,0,4,4,1,1,128,0; kv sources 2,4,6,7; index sources 2,3,4,5. Every layer keeps
    min(128, t) window rows x 64 x 2 B. The compressed rows and index keys are float32 (the
    compressor is kept float32 by the model's cast_predicate, issue 24). Layer 2 (r 4, index):
    t//4 rows x (64 + 32) x 4 B and t%4 pending rows x 2 x 64 x 4 B; layer 4 (r 1, index):
    t rows x 96 x 4 B; layer 6 (r 128, no index): t//128 x 64 x 4 B + t%128 x 512 B. Layers 3
    and 5 read others' state, layer 7 (r 0) compresses nothing. ctx 1001 (prefill 1000 in
    chunks of 512, then one token): 8 x 128 x 128 = 131,072; layer 2: 250 x 384 + 1 x 512 =
    96,512; layer 4: 1001 x 384 = 384,384; layer 6: 7 x 256 + 105 x 512 = 55,552. Total
    667,520 B, with no 256-token steps anywhere (every array is concatenated and sliced to its
    exact size)."""
    cfg = _family("deepseek_v41_compressed.json")
    window = 8 * 128 * 64 * 2
    assert window == 131_072
    layer2 = 250 * (64 + 32) * 4 + 1 * 2 * 64 * 4
    layer4 = 1001 * (64 + 32) * 4
    layer6 = 7 * 64 * 4 + 105 * 2 * 64 * 4
    assert (layer2, layer4, layer6) == (96_512, 384_384, 55_552)
    assert kv_bytes_final(cfg, Run(ctx=1001, prefill_step_size=512)) == 667_520
    # ctx 100 (inside the window): 8 x 100 x 128 window; layer 2: 25 groups, none pending;
    # layer 4: 100 x 384; layer 6: no group closed yet, 100 pending rows x 512.
    assert kv_bytes_final(cfg, Run(ctx=100)) == (8 * 100 * 128 + 25 * 384 + 100 * 384
                                                 + 100 * 512)


def test_deepseek_v41_refuses_what_mlx_lm_refuses():
    """engram layers (mlx-lm's ModelArgs raises) and a source layer past compress_ratios
    (its Compressor indexes the list): one ConfigError naming the field."""
    import json
    from pathlib import Path

    from mlxfit.errors import ConfigError

    d = json.loads((Path(__file__).parent / "fixtures" / "families"
                    / "deepseek_v41_compressed.json").read_text())
    with pytest.raises(ConfigError, match="engram_layer_ids"):
        parse_config({**d, "engram_layer_ids": [1]})
    with pytest.raises(ConfigError, match="compress_ratios"):
        parse_config({**d, "compress_ratios": [0, 0, 4]})
    with pytest.raises(ConfigError, match="kv_source_layer_ids"):
        parse_config({**d, "kv_source_layer_ids": [8]})


def test_olmo1_field_names():
    """olmo.json (mlx-lm's test ModelArgs): d_model 1024, n_layers 4, n_heads 2 -> head_dim 512,
    KV for all heads: 4 x 2 x 512 x 2 x 2 B = 16,384 B/token; ctx 300 -> 512 slots."""
    cfg = _family("olmo.json")
    assert (cfg.hidden, cfg.num_layers, cfg.vocab, cfg.intermediate) == (1024, 4, 10000, 1024)
    assert kv_bytes_final(cfg, Run(ctx=300)) == 512 * 4 * 2 * 512 * 2 * 2


def test_deepseek_v41_indexer_scores_are_the_prefill_transient():
    """The compressed fixture's index layers 4 and 5 score every index key of layer 4 (ratio
    1, index_n_heads 2): at ctx 4097, step 2048, chunk 2 (2048 tokens, 4096 keys by then) that
    is index_score_arrays x 2048 x 2 x 4096 x 4 B (float32) = 67,108,864 B x the constant,
    larger than any window layer's float32 scores (4 heads x 2048 queries x (128 window rows
    + 16 top-k picks) x 4 B, x 3.05 sink arrays)."""
    from mlxfit.calibration.load import load_calibration
    from mlxfit.estimate.memory import scores_term

    cfg = _family("deepseek_v41_compressed.json")
    be = load_calibration().backend("cpu")
    term = scores_term(cfg, Run(ctx=4097, backend="cpu"), 2, be, False)
    assert term.inputs["index_keys"] == 4096
    assert term.bytes == int(be.index_score_arrays * 2048 * 2 * 4096 * 4)
    assert 2048 * 2 * 4096 * 4 > 3.05 * 4 * 2048 * (128 + 16) * 4 + 2048 * (128 + 16)


def test_longcat_ngram_ids_fill_with_the_tokens_seen():
    """LongCat-Flash n-gram: NgramEmbedding keeps context[..., -(n-1):] of the int64 ids seen
    so far (n = emb_neighbor_num = 4 here): 8 B per token until 3 ids are held, so 1, 2, 3
    then 3 ids after 1, 2, 3 and 700 tokens."""
    fixture = CONFIGS.parent / "families" / "longcat_flash_ngram.json"
    d = {**json.loads(fixture.read_text()), "emb_neighbor_num": 4}
    cfg = parse_config(d)
    held = [state_term(cfg, Run(ctx=n)).bytes for n in (1, 2, 3, 700)]
    assert held == [8, 16, 24, 24]
    assert cfg.state_bytes == 24
