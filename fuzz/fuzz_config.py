"""atheris fuzz target: config.json reading and parsing, through the memory arithmetic.

    python fuzz/fuzz_config.py [libFuzzer flags] CORPUS_DIR      (see fuzz/README.md)

Pipeline per input: read_config (bytes -> dict) -> parse_config (dict -> ModelConfig) ->
parse_quantization -> estimate.solve.totals_at at a fixed run. Contract: each step returns, or raises an
MlxfitError whose message is one line; a returned ModelConfig has one layer plan per layer
and the byte totals are non-negative integers. Anything else is a finding.

The first input byte picks the mode:
  even  the rest is the config.json file, bytes as-is (mutations of real configs: seeds.py)
  odd   structure-aware: a real config (tests/fixtures/configs) with fields replaced by
        fuzzer-chosen values of every JSON type, at the top level or inside text_config
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["mlxfit"]):
    from mlxfit.calibration.load import load_calibration
    from mlxfit.errors import MlxfitError
    from mlxfit.estimate.memory import Run
    from mlxfit.estimate.solve import totals_at
    from mlxfit.model.families import FAMILIES, FAMILY_ALIASES, MLX_LM_REMAPPING
    from mlxfit.model.parse import parse_config
    from mlxfit.model.weights import parse_quantization
    from mlxfit.sources.folder import read_config

from _common import check_one_line, scratch_dir, seed_configs

_PATH = Path(scratch_dir("config")) / f"{os.getpid()}-config.json"
_SEEDS = seed_configs()
_KEYS = sorted(
    {k for c in _SEEDS for k in c}
    | {k for c in _SEEDS if isinstance(c.get("text_config"), dict) for k in c["text_config"]}
    | {"quantization", "text_config", "model_type", "layer_types", "head_dim"}
)
_STRINGS = sorted(set(FAMILIES) | set(FAMILY_ALIASES) | set(MLX_LM_REMAPPING)) + [
    "full_attention", "sliding_attention", "linear_attention", "mamba", "attention",
    "affine", "mxfp4", "nvfp4", "mxfp8", "M*-E", "",
]
_CAL = load_calibration(None)
_RUN = Run(ctx=4096)


def _value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    kind = fdp.ConsumeIntInRange(0, 11)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeIntInRange(-4, 300)
    if kind == 3:  # up to far beyond any plausible size, both signs
        return fdp.ConsumeIntInRange(-(10**12), 10**12) * 10 ** fdp.ConsumeIntInRange(0, 30)
    if kind == 4:
        return fdp.PickValueInList([math.nan, math.inf, -math.inf, 0.5, 1e300, -0.0, 4096.0])
    if kind == 5:
        return fdp.ConsumeRegularFloat()
    if kind == 6:
        return fdp.PickValueInList(_STRINGS)
    if kind == 7:
        return fdp.ConsumeUnicodeNoSurrogates(8)
    if kind == 8 and depth < 3:
        n = fdp.ConsumeIntInRange(0, 70)
        pool = [fdp.PickValueInList(_STRINGS), fdp.ConsumeIntInRange(-2, 64)]
        return [pool[fdp.ConsumeIntInRange(0, 1)] for _ in range(n)]
    if kind == 9 and depth < 3:
        return {fdp.PickValueInList(_KEYS + _STRINGS): _value(fdp, depth + 1)
                for _ in range(fdp.ConsumeIntInRange(0, 3))}
    if kind == 10 and depth < 3:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return fdp.ConsumeIntInRange(0, 1 << 20)


def _mutated(data: bytes) -> dict:
    fdp = atheris.FuzzedDataProvider(data)
    config = json.loads(json.dumps(fdp.PickValueInList(_SEEDS)))  # a deep copy
    for _ in range(fdp.ConsumeIntInRange(1, 6)):
        target = config
        tc = config.get("text_config")
        if isinstance(tc, dict) and fdp.ConsumeBool():
            target = tc
        key = fdp.PickValueInList(_KEYS)
        if fdp.ConsumeProbability() < 0.1:
            target.pop(key, None)
        else:
            target[key] = _value(fdp)
    return config


def _pipeline(config) -> None:
    cfg = parse_config(config)
    assert len(cfg.layers) == cfg.num_layers >= 1, cfg
    parse_quantization(config)
    t = totals_at(cfg, 0, _RUN, _CAL)
    for v in (t.kv, t.state, t.phase.kv_bytes, t.transient, t.total):
        assert type(v) is int and v >= 0, (v, t)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    try:
        if data[0] % 2 == 0:
            _PATH.write_bytes(data[1:])
            config = read_config(_PATH)
        else:
            config = _mutated(data[1:])
        _pipeline(config)
    except MlxfitError as e:
        check_one_line(str(e))


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
