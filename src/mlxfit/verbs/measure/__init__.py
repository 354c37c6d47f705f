"""`mlxfit measure`: run mlx-lm for real (the `measure` extra) beside the prediction."""
