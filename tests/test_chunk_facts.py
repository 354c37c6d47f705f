"""The facts of "prefill chunk n" (its size, the cache offset before it, the keys it attends
over, whether it runs on a quantized cache) have one definition, cache_sim.Schedule, and the
memory terms and the single-buffer check agree on them.

mlx-lm's generate_step runs the first P-1 prompt tokens in chunks of prefill_step_size and
calls maybe_quantize_kv_cache after each chunk, converting the cache once its offset >=
quantized_kv_start. So chunk n runs quantized when n > 1 and the offset before it reached the
start; the first chunk never does, even with --quantized-kv-start 0.

Worked by hand (gen 0, so P = ctx and P-1 tokens are chunked):

* ctx 4098, step 2048: 4097 chunked tokens -> chunks 2048, 2048, 1 (2 full chunks, last 1,
  3 in all). Offsets before: 0, 2048, 4096; after: 2048, 4096, 4097. A full cache's chunk
  attends over every token so far, this chunk included: 2048, 4096, 4097 keys.
  ChunkedKVCache with a 1024 window keeps window + chunk: min(2048, 1024+2048) = 2048,
  min(4096, 1024+2048) = 3072, min(4097, 1024+1) = 1025. RotatingKVCache (window 1024) keeps
  min(offset before, window-1) + chunk: 0+2048 = 2048, 1023+2048 = 3071, 1023+1 = 1024.
  Quantized during chunk n with --kv-bits 8: start 0 -> no, yes, yes (chunk 1 never);
  start 2048 -> no, yes (offset before 2048 >= 2048), yes; start 2049 -> no, no, yes, and the
  cache is converted right after chunk 2 (offset after 4096 >= 2049).
* ctx 4097, step 2048: 4096 chunked tokens -> chunks 2048, 2048 (the last prompt token goes
  through the single-token step, not a chunk).
* ctx 2000, step 2048: 1999 chunked tokens -> one chunk of 1999; never quantized.
* ctx 1: no chunk; the largest model call is the single-token step (1 token).

Qwen3-8B-4bit (36 layers, 32 query heads, 8 KV heads, head_dim 128, bf16 activations) is
fused on Metal at head_dim 128, so its score matrix is materialized only on a quantized
cache. The buffer check reports 1 batch x 32 heads x queries x keys x 2 B for the largest
such chunk among the last two (the candidates of the peak):

* ctx 2000, start 0: one chunk of 1999, full precision -> no score array (the drifted check
  reported 32 x 1999 x 1999 x 2 = 255,744,064 B).
* ctx 2049, start 0: one chunk of 2048 -> none (drifted: 32 x 2048 x 2048 x 2 = 268,435,456).
* ctx 2050, start 0: chunks 2048, 1; chunk 2 quantized: 32 x 1 x 2049 x 2 = 131,136.
* ctx 4098, start 0 or 2048: chunk 2 quantized: 32 x 2048 x 4096 x 2 = 536,870,912.
* ctx 4098, start 2049: only chunk 3 quantized: 32 x 1 x 4097 x 2 = 262,208.
* ctx 4098, start 5000: none.
* step 512, ctx 1025 (chunks 512, 512), start 0 or 512: chunk 2 quantized:
  32 x 512 x 1024 x 2 = 33,554,432; start 513: none.
"""

from __future__ import annotations

import pytest

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.cache_sim import Schedule
from mlxfit.estimate.memory import Run, prefill_phase
from mlxfit.estimate.serving import Serving, run_buffers
from mlxfit.model.caches import Chunked, Full, Rotating
from mlxfit.model.config import Attn
from mlxfit.model.inputs import model_inputs
from mlxfit.sources.resolve import resolve_model

Q8B = "mlx-community/Qwen3-8B-4bit"
SCORES = "attention (prefill)"


