"""mlx-lm 0.32.2's own defaults for the flags mlxfit sizes a run with, named once. The CLI's
flags, every twin's signature, ``estimate.memory.Run`` and ``run_from`` take their defaults
from here. A bottom-layer module: it imports nothing from mlxfit."""

from __future__ import annotations

# mlx_lm/generate.py: DEFAULT_PREFILL_STEP_SIZE = 2048 (mlx_lm.generate --prefill-step-size);
# mlx_lm/server.py's --prefill-step-size defaults to 2048 too.
DEFAULT_PREFILL_STEP_SIZE = 2048

# mlx_lm/generate.py: DEFAULT_QUANTIZED_KV_START = 5000 (--quantized-kv-start of
# mlx_lm.generate and mlx_lm.server, and generate_step's quantized_kv_start).
DEFAULT_QUANTIZED_KV_START = 5000

# mlx_lm/generate.py: --kv-group-size default=64 and generate_step(kv_group_size=64);
# mlx_lm/server.py's --kv-group-size defaults to 64 too.
DEFAULT_KV_GROUP_SIZE = 64
