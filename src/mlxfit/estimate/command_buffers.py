"""Memory MLX's Metal scheduler holds back during a prefill chunk: inputs of ops whose command
buffer has not completed yet.

Facts from MLX's source (ml-explore/mlx, unchanged from v0.25 to v0.32.x):
- ``mlx/backend/metal/eval.cpp``: every op's input buffers are kept alive until the command
  buffer that encodes it completes (a completion handler holds them).
- ``mlx/backend/metal/device.cpp``: the open command buffer is committed once it holds more than
  ``max_ops_per_buffer`` dispatches or more than ``max_mb_per_buffer`` MiB of distinct input
  buffers (``buffer_sizes_ >> 20``, weights and caches included). The limits are set from the last
  letter of the GPU architecture name (``applegpu_g16s``...): 'p' 20/40, 'g' 40/40, 's' 50/50,
  'd' 50/50, anything else 40/40; ``MLX_MAX_OPS_PER_BUFFER`` / ``MLX_MAX_MB_PER_BUFFER`` override.
- ``mlx/transforms.cpp``: evaluation waits for one command buffer once more than
  ``MAX_ACTIVE_TASKS = 10`` are in flight, so at most 11 committed buffers are pending.

How many of those are still pending when the GPU drains them depends on the chip (how fast the
GPU finishes a buffer against how fast the CPU encodes the next): the ``cb_inflight_*``
constants of calibration.toml, fitted per chip class.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

from mlxfit.errors import UsageError
from mlxfit.model.config import ModelConfig

# mlx/transforms.cpp: the evaluation loop waits once more than this many buffers are active.
MAX_ACTIVE_TASKS = 10
MIB = 1 << 20

# (max_ops_per_buffer, max_mb_per_buffer) by the architecture name's last letter
# (mlx/backend/metal/device.cpp, Device::Device; any other letter takes the default).
COMMIT_RULES: dict[str, tuple[int, int]] = {"p": (20, 40), "g": (40, 40), "s": (50, 50),
                                            "d": (50, 50)}
DEFAULT_RULE = (40, 40)
# The rule of every GPU the calibration's floor was fitted on (Pro/Max 's', Ultra 'd').
FITTED_RULE = (50, 50)
ENV_OPS, ENV_MB = "MLX_MAX_OPS_PER_BUFFER", "MLX_MAX_MB_PER_BUFFER"


def parse_mlx_env(items: list[str] | tuple[str, ...] | dict[str, int] | None
                  ) -> tuple[tuple[str, int], ...]:
    """``MLX_MAX_MB_PER_BUFFER=100``-style settings (or a dict of them) checked: only MLX's two
    scheduler variables, positive whole numbers. UsageError(param="mlx_env") otherwise."""
    if not items:
        return ()
    pairs = list(items.items()) if isinstance(items, dict) else []
    if not isinstance(items, dict):
        for item in items:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise UsageError(f"mlx_env: {item!r} is not NAME=VALUE", param="mlx_env")
            pairs.append((key.strip(), value.strip()))
    out: dict[str, int] = {}
    for key, value in pairs:
        if key not in (ENV_OPS, ENV_MB):
            raise UsageError(f"mlx_env: {key!r} is not one of {ENV_OPS}, {ENV_MB}",
                             param="mlx_env")
        try:
            n = int(value)
        except (TypeError, ValueError):
            n = 0
        if n < 1 or isinstance(value, bool):
            raise UsageError(f"mlx_env: {key} must be a positive whole number, got {value!r}",
                             param="mlx_env")
        out[key] = n
    return tuple(sorted(out.items()))


# M5 GPUs (architecture generation 17, mlxfit.estimate.kernels.arch_gen) drain as a class of
# their own; every published M5 run is on an M5 Max.
M5_GEN = 17


def drain_class(gpu_class: str, gpu_gen: int = 0, gpu_tier: str = "") -> str:
    """Which fitted drain the Metal transient takes (issue 18): 'm5', 'big' (Max and Ultra GPUs)
    or 'small' (base and Pro). Unknown tiers follow the GPU class: 'g' (base) is small, 's' and
    'd' take the class every constant was first fitted on (Max/Ultra)."""
    if gpu_gen >= M5_GEN:
        return "m5"
    if gpu_tier in ("big", "small"):
        return gpu_tier
    return "small" if gpu_class == "g" else "big"


def commit_rule(gpu_class: str, env: dict[str, int] | None = None) -> tuple[int, int]:
    """(max ops, max MiB) per command buffer for a GPU class letter, with MLX's overrides."""
    ops, mb = COMMIT_RULES.get(gpu_class, DEFAULT_RULE)
    env = env or {}
    return int(env.get(ENV_OPS, ops)), int(env.get(ENV_MB, mb))


@dataclass(frozen=True)
class Op:
    """One dispatch group of a layer's forward pass, as the commit rule counts it."""

    name: str
    dispatches: int
    held: int  # temporaries among its inputs (activations): freed when its buffer completes
    counted: int  # further distinct input bytes the MB rule counts (weights, cache slices)


def _bytes_per_param(cfg: ModelConfig, weights_bytes: int, layer_params: int) -> float:
    emb = cfg.vocab * cfg.hidden * (1 if cfg.tie_embeddings else 2)
    return weights_bytes / max(layer_params + emb, 1)


