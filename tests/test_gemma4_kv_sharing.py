"""gemma4's KV-shared layers read the last earlier layer of their type; a config where one has
none (or shares at or past its depth) is one that mlx-lm cannot build, and mlxfit refuses it
in one line. Each case is checked against mlx-lm building the model (nothing evaluated)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxfit.errors import ConfigError
from mlxfit.model.oracle import OracleError, build_model
from mlxfit.model.parse import parse_config

BASE = json.loads((Path(__file__).parent / "fixtures" / "families" / "gemma4_text.json")
                  .read_text())
S, F = "sliding_attention", "full_attention"
CASES = {
    "fixture": {},
    "all shared": {"num_kv_shared_layers": 10},
    "past the depth": {"num_kv_shared_layers": 12},
    "no earlier full layer": {"layer_types": [S] * 8 + [F, S], "num_kv_shared_layers": 2},
    "full layer shared after one": {"layer_types": [F] + [S] * 7 + [F, S],
                                    "num_kv_shared_layers": 2},
    "nothing shared": {"layer_types": [S] * 10, "num_kv_shared_layers": 0},
}


@pytest.mark.parametrize("name", CASES)
def test_refused_exactly_when_mlx_lm_cannot_build_it(name):
    pytest.importorskip("mlx_lm")
    config = {**BASE, **CASES[name]}
    try:
        build_model(config)
        builds = True
    except OracleError:
        builds = False
    if builds:
        assert parse_config(config, where="config.json").layers
    else:
        with pytest.raises(ConfigError, match="num_kv_shared_layers"):
            parse_config(config, where="config.json")
