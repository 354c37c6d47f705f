"""mlxfit: will this model run on this Mac with MLX, at what context, how fast?"""

__version__ = "0.1.0"
