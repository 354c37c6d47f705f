"""Which Metal attention kernel each attention layer takes, by MLX version and GPU.

Facts from MLX's ``mlx/backend/metal/scaled_dot_product_attention.cpp`` (``use_fallback``):
- prefill (more than 8 queries): fused for head dims 64/80/128 up to 0.32.0, 64/72/80/96/128 from
  0.32.1 (query and value head dims equal). 192 and 256 take the unfused path (scores
  materialized); from 0.32.2 the fused kernel exists for them but MLX routes them unfused on
  purpose, except causal head-dim-256 prefill of at least 1024 queries on a GPU with neural
  accelerators (``is_nax_available``: architecture generation 17+, i.e. M5, and macOS 26.2+).
- decode (8 queries or fewer): fused for 64/96/128/256, and query 192 with value 128 from 0.32.0;
  unfused when queries x GQA factor exceeds 32 (the vector kernel's limit, from 0.30.4) or for
  192/192.
mlxfit's prediction uses the calibration's fused head dims (MLX 0.32.1+, no NAX exception: on
M5 the head-dim-256 prefill estimate keeps the score matrix, an over-estimate there).
"""

from __future__ import annotations

from mlxfit.model.config import Attn, ModelConfig

DECODE_FUSED = (64, 96, 128, 256)
NAX_MIN_GEN = 17
NAX_MIN_QUERIES = 1024
VECTOR_MAX_QUERIES_X_GQA = 32


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


def prefill_path(a: Attn, queries: int, gpu_arch: str | None, mlx_version: str,
                 macos: tuple[int, int] = (26, 2)) -> str:
    """'fused' or 'unfused' for a prefill chunk of ``queries`` tokens of this layer."""
    if a.mla is not None:
        return "unfused (MLA: pe_scores materialized)"
    nax = (arch_gen(gpu_arch) >= NAX_MIN_GEN and macos >= (26, 2)
           and _version_key(mlx_version) >= 32002)
    if nax and a.head_dim == 256 and queries >= NAX_MIN_QUERIES:
        return "fused (NAX head-dim-256 kernel)"
    return "fused" if a.head_dim in prefill_fused_dims(mlx_version) else "unfused"


def decode_path(a: Attn, mlx_version: str, queries: int = 1) -> str:
    if a.mla is not None:
        return "unfused (MLA)"
    gqa = a.q_heads // max(a.kv_heads, 1)
    if a.head_dim not in DECODE_FUSED:
        return "unfused"
    if queries * gqa > VECTOR_MAX_QUERIES_X_GQA and _version_key(mlx_version) >= 30004:
        return f"unfused (queries x GQA {queries * gqa} > {VECTOR_MAX_QUERIES_X_GQA})"
    return "fused"


def kernel_note(cfg: ModelConfig, chunk: int, gpu_arch: str | None, machine: str,
                mlx_version: str = "0.32.4") -> str:
    """One line: the attention kernel each distinct attention layout takes on this Mac."""
    parts = []
    for a, n in cfg.attn_groups:
        what = "MLA" if a.mla else f"head dim {a.head_dim}"
        parts.append(f"{n} x {what}: prefill {prefill_path(a, chunk, gpu_arch, mlx_version)}, "
                     f"decode {decode_path(a, mlx_version)}")
    if not parts:
        return ""
    return (f"attention kernels on {machine} (MLX {mlx_version}, {chunk}-token chunks): "
            + "; ".join(parts))
