"""Each cache kind of ``mlxfit.model.caches`` against the real mlx-lm cache object it models.

A real cache (``mlx_lm.models.cache.KVCache``, ``RotatingKVCache``, ``ChunkedKVCache``,
``QuantizedKVCache``, deepseek_v41's ``LayerCache``) is driven by ``update_and_fetch`` with small
``mx.zeros`` arrays on generate_step's schedule (the prompt's first P-1 tokens in chunks of
``prefill_step_size``, then one token at a time up to the context), and after every chunk and at
the end its allocated rows, the keys the chunk's attention got back and its ``nbytes`` are
compared with what the kind says. The schedules cross chunk boundaries and 256-token steps,
with windows smaller and larger than a chunk and one-token chunks. No array is evaluated: the
shapes are what is compared, so the whole file runs in seconds on MLX's CPU backend.
"""

from __future__ import annotations

import pytest

from mlxfit.estimate.cache_sim import Schedule
from mlxfit.estimate.memory import Run, layer_bytes_final, layer_bytes_prefill
from mlxfit.model.caches import (
    KINDS,
    CacheKind,
    Chunked,
    Full,
    Rotating,
    Shared,
    Window,
    from_mlx_lm,
)
from mlxfit.model.config import Attn
from mlxfit.model.mlx_extra import mlx_missing_reason

MLX_MISSING = mlx_missing_reason()
pytestmark = [
    pytest.mark.mlx,
    pytest.mark.skipif(MLX_MISSING is not None,
                       reason=f"mlx/mlx-lm not importable ({MLX_MISSING})"),
]

HEAD_DIM = 64  # a group size mx.quantize supports divides it
ACT = 2  # bfloat16

# (ctx, prefill_step_size, gen): one chunk; a chunk ending on a 256-step; a short last chunk;
# chunks that are not a multiple of 256; one-token chunks; generated tokens past the prompt;
# a prompt too short to be chunked.
SCHEDULES = [
    (300, 2048, 0),
    (513, 256, 0),
    (1100, 512, 0),
    (700, 300, 3),
    (260, 1, 0),
    (900, 100, 40),
    (1, 2048, 0),
    (2, 512, 1),
    (257, 128, 1),
    (514, 256, 0),  # a last chunk of one token
]


def _one_token_chunk(ctx: int, step: int, gen: int) -> bool:
    s = Schedule(ctx, gen, step)
    return any(s.chunk_size(n) == 1 for n in range(1, s.chunks()[2] + 1))


# RotatingKVCache.update_and_fetch takes a different path for a one-token call
# (_update_in_place: grows by min(256, max_size - offset) rows, cache.py:481) than for a longer
# one (_update_concat), for a prefill chunk as for a decode step (issue 23 found it with these
# tests, issue 24's generated configs in 25 families).
ONE_TOKEN_CHUNKS = [c for c in SCHEDULES if _one_token_chunk(*c)]
MULTI_TOKEN_CHUNKS = [c for c in SCHEDULES if not _one_token_chunk(*c)]
WINDOWS = [1, 64, 256, 300, 1000, 4096]  # smaller and larger than the chunks above


def _zeros(n: int):
    import mlx.core as mx  # mlx is the measure extra: imported when a test runs

    return mx.zeros((1, 1, n, HEAD_DIM), dtype=mx.bfloat16)


def _attn(kind: CacheKind, v_dim: int = HEAD_DIM) -> Attn:
    return Attn(kind, q_heads=1, kv_heads=1, k_dim=HEAD_DIM, v_dim=v_dim, head_dim=HEAD_DIM)


def _calls(s: Schedule) -> list[int]:
    """The model calls' sizes: the prefill chunks, then single tokens up to the context."""
    chunks = [s.chunk_size(n) for n in range(1, s.chunks()[2] + 1)]
    return chunks + [1] * (s.ctx - sum(chunks))


def _length(keys) -> int:
    """Rows of a keys array, or of a QuantizedKVCache's (packed, scales, biases)."""
    return (keys[0] if isinstance(keys, (tuple, list)) else keys).shape[2]


def _rows(cache) -> int:
    return _length(cache.keys)


