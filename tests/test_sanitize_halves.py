"""One rule for the shape of ``mx.split(v, 2, axis)`` in every sanitize replay
(``sanitize_ops.halves``): the halves where the axis exists and divides by two, one ConfigError
naming the tensor where mx.split raises."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_ops import halves


@pytest.mark.parametrize(("shape", "axis"), [((6, 4, 2), 0), ((6, 4, 2), 1), ((6, 4, 2), -1),
                                             ((6, 4, 2), -2), ((8,), 0)])
def test_halves_is_mx_split_in_two(shape, axis):
    a, b = mx.split(mx.zeros(shape), 2, axis=axis)
    assert halves("w", shape, axis) == tuple(a.shape) == tuple(b.shape)


@pytest.mark.parametrize(("shape", "axis"), [((5, 4), 0), ((6, 3), 1), ((4,), 1), ((), 0),
                                             ((4,), -2)])
def test_halves_refuses_what_mx_split_refuses(shape, axis):
    with pytest.raises((ValueError, IndexError)):  # no such axis: IndexError
        mx.split(mx.zeros(shape), 2, axis=axis)
    with pytest.raises(ConfigError, match=r"^layers\.0\.w: shape .* does not split in two"):
        halves("layers.0.w", shape, axis)