def test_schedule_chunk_facts_worked_by_hand():
    s = Schedule(ctx=4098, gen=0, prefill_step_size=2048)
    assert s.chunks() == (2, 1, 3)
    assert [s.chunk_size(n) for n in (1, 2, 3)] == [2048, 2048, 1]
    assert [s.offset_before(n) for n in (1, 2, 3)] == [0, 2048, 4096]
    assert [s.offset_after(n) for n in (1, 2, 3)] == [2048, 4096, 4097]
    c = s.chunk_at(2)
    assert (c.n, c.size, c.offset_before, c.offset_after) == (2, 2048, 2048, 4096)

    full = Attn(Full(), 32, 8, 128, 128, 128)
    chunked = Attn(Chunked(1024), 32, 8, 128, 128, 128)
    rotating = Attn(Rotating(1024), 32, 8, 128, 128, 128)
    assert [s.keys_seen(full, n) for n in (1, 2, 3)] == [2048, 4096, 4097]
    assert [s.keys_seen(chunked, n) for n in (1, 2, 3)] == [2048, 3072, 1025]
    assert [s.keys_seen(rotating, n) for n in (1, 2, 3)] == [2048, 3071, 1024]

    def during(bits, start):
        return [s.kv_quantized_during(n, bits, start) for n in (1, 2, 3)]

    def converted(bits, start):
        return [s.kv_converted_after(n, bits, start) for n in (1, 2, 3)]

    assert during(8, 0) == [False, True, True]
    assert converted(8, 0) == [True, False, False]
    assert during(8, 2048) == [False, True, True]
    assert during(8, 2049) == [False, False, True]
    assert converted(8, 2049) == [False, True, False]
    assert during(None, 0) == [False, False, False]
    assert converted(None, 0) == [False, False, False]
    assert s.largest_call == 2048

    for n in (0, 4):
        with pytest.raises(ValueError):
            s.chunk_at(n)

    assert Schedule(ctx=4097, gen=0, prefill_step_size=2048).chunks() == (2, 2048, 2)
    short = Schedule(ctx=2000, gen=0, prefill_step_size=2048)
    assert short.chunks() == (0, 1999, 1)
    assert (short.chunk_size(1), short.offset_before(1), short.largest_call) == (1999, 0, 1999)
    assert short.kv_quantized_during(1, 8, 0) is False
    assert Schedule(ctx=1, gen=0, prefill_step_size=2048).chunks() == (0, 0, 0)
    assert Schedule(ctx=1, gen=0, prefill_step_size=2048).largest_call == 1
    # gen tokens are decoded one at a time: ctx 2100 with 101 generated leaves 1998 chunked.
    assert Schedule(ctx=2100, gen=101, prefill_step_size=2048).largest_call == 1998


def test_run_kv_quantized_is_the_end_of_run_rule():
    # generate.py maybe_quantize_kv_cache converts after every call once c.offset >=
    # quantized_kv_start: the last call brings the offset to ctx
    assert Run(ctx=5000, kv_bits=8, quantized_kv_start=5000).kv_quantized
    assert not Run(ctx=4999, kv_bits=8, quantized_kv_start=5000).kv_quantized
    assert not Run(ctx=10**6).kv_quantized


@pytest.fixture(scope="module")
def q8b():
    cfg = model_inputs(resolve_model(Q8B)).cfg
    return cfg, load_calibration().backend("metal")


CASES = [
    # ctx, step, quantized_kv_start, expected score-array bytes (None: no score array)
    (2000, 2048, 0, None),
    (2049, 2048, 0, None),
    (2050, 2048, 0, 32 * 1 * 2049 * 2),
    (4098, 2048, 0, 32 * 2048 * 4096 * 2),
    (4098, 2048, 2048, 32 * 2048 * 4096 * 2),
    (4098, 2048, 2049, 32 * 1 * 4097 * 2),
    (4098, 2048, 5000, None),
    (1025, 512, 0, 32 * 512 * 1024 * 2),
    (1025, 512, 512, 32 * 512 * 1024 * 2),
    (1025, 512, 513, None),
]


@pytest.mark.parametrize(("ctx", "step", "start", "expected"), CASES)
def test_buffer_check_agrees_with_the_prefill_terms(q8b, ctx, step, start, expected):
    cfg, be = q8b
    run = Run(ctx=ctx, prefill_step_size=step, kv_bits=8, quantized_kv_start=start)
    total = run.schedule().chunks()[2]
    from_terms = []
    for n in {total, total - 1} - {0}:
        terms = {t.name: t for t in prefill_phase(cfg, run, be, n).terms}
        scores = terms["attention_scores"]
        if scores.inputs.get("unfused"):
            i = scores.inputs
            from_terms.append(i["q_heads"] * i["chunk"] * i["keys"] * cfg.act_bytes)
        else:
            assert scores.bytes == 0, (n, scores)
    bufs = {b.name: b.bytes for b in run_buffers(cfg, run, be, Serving())}
    assert bufs.get(SCORES) == (max(from_terms) if from_terms else None)
    assert bufs.get(SCORES) == expected


def test_repro_first_chunk_is_fused_in_terms_and_buffers():
    r = mlxfit.fit(Q8B, 2000, machine="M4 Pro 24GB", kv_bits=8, quantized_kv_start=0)
    terms = {t.name: t for t in r.terms}
    assert r.peak_phase == "prefill chunk 1 (1999 tokens)"
    assert terms["attention_scores"].bytes == 0
    assert "kv_quantize_copy" in terms  # converted after chunk 1, not before it
    assert all(b.name != SCORES for b in r.buffers), r.buffers
    assert max(b.bytes for b in r.buffers) == 311_164_928  # lm_head / embed_tokens
