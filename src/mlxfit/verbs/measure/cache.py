"""What mlx-lm's caches really hold: byte counts and descriptions of one layer's cache object.

Any mlx-lm cache class is handled (KVCache, RotatingKVCache, QuantizedKVCache, ArraysCache,
CacheList): ``cache_nbytes`` adds up every ``mx.array`` its state reaches, ``describe_cache``
records class, bytes, offset and capacity for the measurement record, and the private helpers
sum a whole prompt cache or its recurrent (ArraysCache) part. Used by ``mlxfit.verbs.measure.run``
while a run is measured; mlx is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any


def _state_nbytes(obj) -> int:
    """Bytes of every mx.array reachable from a cache's state (nested tuples, lists, CacheList)."""
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
    import mlx.core as mx

    if isinstance(obj, mx.array):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(_state_nbytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(_state_nbytes(x) for x in obj.values())
    return 0


def cache_nbytes(cache) -> int:
    """Real bytes held by one layer's cache object (any mlx-lm cache class)."""
    if hasattr(cache, "caches"):  # CacheList
        return sum(cache_nbytes(c) for c in cache.caches)
    if hasattr(cache, "cache") and isinstance(cache.cache, list):  # ArraysCache
        return _state_nbytes(cache.cache) + _state_nbytes(
            [getattr(cache, "left_padding", None), getattr(cache, "lengths", None)]
        )
    if not hasattr(cache, "keys") and hasattr(cache, "nbytes"):
        # A family's own cache class (deepseek_v41's LayerCache: window, compressed groups,
        # pending rows): the bytes it says it holds (its state's 0-d offset is not held).
        return int(cache.nbytes)
    return _state_nbytes([getattr(cache, "keys", None), getattr(cache, "values", None)])


def describe_cache(cache) -> dict:
    """Class, bytes, token offset and capacity of one layer's cache."""
    d: dict[str, Any] = {"class": type(cache).__name__, "nbytes": cache_nbytes(cache)}
    if hasattr(cache, "caches"):
        d["parts"] = [describe_cache(c) for c in cache.caches]
        return d
    if hasattr(cache, "cache") and isinstance(cache.cache, list):
        d["arrays"] = [
            None
            if a is None
            else {"shape": list(a.shape), "dtype": str(a.dtype), "nbytes": a.nbytes}
            for a in cache.cache
        ]
        return d
    d["offset"] = getattr(cache, "offset", None)
    keys = getattr(cache, "keys", None)
    if keys is not None:
        first = keys[0] if isinstance(keys, (list, tuple)) else keys
        d["capacity"] = first.shape[-2]
        if isinstance(keys, (list, tuple)):
            d["keys"] = [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in keys]
            d["values"] = [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in cache.values]
        else:
            d["keys"] = {"shape": list(keys.shape), "dtype": str(keys.dtype)}
            d["values"] = {"shape": list(cache.values.shape), "dtype": str(cache.values.dtype)}
    else:
        d["capacity"] = 0
    for attr in ("max_size", "keep", "bits", "group_size", "chunk_size"):
        if hasattr(cache, attr):
            d[attr] = getattr(cache, attr)
    return d


def total_cache_bytes(prompt_cache) -> int:
    return sum(cache_nbytes(c) for c in prompt_cache)


def state_cache_bytes(cache) -> int:
    """Bytes of the recurrent (ArraysCache) part of one layer's cache."""
    if hasattr(cache, "caches"):  # CacheList
        return sum(state_cache_bytes(c) for c in cache.caches)
    if hasattr(cache, "cache") and isinstance(cache.cache, list):
        return cache_nbytes(cache)
    return 0
