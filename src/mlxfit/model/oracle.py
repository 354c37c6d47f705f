"""The cache-plan oracle: what mlx-lm's own caches hold for a config, read without evaluating.

MLX is lazy. The model built by mlx-lm's own classes (``load_model``'s ``get_model_classes``
and ``ModelArgs.from_dict``, the machinery ``mlx_lm.utils.load_model`` uses, without weights)
at the config's real dimensions allocates nothing until something is evaluated;
``make_prompt_cache`` plus the model's forward pass over a prompt chunked exactly as
``generate_step`` does it (``prefill_step_size`` tokens at a time for the first P-1, then one token per step; ``maybe_quantize_kv_cache`` after every call)
leaves cache objects whose arrays have their real shapes and dtypes. Nothing is ever passed to
``mx.eval``: the bytes come from the shapes.

A few families evaluate inside their forward pass (``.tolist()`` in a router) or need a kernel
the CPU backend lacks; for those (``FORWARD_FALLBACK``) the oracle builds mlx-lm's caches with
``make_prompt_cache`` and drives each with its own ``update_and_fetch`` on lazy zeros of the
widths the attention module reads from the config: the update rule, not the forward pass.

The measure extra only (mlx, mlx-lm): imported by ``mlxfit.verbs.measure`` and on demand by
the fit twin when a plan is derived (``--plan mlx-lm``); never on the plain install's path.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mlxfit.errors import ConfigError, OracleError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.caches import DERIVED_STATE, from_mlx_lm
from mlxfit.model.config import Attn, Layer


def _kv_widths(args: Any) -> tuple[int, int, int]:
    # (kv heads, key width, value width) the standard attention modules read from ModelArgs.
    heads = getattr(args, "num_attention_heads", None) or args.n_heads
    kv = getattr(args, "num_key_value_heads", None) or heads
    hd = getattr(args, "head_dim", None) or args.hidden_size // heads
    return kv, hd, hd


def _dbrx_widths(args: Any) -> tuple[int, int, int]:
    hd = args.d_model // args.n_heads
    return args.attn_config["kv_n_heads"], hd, hd


# Families whose forward pass cannot run lazily here, why, and the per-layer KV widths their
# attention module reads from the config (dbrx.py Attention, bitnet.py Attention).
FORWARD_FALLBACK: dict[str, tuple[str, Callable[[Any], tuple[int, int, int]]]] = {
    "dbrx": ("its MoE router calls .tolist() in the forward pass (evaluates every layer)",
             _dbrx_widths),
    "bitnet": ("its BitLinear layers need a Metal kernel (no CPU path)", _kv_widths),
    "muse_spark": ("its attention needs a Metal kernel (no CPU path)",
                   lambda a: _kv_widths(a.text)),
    # OLMo 1: every head its own KV, head_dim d_model / n_heads (olmo.py TransformerBlock).
    "olmo": (("its attention adds the 'causal' mask string to the scores, so every "
              "multi-token call fails (mlx-lm 0.32.2)"),
             lambda a: (a.n_heads, a.d_model // a.n_heads, a.d_model // a.n_heads)),
}


@dataclass(frozen=True)
class CacheEntry:
    """One entry of mlx-lm's prompt cache once the context is in it."""

    kind: str  # the class, CacheList(...) spelled out
    kv_bytes: int  # KVCache-like arrays: grow with the context
    state_bytes: int  # ArraysCache arrays: constant in the context
    arrays: tuple[tuple[str, tuple[int, ...], str], ...]  # (role, shape, dtype)
    window: int | None = None  # RotatingKVCache.max_size / ChunkedKVCache.chunk_size


