"""kimi_k3's TextArgs leave the MLA widths and the expert width at None, and the layers that
need them read them while mlx-lm builds the model: a config without one is refused in one
line naming the field exactly when mlx-lm cannot build it (checked against mlx-lm's build,
nothing evaluated), and sized when it can (every layer linear, no expert layer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxfit.errors import ConfigError
from mlxfit.model.oracle import OracleError, build_model
from mlxfit.model.parse import parse_config

BASE = json.loads((Path(__file__).parent / "fixtures" / "families" / "kimi_k3.json").read_text())
MLA = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _without(field: str, **text) -> dict:
    tc = {k: v for k, v in BASE["text_config"].items() if k != field}
    return {**BASE, "text_config": {**tc, **text}}


def _all_linear() -> dict:
    n = BASE["text_config"]["num_hidden_layers"]
    lac = dict(BASE["text_config"]["linear_attn_config"], kda_layers=list(range(1, n + 1)))
    return {"linear_attn_config": lac}


CASES = {f"no {k}": _without(k) for k in (*MLA, "moe_intermediate_size")}
CASES |= {f"no {k}, every layer linear": _without(k, **_all_linear()) for k in MLA}
CASES["no moe_intermediate_size, no experts"] = _without("moe_intermediate_size",
                                                         num_experts=None)


@pytest.mark.parametrize("name", CASES)
def test_refused_exactly_when_mlx_lm_cannot_build_it(name):
    pytest.importorskip("mlx_lm")
    config = CASES[name]
    try:
        build_model(config)
        builds = True
    except (OracleError, ConfigError):
        builds = False
    if builds:
        assert parse_config(config, where="config.json").layers
    else:
        with pytest.raises(ConfigError, match=name.split()[1].rstrip(",")):
            parse_config(config, where="config.json")
