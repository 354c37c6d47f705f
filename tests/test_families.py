"""The family tables: mlx-lm's MODEL_REMAPPING (a copy, checked against mlx-lm), mlxfit's own
FAMILY_ALIASES kept apart from it, and the family facts that live in the Family rows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mlxfit.errors import ConfigError
from mlxfit.model.families import (
    FAMILIES,
    FAMILY_ALIASES,
    MLX_LM_REMAPPING,
    mlx_lm_module,
    resolve_family,
)
from mlxfit.model.parse import parse_config

CONFIGS = Path(__file__).parent / "fixtures" / "configs"

# The family each model_type resolved to before the tables were split (config.REMAP, which
# mixed mlx-lm's remapping with mlxfit's aliases, then FAMILIES); None: no row, sized as a
# plain transformer. Keys: every model_type of the fixtures, every old REMAP key, every key of
# mlx-lm 0.32.2's MODEL_REMAPPING. Issue 12 gave llava, minimax_m2, phi-msft and qwen2_5_vl
# the rows of the modules mlx-lm loads for them (deepseek_v41_text: deepseek_v41, its row
# added later), and added two aliases.
BEFORE = {
    "deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v3", "deepseek_v41_text": "deepseek_v41",
    "falcon_mamba": "mamba", "gemma2": "gemma2", "gemma3": "gemma3", "gemma3_text": "gemma3",
    "gemma4": "gemma4", "gemma4_text": "gemma4", "gemma4_unified": "gemma4",
    "gpt_oss": "gpt_oss", "iquestcoder": "llama", "joyai_llm_flash": "deepseek_v3",
    "kimi_k2": "deepseek_v3", "lfm2": "lfm2", "lfm2_moe": "lfm2", "llama": "llama",
    "llama4": "llama4", "llama4_text": "llama4_text", "llava": "mistral3", "minimax_m2": "minimax",
    "mistral": "llama", "mixtral": "mixtral", "nemotron_h": "nemotron_h", "phi-msft": "phixtral",
    "phi3": "phi3", "qwen2": "qwen2", "qwen2_5_vl": "qwen2_vl", "qwen3": "qwen3",
    "qwen3_5": "qwen3_5", "qwen3_5_moe": "qwen3_5", "qwen3_5_moe_text": "qwen3_5",
    "qwen3_5_text": "qwen3_5", "qwen3_moe": "qwen3_moe", "qwen3_next": "qwen3_next",
    "xverse": "llama", "lfm2-vl": "lfm2", "prism_hadamard_qwen35": "qwen3_5",
}

# parse_config of every fixture before the split: (model_type, family, the mlx-lm module the
# cluster planner names, gated_q, num_layers).
FIXTURES_BEFORE = {
    "Creekside__gemma-3-4b-text__variant.json": ("gemma3_text", "gemma3", "gemma3_text", False, 34),
    "LiquidAI__LFM2.5-1.2B-Instruct-mlx-4bit.json": ("lfm2", "lfm2", "lfm2", False, 16),
    "Qwen__Qwen2.5-72B-Instruct.json": ("qwen2", "qwen2", "qwen2", False, 80),
    "Qwen__Qwen2.5-7B-Instruct.json": ("qwen2", "qwen2", "qwen2", False, 28),
    "Qwen__Qwen2.5-7B.json": ("qwen2", "qwen2", "qwen2", False, 28),
    "Qwen__Qwen3-0.6B.json": ("qwen3", "qwen3", "qwen3", False, 28),
    "Qwen__Qwen3-235B-A22B.json": ("qwen3_moe", "qwen3_moe", "qwen3_moe", False, 94),
    "Qwen__Qwen3-30B-A3B.json": ("qwen3_moe", "qwen3_moe", "qwen3_moe", False, 48),
    "Qwen__Qwen3-32B.json": ("qwen3", "qwen3", "qwen3", False, 64),
    "Qwen__Qwen3-4B__variant.json": ("qwen3", "qwen3", "qwen3", False, 36),
    "Qwen__Qwen3-8B.json": ("qwen3", "qwen3", "qwen3", False, 36),
    "Qwen__Qwen3-Next-80B-A3B-Thinking.json": ("qwen3_next", "qwen3_next", "qwen3_next", True, 48),
    "deepseek-ai__DeepSeek-V2-Lite.json": ("deepseek_v2", "deepseek_v2", "deepseek_v2", False, 27),
    "deepseek-ai__DeepSeek-V3.json": ("deepseek_v3", "deepseek_v3", "deepseek_v3", False, 61),
    "georgehenney__Qwen3-8B-heretic-mlx-4bit.json": ("qwen3", "qwen3", "qwen3", False, 36),
    "google__gemma-2-9b-it.json": ("gemma2", "gemma2", "gemma2", False, 42),
    "google__gemma-4-26B-A4B.json": ("gemma4", "gemma4", "gemma4", False, 30),
    "google__medgemma-27b-it.json": ("gemma3", "gemma3", "gemma3", False, 62),
    "meta-llama__Llama-3.2-1B-Instruct__variant.json": ("llama", "llama", "llama", False, 16),
    "meta-llama__Llama-3.2-3B.json": ("llama", "llama", "llama", False, 28),
    "meta-llama__Llama-4-Scout-17B-16E-Instruct.json": ("llama4", "llama4", "llama4", False, 48),
    "meta-llama__Llama-4-Scout-17B-16E-Instruct__variant.json":
        ("llama4", "llama4", "llama4", False, 48),
    "meta-llama__Meta-Llama-3.1-70B.json": ("llama", "llama", "llama", False, 80),
    "meta-llama__Meta-Llama-3.1-8B.json": ("llama", "llama", "llama", False, 32),
    "microsoft__Phi-3-mini-4k-instruct.json": ("phi3", "phi3", "phi3", False, 32),
    "mistralai__Mistral-7B-v0.1.json": ("mistral", "llama", "llama", False, 32),
    "mistralai__Mixtral-8x7B-v0.1.json": ("mixtral", "mixtral", "mixtral", False, 32),
    "mlx-community__Qwen3.5-9B-MLX-8bit.json": ("qwen3_5", "qwen3_5", "qwen3_5", True, 32),
    "moonshotai__Kimi-K2-Instruct.json": ("kimi_k2", "deepseek_v3", "deepseek_v3", False, 61),
    "nvidia__Nemotron-H-56B-Base-8K.json": ("nemotron_h", "nemotron_h", "nemotron_h", False, 118),
    "openai__gpt-oss-120b.json": ("gpt_oss", "gpt_oss", "gpt_oss", False, 36),
    "openai__gpt-oss-20b.json": ("gpt_oss", "gpt_oss", "gpt_oss", False, 24),
    "unsloth__Mistral-Small-24B-Instruct-2501__variant.json":
        ("mistral", "llama", "llama", False, 40),
}


def _fixture_types() -> set[str]:
    out = set()
    for p in CONFIGS.glob("*.json"):
        d = json.loads(p.read_text())
        out |= {t for t in (d.get("model_type"), (d.get("text_config") or {}).get("model_type"))
                if t}
    return out


def test_every_model_type_resolves_as_before() -> None:
    keys = _fixture_types() | set(FAMILY_ALIASES) | set(MLX_LM_REMAPPING)
    assert keys == set(BEFORE), "a model_type without a recorded resolution"
    after = {t: (name if row is not None else None)
             for t in sorted(keys) for name, row in [resolve_family(t)]}
    assert after == BEFORE
    for t in keys:  # an unknown type keeps its own name (the warning names it)
        name, row = resolve_family(t)
        assert (row is None) == (name == t and t not in FAMILIES)


def test_every_fixture_parses_as_before() -> None:
    assert {p.name for p in CONFIGS.glob("*.json")} == set(FIXTURES_BEFORE)
    for name, want in FIXTURES_BEFORE.items():
        cfg = parse_config(json.loads((CONFIGS / name).read_text()), where=name)
        got = (cfg.model_type, cfg.family, mlx_lm_module(cfg.model_type), cfg.gated_q,
               cfg.num_layers)
        assert got == want, name


def test_aliases_are_mlxfits_own_and_apart_from_mlx_lm() -> None:
    assert not set(FAMILY_ALIASES) & set(MLX_LM_REMAPPING)
    assert set(FAMILY_ALIASES.values()) <= set(FAMILIES)
    assert "gemma3_text" not in MLX_LM_REMAPPING and FAMILY_ALIASES["gemma3_text"] == "gemma3"
    # the cluster planner names the module mlx-lm imports, not mlxfit's alias
    assert mlx_lm_module("gemma3_text") == "gemma3_text"
    assert mlx_lm_module("kimi_k2") == "deepseek_v3"


def test_remapping_is_mlx_lms() -> None:
    utils = pytest.importorskip(
        "mlx_lm.utils", reason="mlx-lm is not installed (pip install -e '.[measure]')")
    assert MLX_LM_REMAPPING == utils.MODEL_REMAPPING
    assert not set(FAMILY_ALIASES) & set(utils.MODEL_REMAPPING)
    # mlx-lm loads the aliases with modules of their own, but for two text_config types
    without = {a for a in FAMILY_ALIASES if importlib.util.find_spec(f"mlx_lm.models.{a}") is None}
    assert without == {"qwen3_5_text", "qwen3_5_moe_text"}


def test_gated_q_is_a_family_fact() -> None:
    assert {n for n, f in FAMILIES.items() if f.gated_q} == {"qwen3_next", "qwen3_5"}
    base = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "vocab_size": 100}
    assert parse_config({**base, "model_type": "qwen3_5_moe"}).gated_q  # by its alias
    # the fields mlx-lm's qwen3 ModelArgs requires (without them the config is refused)
    qwen3 = {**base, "model_type": "qwen3", "intermediate_size": 128, "rms_norm_eps": 1e-6,
             "num_key_value_heads": 2, "max_position_embeddings": 4096, "head_dim": 16,
             "tie_word_embeddings": True, "rope_theta": 1e6}
    assert not parse_config(qwen3).gated_q
    assert parse_config({**qwen3, "attn_output_gate": True}).gated_q


def test_depth_from_pattern_is_a_family_fact() -> None:
    assert {n for n, f in FAMILIES.items() if f.depth_from_pattern} == {"nemotron_h"}
    cfg = {"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4,
           "mamba_num_heads": 2, "mamba_head_dim": 8, "ssm_state_size": 4,
           "hybrid_override_pattern": "M*M-E",
           # the rest of what mlx-lm's nemotron_h ModelArgs requires
           "vocab_size": 100, "intermediate_size": 128, "max_position_embeddings": 4096,
           "num_key_value_heads": 2, "attention_bias": False, "mamba_proj_bias": False,
           "conv_kernel": 4, "n_groups": 1, "mlp_bias": False, "layer_norm_epsilon": 1e-5,
           "use_bias": False, "use_conv_bias": True}
    assert parse_config(cfg).num_layers == 5
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        parse_config({**cfg, "model_type": "qwen3"})


def test_required_fields_are_mlx_lms() -> None:
    """model/mlx_lm_fields.py's copy: each module's ModelArgs fields without a default (modules
    with their own from_dict left out), for every family row and mlxfit alias with a module."""
    import dataclasses
    import importlib

    pytest.importorskip("mlx_lm.utils", reason="mlx-lm is not installed (pip install -e '.[measure]')")
    from mlx_lm.models.base import BaseModelArgs

    from mlxfit.model.mlx_lm_fields import REQUIRED_FIELDS
    from mlxfit.model.oracle import import_model_module

    modules = set(FAMILIES) | {a for a in FAMILY_ALIASES
                               if importlib.util.find_spec(f"mlx_lm.models.{a}") is not None}
    want = {}
    for name in modules:
        # olmo.py exits without ai2-olmo: imported under the oracle's placeholder, as the
        # generator (scripts/gen_mlx_lm_args.py) reads it
        args = import_model_module(name).ModelArgs
        if args.from_dict.__func__ is not BaseModelArgs.from_dict.__func__:
            continue  # its own from_dict, or an inherited one (prism_hadamard_qwen35)
        req = tuple(f.name for f in dataclasses.fields(args) if f.name != "model_type"
                    and f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING)
        if req:
            want[name] = req
    assert REQUIRED_FIELDS == want


def test_dbrx_context_limit_is_max_seq_len() -> None:
    """databricks/dbrx-instruct states its context as max_seq_len (no max_position_embeddings):
    fit's context limit comes from it instead of 'no max_position_embeddings'."""
    path = CONFIGS / "published" / "SinclairSchneider__dbrx-instruct-quantization-fixed.json"
    config = json.loads(path.read_text())
    assert "max_position_embeddings" not in config
    assert parse_config(config).max_position == config["max_seq_len"]
