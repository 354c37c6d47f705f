"""One class per mlx-lm cache kind (mlx_lm/models/cache.py, mlx-lm 0.32): what a layer's cache
holds at a point of a generation, and how mlx-lm's flags act on it.

Every rule that depends on the kind lives here, so the estimators ask the layer's
``Attn.cache`` instead of testing a name:
- ``Full``      KVCache: every token, grown in 256-token steps (cache.py:339).
- ``Rotating``  RotatingKVCache(max_size=window): the last ``window`` tokens (cache.py:423).
- ``Chunked``   ChunkedKVCache(chunk_size=window): Llama 4's local layers (cache.py:727).
- ``Shared``    a layer that reads an earlier layer's cache (Gemma 3n / 4, afm7): owns none.
- ``Window``    deepseek_v41's LayerCache: exactly the last ``window`` rows, kept by
                concatenate-and-slice (deepseek_v41.py:281), no 256-token steps.

The QuantizedKVCache that ``--kv-bits`` converts a cache into is a rule of the kind it starts
from (``holds_quantized``, ``kv_bits_refusal``). The MLA latent, deepseek_v41's compressed KV
and the recurrent ArraysCache state are riders on the layer (``Attn.mla``, ``Attn.compress``,
``Layer.state_bytes``): they change the bytes per token or add constant bytes, not the rule
of how many tokens are held.

``name`` is the kind's stable word in JSON (``kv_cache`` term's ``layers_by_cache``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlxfit.model import cache_growth as g
from mlxfit.model.cache_growth import Schedule


@dataclass(frozen=True)
class CacheKind:
    """The rules every kind answers; a subclass states its own."""

    name: ClassVar[str]  # stable word in JSON output
    mlx_lm_class: ClassVar[str]  # the mlx-lm class, for notes and refusals
    label: ClassVar[str]  # how `mlxfit families` lists it
    owns_memory: ClassVar[bool] = True
    # Whether its buffer grows in KVCache's 256-token steps (render/fit.py's report wording).
    # A shared layer reads a stepped cache of an earlier layer.
    grows_in_steps: ClassVar[bool] = True
    # Whether a chunk's queries attend every earlier token plus the causal triangle of their
    # own (a KVCache, or a layer reading one): mlx-lm passes mask="causal" for any chunk, and
    # the attention's pairs are offset x chunk + chunk(chunk+1)/2.
    attends_all_earlier: ClassVar[bool] = False
    # generate.py maybe_quantize_kv_cache converts every cache with a to_quantized: only
    # KVCache's returns a QuantizedKVCache; ChunkedKVCache and LayerCache have none (left as
    # they are), RotatingKVCache's raises (``kv_bits_refusal``).
    quantizable: ClassVar[bool] = False
    kv_bits_refusal: ClassVar[str | None] = None
    # mlx_lm.server batches requests only when every cache class has a merge() into a batch
    # cache (BatchKVCache / BatchRotatingKVCache): ChunkedKVCache has none.
    mergeable: ClassVar[bool] = True
    # RotatingKVCache.is_trimmable is offset < max_size: past the window a draft model's
    # rejected tokens cannot be rewound.
    untrimmable_past_window: ClassVar[bool] = False
    # What fills when the context reaches the window (chart kinks): None, never stops growing.
    fill_note: ClassVar[str | None] = None
    # The buffer the last decode-step resize replaced: the one after prefill (a
    # RotatingKVCache trims its prefill buffer back to the window at the first single-token
    # step) or, for the rest, the buffer one 256-token step before the context.
    resized_last_after_prefill: ClassVar[bool] = False
    # deepseek_v41's _sparse_attention casts queries and keys to float32 before the scores.
    float32_scores: ClassVar[bool] = False

    @property
    def window(self) -> int | None:
        """Tokens the kind keeps (its window, chunk or the shared cache's); None: all."""
        return None

    def tokens_prefill(self, s: Schedule, n_chunks: int) -> int:
        """Rows the cache has allocated right after the n-th prefill chunk."""
        raise NotImplementedError

    def tokens_final(self, s: Schedule) -> int:
        """Rows the cache has allocated once it holds the schedule's whole context."""
        raise NotImplementedError

    def keys_seen(self, s: Schedule, n: int) -> int:
        """Keys chunk n's queries attend over (the score matrix's width): every token so far,
        this chunk included."""
        return s.chunk_at(n).offset_after

    def decode_keys(self, ctx: int) -> int:
        """Keys a decode token attends over at context ``ctx``."""
        return min(ctx, self.window) if self.window else ctx

    def causal_mask(self, queries: int) -> bool:
        """Whether a chunk of ``queries`` runs with mask="causal" (the fused kernels' causal
        path): models/base.py create_attention_mask builds an array mask when the chunk is
        longer than a sliding window."""
        return self.attends_all_earlier or (self.window is not None and queries <= self.window)

    def holds_quantized(self, converted: bool) -> bool:
        """Whether this cache is a QuantizedKVCache once the run's caches are ``converted``
        (``--kv-bits`` past ``--quantized-kv-start``)."""
        return converted and self.quantizable

    def under_max_kv_size(self, max_kv_size: int) -> CacheKind:
        """The kind ``make_prompt_cache(max_kv_size=...)`` gives this layer (for models without
        their own make_cache, which ignore the flag)."""
        return self

    def kv_group_refusal(self, widths: tuple[int, ...], group: int) -> str | None:
        """Why ``--kv-bits`` cannot convert this cache with ``--kv-group-size group``, or None:
        to_quantized runs mx.quantize over the keys' and values' last axis (the cached head
        widths), which raises ValueError unless the group size divides it."""
        bad = sorted({w for w in widths if w and w % group}) if self.quantizable else []
        if not bad:
            return None
        return (f"mlx-lm's mx.quantize cannot quantize this model's cache: its cached head "
                f"width {bad[0]} is not a multiple of --kv-group-size {group} (it raises "
                "ValueError)")


@dataclass(frozen=True)
class Full(CacheKind):
    name: ClassVar[str] = "full"
    mlx_lm_class: ClassVar[str] = "KVCache"
    label: ClassVar[str] = "KVCache"
    attends_all_earlier: ClassVar[bool] = True
    quantizable: ClassVar[bool] = True

    def tokens_prefill(self, s: Schedule, n_chunks: int) -> int:
        return g.full_capacity_prefill(s, n_chunks)

    def tokens_final(self, s: Schedule) -> int:
        return g.full_capacity_final(s)

    def under_max_kv_size(self, max_kv_size: int) -> CacheKind:
        # cache.py make_prompt_cache: RotatingKVCache(max_size=max_kv_size, keep=4) per layer.
        return Rotating(max_kv_size)


@dataclass(frozen=True)
class Rotating(CacheKind):
    size: int  # RotatingKVCache.max_size: the sliding window (or --max-kv-size)

    name: ClassVar[str] = "rotating"
    mlx_lm_class: ClassVar[str] = "RotatingKVCache"
    label: ClassVar[str] = "RotatingKVCache"
    kv_bits_refusal: ClassVar[str | None] = (
        "this model's sliding-window layers use RotatingKVCache, which mlx-lm cannot quantize "
        "(to_quantized raises NotImplementedError)")
    untrimmable_past_window: ClassVar[bool] = True
    fill_note: ClassVar[str | None] = "the sliding window is full"
    resized_last_after_prefill: ClassVar[bool] = True

    @property
    def window(self) -> int | None:
        return self.size

    def tokens_prefill(self, s: Schedule, n_chunks: int) -> int:
        return g.rotating_size_prefill(s, self.size, n_chunks)

    def tokens_final(self, s: Schedule) -> int:
        return g.rotating_size_final(s, self.size)

    def keys_seen(self, s: Schedule, n: int) -> int:
        # A multi-token update returns the kept window-1 tokens plus the whole chunk; a
        # one-token one the rows up to the offset.
        return g.rotating_keys_prefill(s, self.size, n)


@dataclass(frozen=True)
class Chunked(CacheKind):
    chunk: int  # ChunkedKVCache.chunk_size (attention_chunk_size)

    name: ClassVar[str] = "chunked"
    mlx_lm_class: ClassVar[str] = "ChunkedKVCache"
    label: ClassVar[str] = "ChunkedKVCache"
    mergeable: ClassVar[bool] = False
    fill_note: ClassVar[str | None] = "the attention chunk is full"

    @property
    def window(self) -> int | None:
        return self.chunk

    def tokens_prefill(self, s: Schedule, n_chunks: int) -> int:
        return g.chunked_len_prefill(s, self.chunk, n_chunks)

    def tokens_final(self, s: Schedule) -> int:
        return g.chunked_len_final(s, self.chunk)

    def keys_seen(self, s: Schedule, n: int) -> int:
        # maybe_trim_front keeps chunk_size tokens before the update appends this chunk.
        c = s.chunk_at(n)
        return min(c.offset_after, self.chunk + c.size)


@dataclass(frozen=True)
class Shared(CacheKind):
    """Reads the last earlier cache of its type; ``reads_window``: that cache's window (a
    sliding layer's), None for a full one."""

    reads_window: int | None = None

    name: ClassVar[str] = "shared"
    mlx_lm_class: ClassVar[str] = "none (an earlier layer's cache)"
    label: ClassVar[str] = "shared (no cache of its own)"
    owns_memory: ClassVar[bool] = False
    attends_all_earlier: ClassVar[bool] = True

    @property
    def window(self) -> int | None:
        return self.reads_window

    def tokens_prefill(self, s: Schedule, n_chunks: int) -> int:
        return 0

    def tokens_final(self, s: Schedule) -> int:
        return 0


@dataclass(frozen=True)
class Window(CacheKind):
    """deepseek_v41's LayerCache window; ``sparse_topk``: the compressed rows each query also
    attends (index_topk) on a compressing layer past an index layer, else 0."""

    rows: int  # LayerCache.window_size (sliding_window)
    sparse_topk: int = 0

    name: ClassVar[str] = "window"
    mlx_lm_class: ClassVar[str] = "LayerCache"
    label: ClassVar[str] = "LayerCache (sliding window)"
    grows_in_steps: ClassVar[bool] = False
    float32_scores: ClassVar[bool] = True

    @property
    def window(self) -> int | None:
        return self.rows

    def tokens_prefill(self, s: Schedule, n_chunks: int) -> int:
        return g.window_rows(g.tokens_seen_prefill(s, n_chunks), self.rows)

    def tokens_final(self, s: Schedule) -> int:
        return g.window_rows(s.ctx, self.rows)

    def keys_seen(self, s: Schedule, n: int) -> int:
        # update_window returns the kept rows with the chunk appended, then the window's
        # last rows; each query's window rows and its top-k compressed picks.
        return min(s.chunk_at(n).offset_after, self.rows) + self.sparse_topk


KINDS: dict[str, type[CacheKind]] = {k.name: k for k in (Full, Rotating, Chunked, Shared, Window)}


def grows_in_steps(name: str) -> bool:
    """The rule of the kind named ``name`` in a JSON output (``layers_by_cache``)."""
    return KINDS[name].grows_in_steps


def from_mlx_lm(class_name: str, window: int | None) -> CacheKind:
    """The kind of an mlx-lm cache object named ``class_name`` (the oracle's derived plans)."""
    if "Rotating" in class_name:
        return Rotating(window or 0)
    if "Chunked" in class_name:
        return Chunked(window or 0)
    return Full()


@dataclass(frozen=True)
class StateKind:
    """An ArraysCache a non-attention mixer keeps (cache.py ArraysCache / MambaCache): at most
    the layer's ``state_bytes``; the kind says what reads it and how it fills."""

    name: str  # stable word in JSON (``state`` term's ``layers_by_kind``, `mlxfit families`)
    # Whether a recurrent scan reads and rewrites the whole state for every token (gated-delta
    # / linear attention, Mamba's SSM): the per-chunk scan FLOPs of estimate/compute.py.
    scanned: bool
    # 0: the state is its full size from the first call (a recurrence, a conv window of
    # zeros). Else the bytes it keeps per token seen, up to the layer's state_bytes (LongCat's
    # n-gram ids: the last min(n-1, tokens seen) of them).
    bytes_per_token: int = 0

    def held(self, cap: int, tokens: int) -> int:
        """Bytes the state holds once ``tokens`` tokens went through the model."""
        if not self.bytes_per_token:
            return cap
        return min(cap, max(tokens, 0) * self.bytes_per_token)


LINEAR_STATE = StateKind("linear", scanned=True)  # linear attention / gated delta recurrence
MAMBA_STATE = StateKind("mamba", scanned=True)  # SSM state and its conv window
CONV_STATE = StateKind("conv", scanned=False)  # a short convolution's window only (LFM2 …)
# LongCat's NgramEmbedding keeps context[..., -(n-1):] of the int64 ids seen so far
# (longcat_flash_ngram.py NgramEmbedding.__call__): 8 bytes a token until n-1 are held.
NGRAM_STATE = StateKind("ngram", scanned=False, bytes_per_token=8)
DERIVED_STATE = StateKind("mlx-lm", scanned=False)  # read from mlx-lm's caches (oracle plans)
