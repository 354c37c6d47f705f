"""Which Metal attention kernel each attention layer takes, by MLX version and GPU.

Facts from MLX's ``mlx/backend/metal/scaled_dot_product_attention.cpp`` (``use_fallback``):
- prefill (more than 8 queries): fused for head dims 64/80/128 up to 0.32.0, 64/72/80/96/128 from
  0.32.1 (query and value head dims equal). 192 and 256 take the unfused path (scores
  materialized); from 0.32.2 the fused kernel exists for them but MLX routes them unfused on
  purpose, except causal head-dim-256 prefill of at least 1024 queries on a GPU with neural
  accelerators (``is_nax_available``: architecture generation 17+, i.e. M5, and macOS 26.2+).
- decode (8 queries or fewer): fused for the backend's ``fused_decode_head_dims``
  (calibration.toml: 64/96/128/256 on Metal, the same list the decode-speed model reads), and
  query 192 with value 128 from 0.32.0; unfused when queries x GQA factor exceeds 32 (the vector kernel's limit, from 0.30.4) or for
  192/192.
``prefill_fused`` is the one decision the memory model (score arrays materialized or not) and
the prefill compute model (fused vs unfused attention FLOPs and score traffic) both take, at the
run's MLX (default ``REFERENCE_MLX``); the NAX exception is named in the note but not taken by
the estimate (``NAX_IN_ESTIMATE``).
mlxfit tracks only the macOS major: macOS 26 counts as 26.2+ (26.2 is the current release and
what a Mac on 26 runs once updated); an unknown macOS (0) or 14/15 never has NAX.
"""

from __future__ import annotations

from mlxfit.model.config import Attn, ModelConfig

NAX_MIN_GEN = 17
NAX_MIN_QUERIES = 1024
VECTOR_MAX_QUERIES_X_GQA = 32
NAX_MIN_MACOS = 26  # stands for 26.2: mlxfit knows the major only (module docstring)
REFERENCE_MLX = "0.32.4"  # the MLX the predictions are for
# Whether the estimate takes M5's NAX head-dim-256 path (no score matrix). Off: applied, it made
# the published M5 Max rows worse (three 2K-prompt Qwen3.6-27B / Qwen3-Coder-Next rows of
# unknown MLX by 0.3-0.9 points, and the Qwen3.8-27B 128K step-2048 run, which holds one score
# array per the 2048 -> 256 step sweep, from +0.4 % to -32.7 %), and every published M5 run
# with a known MLX is on 0.32.0, before the kernel: no run confirms it. Reported as a note.
NAX_IN_ESTIMATE = False


def _version_key(version: str) -> int:
    parts = [int(p) for p in version.split(".")[:3] if p.isdigit()] + [0, 0, 0]
    return parts[0] * 1_000_000 + parts[1] * 1000 + parts[2]


def prefill_fused_dims(mlx_version: str) -> tuple[int, ...]:
    return (64, 72, 80, 96, 128) if _version_key(mlx_version) >= 32001 else (64, 80, 128)


def arch_gen(gpu_arch: str | None) -> int:
    """The architecture generation MLX reads from the name (applegpu_g16s -> 16); 0 unknown."""
    if not gpu_arch or len(gpu_arch) < 3 or not gpu_arch[-3:-1].isdigit():
        return 0
    return int(gpu_arch[-3:-1])


def nax_available(gpu_gen: int, macos_major: int, mlx_version: str = REFERENCE_MLX) -> bool:
    """MLX's ``is_nax_available``: architecture generation 17+ (M5) on macOS 26.2+."""
    return (gpu_gen >= NAX_MIN_GEN and macos_major >= NAX_MIN_MACOS
            and _version_key(mlx_version) >= 32002)


def prefill_path(a: Attn, queries: int, gpu_gen: int, macos_major: int,
                 mlx_version: str = REFERENCE_MLX) -> str:
    """The Metal SDPA path of a prefill chunk of ``queries`` tokens of this layer, in words."""
    if a.mla is not None:
        return "unfused (MLA: pe_scores materialized)"
    if (a.head_dim == 256 and queries >= NAX_MIN_QUERIES and a.cache.causal_mask(queries)
            and nax_available(gpu_gen, macos_major, mlx_version)):
        return "fused (NAX head-dim-256 kernel)"
    return "fused" if a.head_dim in prefill_fused_dims(mlx_version) else "unfused"


def prefill_fused(a: Attn, cfg: ModelConfig, queries: int, quantized: bool, *, backend: str,
                  gpu_gen: int, macos_major: int, mlx_version: str = REFERENCE_MLX) -> bool:
    """Whether a prefill chunk of ``queries`` tokens runs this layer's attention fused (no score
    matrix materialized): the one rule memory.attn_unfused and compute.chunk_flops share.
    Never on the CPU backend, nor for mlx-lm's quantized SDPA or hand-written softcapped
    attention (Gemma 2), which are separate ops."""
    if backend != "metal" or quantized or cfg.scores_always:
        return False
    path = prefill_path(a, queries, gpu_gen, macos_major, mlx_version)
    return path == "fused" or (NAX_IN_ESTIMATE and path.startswith("fused"))


def decode_path(a: Attn, mlx_version: str, fused_dims: tuple[int, ...],
                queries: int = 1) -> str:
    """``fused_dims``: the backend's ``fused_decode_head_dims`` (estimate.speed reads the same)."""
    if a.mla is not None:
        return "unfused (MLA)"
    gqa = a.q_heads // max(a.kv_heads, 1)
    if a.head_dim not in fused_dims:
        return "unfused"
    if queries * gqa > VECTOR_MAX_QUERIES_X_GQA and _version_key(mlx_version) >= 30004:
        return f"unfused (queries x GQA {queries * gqa} > {VECTOR_MAX_QUERIES_X_GQA})"
    return "fused"


def kernel_note(cfg: ModelConfig, chunk: int, gpu_arch: str | None, machine: str,
                macos_major: int, decode_fused_dims: tuple[int, ...],
                mlx_version: str = REFERENCE_MLX) -> str:
    """One line: the attention kernel each distinct attention layout takes on this Mac."""
    counts: dict[str, int] = {}  # layouts that differ only in their caches read alike
    for a, n in cfg.attn_groups:
        what = "MLA" if a.mla else f"head dim {a.head_dim}"
        path = prefill_path(a, chunk, arch_gen(gpu_arch), macos_major, mlx_version)
        if "NAX" in path and not NAX_IN_ESTIMATE:
            path += ", but the estimate keeps the score matrix (no published M5 run confirms it)"
        text = f"{what}: prefill {path}, decode {decode_path(a, mlx_version, decode_fused_dims)}"
        counts[text] = counts.get(text, 0) + n
    if not counts:
        return ""
    return (f"attention kernels on {machine} (MLX {mlx_version}, {chunk}-token chunks): "
            + "; ".join(f"{n} x {text}" for text, n in counts.items()))