def layer_ops(cfg: ModelConfig, li: int, c: int, keys: int, bpp: float) -> list[Op]:
    """The ops of layer ``li`` for a chunk of ``c`` tokens against ``keys`` cached keys, with
    their input sizes from the model's widths (activation dtype ``cfg.act_bytes``)."""
    ly, b, h = cfg.layers[li], cfg.act_bytes, cfg.hidden
    x = c * h * b
    ops = [Op("norm", 1, x, 0)]
    a = ly.attn
    if a is not None:
        q = (a.mla.heads * (a.mla.qk_nope + a.mla.qk_rope) if a.mla
             else a.q_heads * a.head_dim * (2 if cfg.gated_q else 1))
        kvw = a.kv_heads * (a.k_dim + a.v_dim)
        o_in = (a.mla.heads * a.mla.v_head if a.mla else a.q_heads * a.head_dim)
        cache = keys * kvw * b
        ops += [Op("q_proj", 1, 0, int(q * h * bpp) + x), Op("kv_proj", 2, 0, int(kvw * h * bpp)),
                Op("rope", 2, c * (q + kvw // 2) * b, 0),
                Op("cache_update", 2, c * kvw * b, cache),
                Op("sdpa", 1, c * q * b, 0), Op("o_proj", 1, c * o_in * b, int(o_in * h * bpp))]
    else:
        # Linear-attention / SSM mixer: projections in and out around a fused scan kernel.
        w = max(cfg.linear_v_heads * cfg.linear_v_dim, cfg.ssm_heads * cfg.ssm_head_dim, h)
        ops += [Op("in_proj", 2, 0, int(3 * w * h * bpp) + x), Op("conv", 2, c * 2 * w * b, 0),
                Op("scan", 2, c * 2 * w * b, 0), Op("out_proj", 1, c * w * b, int(w * h * bpp))]
    ops += [Op("residual", 1, x, 0), Op("norm", 1, x, 0)]
    if ly.moe:
        k, mi, e = cfg.top_k, cfg.moe_intermediate, cfg.num_experts
        ops += [Op("router", 4, 0, int(e * h * bpp) + x),
                Op("experts_gate_up", 2, 0, int(2 * e * mi * h * bpp)),
                Op("experts_act", 1, 2 * c * k * mi * b, 0),
                Op("experts_down", 1, c * k * mi * b, int(e * mi * h * bpp)),
                Op("experts_sum", 1, c * k * h * b, 0)]
        if cfg.shared_intermediate:
            f = cfg.shared_intermediate
            ops += [Op("shared_gate_up", 2, 0, int(2 * f * h * bpp)),
                    Op("shared_act", 1, 2 * c * f * b, 0),
                    Op("shared_down", 1, c * f * b, int(f * h * bpp))]
    elif cfg.intermediate:
        f = cfg.intermediate
        ops += [Op("gate_up", 2, 0, int(2 * f * h * bpp) + x), Op("act", 1, 2 * c * f * b, 0),
                Op("down", 1, c * f * b, int(f * h * bpp))]
    ops.append(Op("residual", 1, x, 0))
    return ops


def _layer_params(cfg: ModelConfig) -> int:
    ops = (layer_ops(cfg, i, 0, 0, 1.0) for i in range(len(cfg.layers)))
    # With c = 0 and one byte per parameter, the counted bytes are the parameter counts.
    return sum(o.counted for layer in ops for o in layer)


@lru_cache(maxsize=4096)
def buffer_sizes(cfg: ModelConfig, weights_bytes: int, c: int, keys: int, max_ops: int,
                 max_mb: int) -> tuple[int, ...]:
    """Held bytes of each command buffer one chunk's forward pass commits, in order."""
    bpp = _bytes_per_param(cfg, weights_bytes, _layer_params(cfg))
    out: list[int] = []
    ops = held = counted = 0
    for li in range(len(cfg.layers) - 1):  # the last layer feeds no cache: never computed
        for op in layer_ops(cfg, li, c, keys, bpp):
            ops += op.dispatches
            held += op.held
            counted += op.held + op.counted
            if ops > max_ops or counted // MIB > max_mb:
                out.append(held)
                ops = held = counted = 0
    if held:
        out.append(held)
    return tuple(out)


# Cached like buffer_sizes, whose tuples it takes: matrix asks the same pass for every base
# chip SKU and phase.
@lru_cache(maxsize=4096)
def held_bytes(sizes: tuple[int, ...], inflight: float) -> int:
    """The most bytes pending at once: the open buffer plus ``inflight`` committed ones (a
    fraction weighs the oldest), maximized over the pass."""
    if not sizes:
        return 0
    n = min(max(inflight, 0.0), MAX_ACTIVE_TASKS + 1.0)
    whole, frac = int(n), n - int(n)
    prefix = [0, *accumulate(sizes)]  # window sums in O(1): matrix sizes ~90 SKUs x phases
    best = 0.0
    for j in range(len(sizes)):
        v = float(prefix[j + 1] - prefix[max(j - whole, 0)])
        if frac and j - whole - 1 >= 0:
            v += frac * sizes[j - whole - 1]
        best = max(best, v)
    return int(best)
