"""generate_step's schedule (mlx-lm 0.32): the first P-1 prompt tokens go through the model
in chunks of ``prefill_step_size``, the last prompt token and every generated token one at a
time; and the chunk facts every byte term reads.

What each cache kind holds at a point of this schedule is the kind's own rule
(``mlxfit.model.caches``, over the arithmetic of ``mlxfit.model.cache_growth``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxfit.model.cache_growth import compressed_rows

if TYPE_CHECKING:
    from mlxfit.model.config import Attn


@dataclass(frozen=True)
class Schedule:
    """A generation of ``ctx`` tokens: prompt ``ctx - gen`` then ``gen`` decode steps."""

    ctx: int
    gen: int
    prefill_step_size: int

    @property
    def prompt(self) -> int:
        return max(self.ctx - self.gen, 1)

    @property
    def prefill_tokens(self) -> int:
        """Tokens processed in chunks (P-1: the last prompt token goes through _step)."""
        return self.prompt - 1

    def chunks(self) -> tuple[int, int, int]:
        """(number of full chunks, size of the last chunk, number of chunks)."""
        p = self.prefill_tokens
        if p <= 0:
            return 0, 0, 0
        full, rest = divmod(p, self.prefill_step_size)
        if rest == 0:
            return full, self.prefill_step_size, full
        return full, rest, full + 1

    # Chunk facts. Every byte term and the buffer check ask these, so that the size, the offset
    # and the cache's precision of "prefill chunk n" (1-based) have one definition.

    def chunk_at(self, n: int) -> Chunk:
        """Prefill chunk ``n`` (1 <= n <= number of chunks): its size and the cache offset
        before it. Every chunk is ``prefill_step_size`` tokens but the last, which holds the
        rest."""
        full, last, total = self.chunks()
        if not 1 <= n <= total:
            raise ValueError(f"chunk {n} of a prefill of {total} chunks")
        step = self.prefill_step_size
        return Chunk(n, step if n <= full else last, (n - 1) * step)

    def chunk_size(self, n: int) -> int:
        return self.chunk_at(n).size

    def offset_before(self, n: int) -> int:
        """Tokens in the cache when chunk n starts (the cache's offset)."""
        return self.chunk_at(n).offset_before

    def offset_after(self, n: int) -> int:
        """Tokens in the cache once chunk n is appended."""
        return self.chunk_at(n).offset_after

    def keys_seen(self, a: Attn, n: int) -> int:
        """Keys chunk n's queries attend over (the score matrix's width): the layer's cache
        kind decides (``CacheKind.keys_seen``)."""
        return a.cache.keys_seen(self, n)

    def index_keys(self, a: Attn, n: int) -> int:
        """Index keys chunk n's queries score (deepseek_v41's indexer): the closed groups of
        the index source's compression once the chunk is in; 0 for a layer without one."""
        if a.index is None:
            return 0
        return compressed_rows(self.offset_after(n), a.index.source_ratio)[0]

    def kv_quantized_during(self, n: int, kv_bits: int | None, quantized_kv_start: int) -> bool:
        """Whether chunk n runs on a QuantizedKVCache. generate_step calls
        maybe_quantize_kv_cache after each model call, converting once offset >=
        quantized_kv_start: chunk n > 1 runs quantized when the offset before it reached the
        start; the first chunk always runs on the full-precision cache, even with
        --quantized-kv-start 0."""
        return kv_bits is not None and n > 1 and self.offset_before(n) >= quantized_kv_start

    def kv_converted_after(self, n: int, kv_bits: int | None, quantized_kv_start: int) -> bool:
        """Whether the cache is converted right after chunk n (it ran full precision and its
        tokens reach the start): that chunk holds the bf16 cache and its quantized copy."""
        return (kv_bits is not None
                and not self.kv_quantized_during(n, kv_bits, quantized_kv_start)
                and self.offset_after(n) >= quantized_kv_start)

    @property
    def largest_call(self) -> int:
        """Tokens of generate_step's largest model call: the first prefill chunk, or the
        single-token step when the prompt is too short to be chunked."""
        return max(self.chunk_size(1) if self.prefill_tokens > 0 else 0, 1)


@dataclass(frozen=True)
class Chunk:
    """One prefill chunk: generate_step's n-th multi-token model call (n from 1)."""

    n: int
    size: int
    offset_before: int

    @property
    def offset_after(self) -> int:
        return self.offset_before + self.size


