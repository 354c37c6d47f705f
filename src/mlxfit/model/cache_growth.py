"""How many rows each mlx-lm cache class has allocated after a schedule of model calls.

Pure arithmetic over mlx_lm/models/cache.py (mlx-lm 0.32): KVCache's 256-token steps
(``update_and_fetch``, cache.py:339), RotatingKVCache's window (cache.py:423), ChunkedKVCache's
``maybe_trim_front`` (cache.py:727) and deepseek_v41's LayerCache window and compressor. The
schedule (``Schedule``: generate_step's prefill chunks, then single-token steps) is
``mlxfit.estimate.cache_sim.Schedule``; the cache kinds (``mlxfit.model.caches``) call these.
"""

from __future__ import annotations

from typing import Protocol

STEP = 256  # KVCache.step / QuantizedKVCache.step / RotatingKVCache.step / ChunkedKVCache.step


class ChunkFacts(Protocol):
    """One prefill chunk as the arithmetic reads it (``cache_sim.Chunk``)."""

    @property
    def size(self) -> int: ...

    @property
    def offset_before(self) -> int: ...

    @property
    def offset_after(self) -> int: ...


class Schedule(Protocol):
    """generate_step's schedule as the arithmetic reads it (``cache_sim.Schedule``)."""

    @property
    def ctx(self) -> int: ...

    @property
    def prefill_step_size(self) -> int: ...

    @property
    def prefill_tokens(self) -> int: ...

    def chunks(self) -> tuple[int, int, int]: ...

    def chunk_at(self, n: int) -> ChunkFacts: ...

    def chunk_size(self, n: int) -> int: ...

    def offset_after(self, n: int) -> int: ...