@dataclass(frozen=True)
class OracleRun:
    mlx_lm_version: str
    model_type: str
    ctx: int
    prefill_step_size: int
    kv_bits: int | None
    method: str  # "forward" | "cache update (<reason>)"
    entries: tuple[CacheEntry, ...]
    seconds: float
    num_layers: int  # len(model.layers): shared-KV layers have no cache entry of their own
    own_cache: bool = False  # the model defines make_cache() (--max-kv-size is then ignored)
    # mlx-lm's shared recurrence helpers the model's modules call (RECURRENCE_HELPERS values)
    recurrences: tuple[str, ...] = ()

    @property
    def kv_bytes(self) -> int:
        return sum(e.kv_bytes for e in self.entries)

    @property
    def state_bytes(self) -> int:
        return sum(e.state_bytes for e in self.entries)


# mlx-lm's shared recurrence modules, whose prefill transients mlxfit has terms for
# (estimate/memory.py): a model whose modules import from one of them runs that recurrence.
RECURRENCE_HELPERS = {"mlx_lm.models.gated_delta": "gated_delta", "mlx_lm.models.ssm": "ssm"}


def _recurrences(model: Any) -> tuple[str, ...]:
    """The shared recurrences the model's own modules import (read from their namespaces)."""
    found = set()
    for name in {type(m).__module__ for m in _submodules(model)}:
        for obj in getattr(sys.modules.get(name), "__dict__", {}).values():
            kind = RECURRENCE_HELPERS.get(getattr(obj, "__module__", None) or "")
            if kind:
                found.add(kind)
    return tuple(sorted(found))


def _submodules(model: Any) -> list:
    try:
        return [model, *model.modules()]
    except Exception:  # noqa: BLE001 - a family's own module tree: the top module only
        return [model]


def mlx_lm_version() -> str:
    # mlx-lm is optional (the measure extra): imported for the oracle only
    import mlx_lm

    return str(mlx_lm.__version__)


def _arrays(obj: Any, role: str, out: list) -> None:
    # mlx is optional (the measure extra): imported for the oracle only
    import mlx.core as mx

    if isinstance(obj, mx.array):
        out.append((role, tuple(obj.shape), str(obj.dtype).split(".")[-1], obj.nbytes))
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _arrays(x, role, out)


def _entry(cache: Any) -> CacheEntry:
    if hasattr(cache, "caches"):  # CacheList: its parts, summed
        parts = [_entry(c) for c in cache.caches]
        windows = [p.window for p in parts if p.window]
        return CacheEntry(f"CacheList({','.join(p.kind for p in parts)})",
                          sum(p.kv_bytes for p in parts), sum(p.state_bytes for p in parts),
                          tuple(a for p in parts for a in p.arrays),
                          windows[0] if windows else None)
    found: list = []
    if hasattr(cache, "cache") and isinstance(cache.cache, list):  # ArraysCache
        _arrays(cache.cache, "state", found)
        state = sum(a[3] for a in found)
        return CacheEntry(type(cache).__name__, 0, state, tuple(a[:3] for a in found))
    if not hasattr(cache, "keys"):  # a family's own cache class: every array of its state
        _arrays(list(cache.state), "arrays", found)
        # But 0-d arrays: deepseek_v41's LayerCache.state packs its Python int offset as a
        # fresh mx.array(self.offset) each time it is read (for saving a prompt cache); the
        # cache holds no such array and its own nbytes leaves it out, so neither does this.
        found = [a for a in found if a[1]]
        return CacheEntry(type(cache).__name__, sum(a[3] for a in found), 0,
                          tuple(a[:3] for a in found))
    _arrays(getattr(cache, "keys", None), "keys", found)
    _arrays(getattr(cache, "values", None), "values", found)
    window = getattr(cache, "max_size", None) or getattr(cache, "chunk_size", None)
    return CacheEntry(type(cache).__name__, sum(a[3] for a in found), 0,
                      tuple(a[:3] for a in found), window)


# Packages an mlx-lm module imports only to see whether they are installed, by module.
# mlx_lm/models/olmo.py does `import hf_olmo` (ai2-olmo) and sys.exit(1)s without it, yet its
# model code never uses it (the OLMo-1 blocks are plain MLX): an empty placeholder module
# stands in while that module is imported, so the oracle can build OLMo-1 without ai2-olmo.
IMPORT_PROBES: dict[str, str] = {"olmo": "hf_olmo"}


