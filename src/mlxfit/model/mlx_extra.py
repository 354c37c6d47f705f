"""Whether the optional ``measure`` extra (mlx and mlx-lm) can be used here: asked by the
verbs that read mlx-lm's own classes (``--plan``, ``pick``, ``measure``) without loading the
oracle on the plain ``fit`` path."""

from __future__ import annotations

from mlxfit.errors import MlxUnavailable

INSTALL_HINT = ('measuring needs mlx and mlx-lm: pip install "mlxfit[measure]" '
                "(mlx[cpu] on Linux, mlx on Apple Silicon)")


def mlx_missing_reason() -> str | None:
    """None when mlx and mlx-lm import, else why not (one line)."""
    try:
        # mlx / mlx-lm are optional (the measure extra): imported to measure only
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: a wheel whose shared library cannot load
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def require_mlx() -> None:
    reason = mlx_missing_reason()
    if reason is not None:
        raise MlxUnavailable(f"{INSTALL_HINT} [{reason}]")