def _drive(kind: CacheKind, cache, s: Schedule, *, before=None, convert_after: int = 0):
    """Feed ``cache`` the schedule; after chunk n check rows, keys returned and bytes.
    ``before(cache)`` runs ahead of every call (ChunkedKVCache's maybe_trim_front);
    ``convert_after``: chunk after which the cache becomes a QuantizedKVCache. Returns the
    cache at the end (possibly the converted one)."""
    total = s.chunks()[2]
    a = _attn(kind)
    run = Run(ctx=s.ctx, gen=s.gen, prefill_step_size=s.prefill_step_size, kv_bits=4)
    for i, k in enumerate(_calls(s), start=1):
        if before is not None:
            before(cache)
        keys, _ = cache.update_and_fetch(_zeros(k), _zeros(k))
        if i > total:
            continue
        quantized = bool(convert_after) and i > convert_after
        assert _length(keys) == s.keys_seen(a, i), ("keys seen", i)
        assert _rows(cache) == kind.tokens_prefill(s, i), ("rows after chunk", i)
        assert cache.nbytes == layer_bytes_prefill(a, s, i, quantized, run, ACT), ("bytes", i)
        if i == convert_after:
            cache = cache.to_quantized(group_size=run.kv_group_size, bits=run.kv_bits)
            assert cache.nbytes == layer_bytes_prefill(a, s, i, True, run, ACT)
    if cache.keys is not None:
        assert _rows(cache) == kind.tokens_final(s), "rows at the context"
        assert cache.nbytes == layer_bytes_final(a, s, bool(convert_after), run, ACT)
    return cache


@pytest.mark.parametrize("ctx,step,gen", SCHEDULES)
def test_full_is_kvcache(ctx, step, gen):
    from mlx_lm.models.cache import KVCache

    s = Schedule(ctx, gen, step)
    cache = _drive(Full(), KVCache(), s)
    assert type(cache).__name__ == Full.mlx_lm_class
    assert cache.is_trimmable()  # a draft model's rejected tokens can always be rewound
    assert not Full.untrimmable_past_window


@pytest.mark.parametrize("ctx,step,gen", [c for c in SCHEDULES if c[0] - c[2] - 1 > c[1]])
def test_full_converted_by_kv_bits_is_a_quantized_kvcache(ctx, step, gen):
    """maybe_quantize_kv_cache converts the KVCache once its offset reaches the start: after the
    first chunk here, so the later chunks and the decode steps run on a QuantizedKVCache with
    the same 256-token steps."""
    from mlx_lm.models.cache import KVCache

    s = Schedule(ctx, gen, step)
    cache = _drive(Full(), KVCache(), s, convert_after=1)
    assert type(cache).__name__ == "QuantizedKVCache"
    assert Full().holds_quantized(True) and not Full().holds_quantized(False)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("ctx,step,gen", MULTI_TOKEN_CHUNKS)
def test_rotating_is_rotating_kvcache(ctx, step, gen, window):
    from mlx_lm.models.cache import RotatingKVCache

    s = Schedule(ctx, gen, step)
    kind = Rotating(window)
    cache = _drive(kind, RotatingKVCache(max_size=window), s)
    assert type(cache).__name__ == Rotating.mlx_lm_class
    # Trimmable (a draft's rewind works) only while the context is inside the window.
    assert cache.is_trimmable() == (ctx < window)
    assert Rotating.untrimmable_past_window
    assert kind.decode_keys(ctx) == min(ctx, window)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("ctx,step,gen", ONE_TOKEN_CHUNKS + [(2, 512, 0), (39, 37, 0), (298, 37, 0)])
def test_rotating_one_token_chunks(ctx, step, gen, window):
    """A one-token prefill chunk takes RotatingKVCache._update_in_place (a 256-row step, capped
    at the window), not a concatenation: n = 2, n = k*S + 2 and prefill step 1."""
    from mlx_lm.models.cache import RotatingKVCache

    _drive(Rotating(window), RotatingKVCache(max_size=window), Schedule(ctx, gen, step))


def test_rotating_refuses_kv_bits_as_mlx_lm_does():
    from mlx_lm.models.cache import RotatingKVCache

    cache = RotatingKVCache(max_size=64)
    cache.update_and_fetch(_zeros(10), _zeros(10))
    with pytest.raises(NotImplementedError):
        cache.to_quantized()
    assert Rotating.kv_bits_refusal and "RotatingKVCache" in Rotating.kv_bits_refusal
    assert not Rotating(64).holds_quantized(True)


@pytest.mark.parametrize("chunk", WINDOWS)
@pytest.mark.parametrize("ctx,step,gen", SCHEDULES)
def test_chunked_is_chunked_kvcache(ctx, step, gen, chunk):
    """llama4.py calls maybe_trim_front on every ChunkedKVCache before each model call."""
    from mlx_lm.models.cache import ChunkedKVCache

    s = Schedule(ctx, gen, step)
    cache = _drive(Chunked(chunk), ChunkedKVCache(chunk), s,
                   before=lambda c: c.maybe_trim_front())
    assert type(cache).__name__ == Chunked.mlx_lm_class