def _ceil_to(n: int, step: int) -> int:
    return -(-n // step) * step


def _update(cap: int, off: int, k: int) -> tuple[int, int]:
    """One KVCache.update_and_fetch of k tokens: on overflow, trim to the offset (when it is
    not on a step) and append ceil(k/256)*256 slots."""
    if off + k > cap:
        if off % STEP:
            cap = off
        cap += _ceil_to(k, STEP)
    return cap, off + k


def kv_capacity_after_updates(sizes: list[int]) -> int:
    """KVCache capacity after updates of the given sizes."""
    cap = off = 0
    for k in sizes:
        cap, off = _update(cap, off, k)
    return cap


def capacity_after_equal_updates(n: int, k: int, cap: int = 0, off: int = 0) -> tuple[int, int]:
    """(capacity, offset) after n updates of k tokens each, in O(256) steps: the state
    (offset mod 256, capacity - offset) repeats within 256 updates, and from then on every
    cycle adds the same tokens to both, so whole cycles are skipped."""
    seen: dict[tuple[int, int], tuple[int, int, int]] = {}
    i = 0
    while i < n:
        key = (off % STEP, cap - off)
        if key in seen:
            j, _, off_j = seen[key]
            period, grow = i - j, off - off_j  # cap grows by the same amount per cycle
            skip = (n - i) // period
            cap, off, i = cap + skip * grow, off + skip * grow, i + skip * period
            seen.clear()
            if i >= n:
                break
        else:
            seen[key] = (i, cap, off)
        cap, off = _update(cap, off, k)
        i += 1
    return cap, off


def full_capacity_prefill(s: Schedule, n_chunks: int) -> int:
    """KVCache capacity right after the ``n_chunks``-th prefill chunk."""
    full, last, total = s.chunks()
    n_chunks = min(n_chunks, total)
    if n_chunks <= 0:
        return 0
    n_full = min(n_chunks, full)
    if s.prefill_step_size % STEP == 0:
        cap = n_full * s.prefill_step_size
        if n_chunks > full:  # the short last chunk
            cap += _ceil_to(last, STEP)
        return cap
    cap, off = capacity_after_equal_updates(n_full, s.prefill_step_size)
    if n_chunks > full:
        cap, off = _update(cap, off, last)
    return cap


def full_capacity_final(s: Schedule, tokens: int | None = None) -> int:
    """KVCache capacity once it holds ``tokens`` (default: the whole context) after prefill."""
    tokens = s.ctx if tokens is None else tokens
    _, _, total = s.chunks()
    cap = full_capacity_prefill(s, total)
    off = s.prefill_tokens if total else 0
    if tokens <= off:
        return cap
    # Single-token updates: when full, trim to the offset and append one 256 step.
    if tokens > cap:
        cap = cap + _ceil_to(tokens - cap, STEP)
    return cap


def rotating_size_prefill(s: Schedule, window: int, n_chunks: int) -> int:
    """RotatingKVCache length after the n-th prefill chunk. A multi-token update
    (``_update_concat``) keeps the last window-1 tokens it holds and appends the whole chunk:
    min(tokens before this chunk, window-1) + chunk. A one-token chunk (prefill step 1, or a
    last chunk of one token) takes ``_update_in_place``, as a decode step does: a buffer the
    offset has filled grows by min(256, window - offset) rows, then is trimmed to the window."""
    n_chunks = min(n_chunks, s.chunks()[2])
    if n_chunks <= 0:
        return 0
    c = s.chunk_at(n_chunks)
    if c.size > 1:
        return min(c.offset_before, window - 1) + c.size
    if s.prefill_step_size == 1:  # every chunk in place: grown in 256-row steps from empty
        return min(window, _ceil_to(c.offset_after, STEP))
    held = rotating_size_prefill(s, window, n_chunks - 1)  # a concatenation: held <= offset
    if held == c.offset_before and held < window:  # full and below the window: one step more
        return min(window, held + STEP)
    return min(held, window)


def rotating_keys_prefill(s: Schedule, window: int, n_chunks: int) -> int:
    """Keys a RotatingKVCache returns for the n-th prefill chunk: the whole buffer after a
    concatenation; after an in-place (one-token) update the rows up to the offset only
    (``keys_and_values``)."""
    held = rotating_size_prefill(s, window, n_chunks)
    return min(held, s.chunk_at(n_chunks).offset_after)


def rotating_size_final(s: Schedule, window: int, tokens: int | None = None) -> int:
    """RotatingKVCache length once single-token steps have run: trimmed back to the window,
    or grown in 256-token steps (capped at the window) while the context is shorter."""
    tokens = s.ctx if tokens is None else tokens
    _, _, total = s.chunks()
    size = rotating_size_prefill(s, window, total)
    if tokens <= s.prefill_tokens:
        return size
    if size >= window:
        return window
    if tokens <= size:
        return size
    return min(window, size + _ceil_to(tokens - size, STEP))


def _chunked_call(length: int, valid: int, n: int, chunk: int) -> tuple[int, int]:
    """One llama4 model call on a ChunkedKVCache: maybe_trim_front (keep the last chunk_size
    tokens, an exact-size slice) then update_and_fetch of n tokens (KVCache growth)."""
    if length and valid > chunk:
        length = valid = chunk
    if length == 0 or valid + n > length:
        if length and valid % STEP:
            length = valid
        length += _ceil_to(n, STEP)
    return length, valid + n


def chunked_len_prefill(s: Schedule, chunk: int, n_chunks: int) -> int:
    """ChunkedKVCache rows (Llama 4 local layers) right after the n-th prefill chunk."""
    length = valid = 0
    for i in range(1, min(n_chunks, s.chunks()[2]) + 1):
        length, valid = _chunked_call(length, valid, s.chunk_size(i), chunk)
    return length


def chunked_len_final(s: Schedule, chunk: int, tokens: int | None = None) -> int:
    """ChunkedKVCache rows once it has seen ``tokens`` (default: the context): the prefill
    chunks, then single-token calls. While at most chunk_size tokens are held a call only
    grows the buffer in 256-token steps; from then on every call trims to chunk_size rows and
    appends one 256-token step."""
    tokens = s.ctx if tokens is None else tokens
    length = valid = 0
    total = s.chunks()[2]
    for i in range(1, total + 1):
        length, valid = _chunked_call(length, valid, s.chunk_size(i), chunk)
    rest = tokens - (s.prefill_tokens if total else 0)
    if rest <= 0:
        return length
    plain = min(rest, max(chunk - valid + 1, 0))  # calls that start with <= chunk tokens
    if plain:
        if valid + plain > length:  # a full buffer grows by 256 rows at a time
            length += _ceil_to(valid + plain - length, STEP)
        valid += plain
        rest -= plain
    if rest > 0:
        length = chunk + STEP
    return length


def tokens_seen_prefill(s: Schedule, n_chunks: int) -> int:
    """Tokens every layer's cache has taken in right after the n-th prefill chunk."""
    n_chunks = min(n_chunks, s.chunks()[2])
    return s.offset_after(n_chunks) if n_chunks > 0 else 0


def window_rows(tokens: int, window: int) -> int:
    """deepseek_v41 LayerCache.update_window: concatenate, then keep the last ``window`` rows
    (an exact-size slice, no 256-token steps): min(window, tokens) after every call."""
    return min(window, tokens)


# deepseek_v41 LayerCache's compressed KV, index keys and pending rows: float32 elements (the
# oracle at real widths: 22,036,480 B where 2-byte rows gave 11,288,576 B, issue 24).
COMPRESSED_BYTES = 4


def compressed_rows(tokens: int, ratio: int) -> tuple[int, int]:
    """deepseek_v41 Compressor: (closed groups, rows of the open group) after ``tokens``. Each
    call pools every full group of ``ratio`` rows (the open group's pending rows first); ratio
    1 compresses each token on its own and keeps no pending rows."""
    return divmod(tokens, ratio) if ratio > 1 else (tokens, 0)