@contextmanager
def _probe_placeholder(module: str) -> Iterator[None]:
    probe = IMPORT_PROBES.get(module)
    if (probe is None or probe in sys.modules or f"mlx_lm.models.{module}" in sys.modules
            or importlib.util.find_spec(probe) is not None):  # the real package is used
        yield
        return
    sys.modules[probe] = types.ModuleType(probe)
    try:
        yield
    finally:
        sys.modules.pop(probe, None)


def import_model_module(module: str) -> Any:
    """mlx_lm.models.<module>, with the placeholder for an availability probe (IMPORT_PROBES)."""
    with _probe_placeholder(module):
        return importlib.import_module(f"mlx_lm.models.{module}")


def mlx_lm_classes(config: dict) -> tuple[Any, Any]:
    """(Model, ModelArgs) of the module mlx-lm loads for ``config``: the function
    ``mlx_lm.utils.load_model`` uses by default (its ``get_model_classes`` parameter), taken
    from that public signature rather than by its private name."""
    from mlx_lm.utils import load_model  # the measure extra: imported with mlx-lm only

    get_classes = inspect.signature(load_model).parameters["get_model_classes"].default
    return get_classes(config)


def _build(config: dict, dtype: str):
    # mlx / mlx-lm are optional (the measure extra): imported for the oracle only
    import mlx.core as mx
    from mlx_lm.utils import MODEL_REMAPPING

    module = str(config.get("model_type", ""))
    module = MODEL_REMAPPING.get(module, module)
    try:
        with _probe_placeholder(module):
            model_class, args_class = mlx_lm_classes(config)
    except (ValueError, ImportError, SystemExit) as e:  # a module may sys.exit() on import
        raise OracleError(f"mlx-lm {mlx_lm_version()} cannot load model_type "
                          f"{config.get('model_type')!r}: {_one_line(e)}") from None
    try:
        args = args_class.from_dict(config)
        model = model_class(args)
    except TypeError as e:  # a required ModelArgs field is missing
        missing = _missing_field(e)
        if missing:
            raise ConfigError(f"config.json: missing field '{missing}' that mlx-lm "
                              f"{mlx_lm_version()} requires for model_type "
                              f"{config.get('model_type')!r}", field=missing) from None
        raise OracleError(f"mlx-lm {mlx_lm_version()} rejected the config: "
                          f"{_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - any failure of mlx-lm's own code is reported
        raise OracleError(f"mlx-lm {mlx_lm_version()} could not build the model: "
                          f"{type(e).__name__} {_one_line(e)}") from None
    _cast_as_convert(model, getattr(mx, dtype))  # lazy: the cache dtype follows the activations
    return model, args


def build_model(config: dict, dtype: str = "bfloat16") -> tuple[Any, Any]:
    """(model, args) as mlx-lm's load builds them from ``config`` (ModelArgs.from_dict and
    Model(args), parameters lazy): ConfigError naming a missing required field, OracleError
    for any other failure of mlx-lm's own code."""
    return _build(config, dtype)


def _cast_as_convert(model: Any, dtype: Any) -> None:
    """Cast the floating parameters to ``dtype`` the way mlx_lm.convert does: those the
    model's ``cast_predicate`` keeps (deepseek_v41's compressor and hyper-connections stay
    float32, and so do the compressed rows they make) are left as they are."""
    # mlx is optional (the measure extra): imported for the oracle only
    import mlx.core as mx
    from mlx.utils import tree_map_with_path

    keep = getattr(model, "cast_predicate", lambda _: True)

    def cast(path: str, v: Any) -> Any:
        return v.astype(dtype) if keep(path) and mx.issubdtype(v.dtype, mx.floating) else v

    model.update(tree_map_with_path(cast, model.parameters()))


def _missing_field(e: TypeError) -> str | None:
    msg = str(e)
    if "missing" in msg and "'" in msg:
        return msg.split("'")[1]
    return None


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


def _detach(obj: Any) -> Any:
    """The same cache with every array replaced by a fresh lazy array of its shape and dtype:
    the next call then builds on a graph-free cache, so the graph (and the oracle's time and
    memory) stays one chunk deep instead of growing with every chunk."""
    # mlx is optional (the measure extra): imported for the oracle only
    import mlx.core as mx

    if isinstance(obj, mx.array):
        return mx.zeros(obj.shape, obj.dtype)
    if isinstance(obj, list):
        return [_detach(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_detach(x) for x in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        for k, v in vars(obj).items():
            if isinstance(v, (mx.array, list, tuple)) or hasattr(v, "update_and_fetch"):
                setattr(obj, k, _detach(v))
    return obj


def _chunks(ctx: int, gen: int, step: int) -> list[int]:
    """generate_step's model calls: P-1 prompt tokens in chunks of ``step``, then one token at
    a time until the cache holds ``ctx`` tokens."""
    prompt = max(ctx - gen, 1)
    rest = prompt - 1
    calls = []
    while rest > 0:
        n = min(step, rest)
        calls.append(n)
        rest -= n
    calls += [1] * (ctx - (prompt - 1))
    return calls


def cache_plan(config: dict, ctx: int, *,
               prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE, gen: int = 0,
               kv_bits: int | None = None, kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
               quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
               max_kv_size: int | None = None,
               dtype: str = "bfloat16", method: str = "auto") -> OracleRun:
    """mlx-lm's prompt cache for ``config`` after a generation of ``ctx`` tokens, unevaluated.

    ``method``: "forward" (the model's own forward pass), "update" (the caches' update rule on
    lazy zeros; only for FORWARD_FALLBACK families) or "auto" (forward unless the family is in
    FORWARD_FALLBACK)."""
    # mlx / mlx-lm are optional (the measure extra): imported for the oracle only
    import mlx.core as mx
    from mlx_lm.generate import maybe_quantize_kv_cache
    from mlx_lm.models.cache import make_prompt_cache

    t0 = time.perf_counter()
    model, args = _build(config, dtype)
    family = getattr(args, "model_type", config.get("model_type"))
    fallback = FORWARD_FALLBACK.get(family)
    if method == "auto":
        method = "update" if fallback else "forward"
    if method == "update" and fallback is None:
        raise OracleError(f"no cache-update rule for {family!r}: use its forward pass")
    cache = make_prompt_cache(model, max_kv_size=max_kv_size)
    calls = _chunks(ctx, gen, prefill_step_size)
    try:
        if method == "forward":
            tokens = mx.zeros((1, max(calls)), dtype=mx.int32)
            for n in calls:
                model(tokens[:, :n], cache=cache)
                maybe_quantize_kv_cache(cache, quantized_kv_start, kv_group_size, kv_bits)
                for c in cache:
                    _detach(c)
        else:
            kv, dk, dv = fallback[1](args)
            act = getattr(mx, dtype)
            for n in calls:
                k = mx.zeros((1, kv, n, dk), dtype=act)
                v = mx.zeros((1, kv, n, dv), dtype=act)
                for c in cache:
                    c.update_and_fetch(k, v)
                maybe_quantize_kv_cache(cache, quantized_kv_start, kv_group_size, kv_bits)
    except Exception as e:  # noqa: BLE001 - any failure of mlx-lm's own code is reported
        raise OracleError(f"mlx-lm {mlx_lm_version()}'s {family} forward pass failed: "
                          f"{type(e).__name__} {_one_line(e)}") from None
    how = "forward" if method == "forward" else f"cache update ({fallback[0]})"
    return OracleRun(mlx_lm_version(), str(family), ctx, prefill_step_size, kv_bits, how,
                     tuple(_entry(c) for c in cache), time.perf_counter() - t0,
                     len(getattr(model, "layers", ()) or ()), hasattr(model, "make_cache"),
                     _recurrences(model))


# --------------------------------------------------------------------------- a plan from it


def _per_token_elems(entry: CacheEntry) -> int:
    """Elements one cached token adds to this entry's growing arrays: the product of every
    axis but the sequence axis (-2), keys and values summed."""
    elems = 0
    for role, shape, _ in entry.arrays:
        if role == "state" or len(shape) < 2:
            continue
        n = 1
        for i, size in enumerate(shape):
            if i != len(shape) - 2:
                n *= size
        elems += n
    return elems


def derive_mixer(run: OracleRun) -> dict[str, Any]:
    """The mixer widths of a shared recurrence the model runs (``run.recurrences``), read from
    its float32 state in mlx-lm's ArraysCache: gated_delta.py holds (B, Hv, Dv, Dk), ssm.py
    (B, heads, head_dim, d_state). The ModelConfig fields the transient terms read, as the
    family table's builders set them; {} when the model runs neither (a recurrence of the
    family's own, RWKV-7's or RG-LRU's, is known only from the table)."""
    states = [shape for e in run.entries if e.state_bytes for role, shape, dtype in e.arrays
              if role == "state" and dtype == "float32" and len(shape) == 4]
    if not states:
        return {}
    _, heads, d1, d2 = max(states, key=lambda sh: sh[1] * sh[2] * sh[3])
    if "gated_delta" in run.recurrences:
        mixer = {"linear_scan": "gated_delta", "linear_v_heads": heads, "linear_v_dim": d1,
                 "linear_k_dim": d2, "linear_state_bytes": 4}
        # The conv state (B, kernel - 1, 2 x Hk x Dk + Hv x Dv) gives the key heads.
        convs = [shape[-1] for e in run.entries if e.state_bytes
                 for role, shape, _ in e.arrays if role == "state" and len(shape) == 3]
        key = (max(convs, default=0) - heads * d1) // 2
        if key > 0 and key % d2 == 0:
            mixer["linear_k_heads"] = key // d2
        return mixer
    if "ssm" in run.recurrences:
        return {"ssm_heads": heads, "ssm_head_dim": d1}
    return {}


def derive_layers(config: dict, act_bytes: int = 2,
                  like: Attn | None = None) -> tuple[list[Layer], OracleRun]:
    """A per-layer plan in mlxfit's terms from mlx-lm's own caches at a short context: each
    growing cache becomes an Attn whose bytes per token match (one "head" of the summed key and
    value widths; the window from the cache's max_size / chunk_size), each ArraysCache its
    constant state bytes; layers without an entry (shared KV) own nothing. Only the bytes are
    derived: the query heads and the width the attention kernel sees are taken from ``like``
    (the config's own attention); ``mlxfit.verbs.plan`` puts the family table's layer where
    its bytes agree, and ``derive_mixer`` gives the recurrence's widths."""
    dtype = "float32" if act_bytes == 4 else "bfloat16"
    run = cache_plan(config, 300, prefill_step_size=DEFAULT_PREFILL_STEP_SIZE, dtype=dtype)
    own = sorted({e.kind for e in run.entries for role, _, _ in e.arrays if role == "arrays"})
    if own:  # deepseek_v41's LayerCache: a window, compressed groups and pending rows
        raise OracleError(f"mlx-lm {run.mlx_lm_version}'s {', '.join(own)} is not a KV or "
                          "state cache a per-token plan can describe")
    layers = []
    for e in run.entries:
        attn = None
        elems = _per_token_elems(e)
        if e.kv_bytes and elems:
            attn = Attn(from_mlx_lm(e.kind, e.window), q_heads=like.q_heads if like else 1,
                        kv_heads=1, k_dim=elems - elems // 2, v_dim=elems // 2,
                        head_dim=like.head_dim if like else elems // 2)
        layers.append(Layer(attn, state_bytes=e.state_bytes,
                            state_kind=DERIVED_STATE if e.state_bytes else None))
    layers += [Layer(None) for _ in range(max(0, run.num_layers - len(layers)))]
    return layers, run