@pytest.mark.parametrize("rows", WINDOWS)
@pytest.mark.parametrize("ctx,step,gen", SCHEDULES)
def test_window_is_deepseek_v41_layer_cache(ctx, step, gen, rows):
    """LayerCache.update_window returns the kept rows with the call's rows appended and keeps
    the last window_size of them: exact sizes, no 256-token steps."""
    import mlx.core as mx
    from mlx_lm.models.deepseek_v41 import LayerCache

    s = Schedule(ctx, gen, step)
    topk = 5
    kind = Window(rows, topk)
    a = Attn(kind, q_heads=1, kv_heads=1, k_dim=HEAD_DIM, v_dim=0, head_dim=HEAD_DIM)
    run = Run(ctx=ctx, gen=gen, prefill_step_size=step)
    cache = LayerCache(rows)
    total = s.chunks()[2]
    for i, k in enumerate(_calls(s), start=1):
        window = cache.update_window(mx.zeros((1, k, HEAD_DIM), dtype=mx.bfloat16))
        if i <= total:
            # _window_indices gathers each query's last window_size rows of what
            # update_window returned, then its top-k compressed picks.
            assert min(window.shape[1], rows) + topk == s.keys_seen(a, i)
            assert cache.window.shape[1] == kind.tokens_prefill(s, i)
            assert cache.nbytes == layer_bytes_prefill(a, s, i, False, run, ACT)
    assert cache.window.shape[1] == kind.tokens_final(s)
    assert cache.nbytes == layer_bytes_final(a, s, False, run, ACT)
    assert not kind.grows_in_steps
    assert not hasattr(cache, "to_quantized")  # mlx-lm never quantizes it


@pytest.mark.parametrize("ctx,step,gen", SCHEDULES)
def test_shared_reads_the_kvcache_of_an_earlier_layer(ctx, step, gen):
    """A KV-shared layer (Gemma 3n / 4) attends the keys its source KVCache returns and owns no
    rows of its own."""
    from mlx_lm.models.cache import KVCache

    s = Schedule(ctx, gen, step)
    kind = Shared()
    source = KVCache()
    for i, k in enumerate(_calls(s)[: s.chunks()[2]], start=1):
        keys, _ = source.update_and_fetch(_zeros(k), _zeros(k))
        assert kind.keys_seen(s, i) == keys.shape[2]
        assert kind.tokens_prefill(s, i) == 0
    assert kind.tokens_final(s) == 0 and not kind.owns_memory


def test_the_flags_act_on_each_kind_as_on_its_mlx_lm_class():
    from mlx_lm.models import cache as c

    # maybe_quantize_kv_cache converts what has a to_quantized; BatchKVCache merges what has a
    # merge(): ChunkedKVCache has neither.
    assert Full.quantizable and hasattr(c.KVCache, "to_quantized")
    assert not Chunked.quantizable and not hasattr(c.ChunkedKVCache, "to_quantized")
    assert Chunked.kv_bits_refusal is None  # left as it is, silently
    for kind, cls in ((Full, c.KVCache), (Rotating, c.RotatingKVCache),
                      (Chunked, c.ChunkedKVCache)):
        assert kind.mergeable == hasattr(cls, "merge"), kind.name
        assert kind.mlx_lm_class == cls.__name__
        assert kind.grows_in_steps and cls.step == 256

    # make_prompt_cache(max_kv_size=...) gives a model without make_cache a RotatingKVCache of
    # that size per layer; --max-kv-size leaves the windowed kinds as they are.
    class Model:  # mlx-lm reads only len(model.layers) here
        layers = (None, None)

    made = c.make_prompt_cache(Model(), max_kv_size=700)
    assert {type(x).__name__ for x in made} == {Full().under_max_kv_size(700).mlx_lm_class}
    assert {x.max_size for x in made} == {Full().under_max_kv_size(700).window} == {700}
    for kind in (Rotating(64), Chunked(64), Shared(), Window(64)):
        assert kind.under_max_kv_size(700) == kind


def test_names_are_stable_and_map_back():
    assert {n: k.name for n, k in KINDS.items()} == {
        "full": "full", "rotating": "rotating", "chunked": "chunked", "shared": "shared",
        "window": "window"}
    assert from_mlx_lm("RotatingKVCache", 64) == Rotating(64)
    assert from_mlx_lm("ChunkedKVCache", 64) == Chunked(64)
    assert from_mlx_lm("KVCache", None) == Full()
    assert Rotating(64) != Chunked(64) and hash(Rotating(64)) == hash(Rotating(64))
