"""Every mlx-lm family against mlx-lm's own caches (the oracle, mlxfit.model.oracle).

For each family fixture (tests/fixtures/families/, MANIFEST.json says where each came from) and
each real config (tests/fixtures/configs/), mlx-lm's own model classes are built at the
fixture's dimensions and run lazily over a prompt chunked as generate_step chunks it; the KV and
recurrent-state bytes its caches hold must equal mlxfit's table prediction at every context:
crossing 256-token steps, sliding windows and chunk boundaries, prefill steps 512 and 2048, and
with a quantized cache where mlxfit accepts --kv-bits (where it refuses, mlx-lm must fail or
leave the cache unquantized). A second test enumerates the installed mlx_lm/models/ and fails
for a module with no row and no stated reason, so an mlx-lm upgrade that adds a family fails
here until it is covered.

Skipped, with the reason, only when mlx or mlx-lm cannot be imported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxfit.errors import ConfigError, MlxfitError, UsageError
from mlxfit.estimate.memory import Run, kv_bytes_final, validate_run
from mlxfit.model.families import (
    FAMILIES,
    FAMILY_ALIASES,
    IGNORES_HEAD_DIM,
    MLX_LM_REMAPPING,
    NOT_SUPPORTED,
    NOT_TEXT_LM,
    mlx_lm_module,
    resolve_family,
)
from mlxfit.model.mlx_extra import mlx_missing_reason
from mlxfit.model.parse import parse_config

FIXTURES = Path(__file__).parent / "fixtures"
FAMILY_DIR = FIXTURES / "families"
MANIFEST = json.loads((FAMILY_DIR / "MANIFEST.json").read_text())
MLX_MISSING = mlx_missing_reason()
NEEDS_MLX = pytest.mark.skipif(MLX_MISSING is not None,
                               reason=f"mlx/mlx-lm not importable ({MLX_MISSING}): "
                                      'pip install ".[test,measure]"')

# (ctx, prefill_step_size, gen): one chunk; a chunk boundary at 512 with a short last chunk;
# 256-steps with windows crossed (the fixtures' windows are 8..2048 tokens); two 2048 chunks
# and generated tokens.
CONTEXTS = [(300, 2048, 0), (1100, 512, 0), (700, 256, 3), (4200, 2048, 2)]
QUANTIZED = (1100, 512, 0)
REAL_CONTEXTS = [(1000, 2048, 0), (5000, 512, 2)]
# Recurrent / linear-attention mixers run a per-token loop on the CPU (mlx-lm's gated-delta and
# Mamba-1 scans), so their graphs grow with the tokens: shorter contexts, still crossing the
# 256-steps and a chunk boundary (their state is constant in the context).
STATE_CONTEXTS = [(300, 256, 0), (700, 512, 2)]
REAL_STATE_CONTEXTS = [(1000, 512, 2)]


def _fixture(name: str) -> dict:
    return json.loads((FAMILY_DIR / MANIFEST[name]["file"]).read_text())


def _kv_group(config: dict) -> int | None:
    """A group size mlx-lm can quantize this model's caches with (every cached width must
    divide), from the oracle's own shapes; None when none can."""
    # mlx / mlx-lm are optional (the measure extra): imported for the oracle only
    from mlxfit.model.oracle import cache_plan

    widths = {shape[-1] for e in cache_plan(config, 4).entries for role, shape, _ in e.arrays
              if role in ("keys", "values", "arrays")}
    for g in (64, 32):
        if widths and all(w % g == 0 for w in widths):
            return g
    return None


def _check(config: dict, name: str, contexts: list[tuple[int, int, int]],
           state_contexts: list[tuple[int, int, int]] = STATE_CONTEXTS) -> None:
    from mlxfit.model.oracle import cache_plan

    cfg = parse_config(config, act_bytes=2, where=name)
    for ctx, step, gen in (state_contexts if cfg.state_bytes else contexts):
        run = Run(ctx=ctx, gen=gen, prefill_step_size=step)
        got = cache_plan(config, ctx, prefill_step_size=step, gen=gen)
        assert (kv_bytes_final(cfg, run), cfg.state_bytes) == (got.kv_bytes, got.state_bytes), (
            f"{name} ctx={ctx} step={step} gen={gen}: table vs mlx-lm {got.method}")


NOT_CHECKED = set(NOT_SUPPORTED)


@NEEDS_MLX
@pytest.mark.parametrize("name", sorted(set(MANIFEST) - NOT_CHECKED))
def test_family_matches_mlx_lm(name: str) -> None:
    _check(_fixture(name), name, CONTEXTS)


@NEEDS_MLX
@pytest.mark.parametrize("name", sorted(set(MANIFEST) - NOT_CHECKED))
def test_family_max_kv_size_matches_mlx_lm(name: str) -> None:
    """--max-kv-size 300: make_prompt_cache gives RotatingKVCache(300) to every layer of a model
    without its own make_cache(), and nothing changes for one with it."""
    from mlxfit.model.oracle import cache_plan

    config = _fixture(name)
    cfg = parse_config(config, act_bytes=2, where=name)
    ctx, step, gen = STATE_CONTEXTS[-1] if cfg.state_bytes else (1100, 512, 0)
    run = Run(ctx=ctx, gen=gen, prefill_step_size=step, max_kv_size=300)
    got = cache_plan(config, ctx, prefill_step_size=step, gen=gen, max_kv_size=300)
    assert (kv_bytes_final(cfg, run), cfg.state_bytes) == (got.kv_bytes, got.state_bytes)


# The quantized-cache test has nothing to compare for these fixtures, so they are left out of its
# parametrization (not skipped at run time); test_quantized_cache_exclusions_hold keeps both
# lists true, and the test fails for a fixture that belongs in one of them.
# - no group size (64, 32) divides the fixture's cached widths: mlx-lm cannot quantize it
NO_KV_GROUP = frozenset({
    "apertus", "bailing_hybrid", "bailing_moe", "deepseek", "deepseek_v2", "deepseek_v3",
    "deepseek_v32", "dots1", "exaone", "falcon_mamba", "gear", "gemma3", "gemma4", "glm4_moe_lite",
    "glm_moe_dsa", "granitemoehybrid", "kimi_k25", "kimi_k3", "kimi_linear", "kimi_vl", "llama",
    "llama4_text", "longcat_flash", "longcat_flash_ngram", "mamba", "mamba2", "mellum", "minicpm3",
    "minimax", "minimax_m3_vl", "ministral3", "mistral3", "mistral4", "mixtral", "muse_spark",
    "nanbeige", "nemotron-nas", "nemotron_h", "olmo3", "olmo_hybrid", "phi", "phixtral",
    "qwen2_vl", "rwkv7", "solar_open", "spark2_5", "telechat3",
})
# - mlxfit refuses --kv-bits for its attention, and the oracle runs only its caches' update rule
#   (FORWARD_FALLBACK: no CPU forward pass), which cannot show that failure
KV_BITS_REFUSED_NOT_RUNNABLE = frozenset({"olmo"})


def _quantized_run(name: str, config: dict, group: int):
    cfg = parse_config(config, act_bytes=2, where=name)
    ctx, step, gen = STATE_CONTEXTS[-1] if cfg.state_bytes else QUANTIZED
    return cfg, Run(ctx=ctx, gen=gen, prefill_step_size=step, kv_bits=8, kv_group_size=group,
                    quantized_kv_start=0)


@NEEDS_MLX
@pytest.mark.parametrize("name", sorted(set(MANIFEST) - NOT_CHECKED - NO_KV_GROUP
                                        - KV_BITS_REFUSED_NOT_RUNNABLE))
def test_family_quantized_cache_matches_mlx_lm(name: str) -> None:
    """--kv-bits 8 from the start: QuantizedKVCache bytes where mlxfit accepts the flag; where
    it refuses, mlx-lm fails too or leaves the caches as they were."""
    from mlxfit.model.oracle import FORWARD_FALLBACK, cache_plan

    config = _fixture(name)
    group = _kv_group(config)
    assert group is not None, (f"{name}: no group size divides the cached widths (mlx-lm "
                               "cannot quantize it): list it in NO_KV_GROUP")
    cfg, run = _quantized_run(name, config, group)
    ctx, step = run.ctx, run.prefill_step_size
    try:
        validate_run(cfg, run)
    except UsageError:
        assert cfg.family not in FORWARD_FALLBACK, (
            f"{name}: mlxfit refuses --kv-bits and only the caches' update rule runs here: "
            "list it in KV_BITS_REFUSED_NOT_RUNNABLE")
        plain = cache_plan(config, ctx, prefill_step_size=step)
        try:
            got = cache_plan(config, ctx, prefill_step_size=step, kv_bits=8,
                             kv_group_size=group, quantized_kv_start=0)
        except MlxfitError:
            return  # mlx-lm cannot run it quantized either
        assert got.kv_bytes == plain.kv_bytes, f"{name}: mlx-lm quantized a cache mlxfit refuses"
        return
    got = cache_plan(config, ctx, prefill_step_size=step, kv_bits=8, kv_group_size=group,
                     quantized_kv_start=0)
    assert (kv_bytes_final(cfg, run), cfg.state_bytes) == (got.kv_bytes, got.state_bytes)


@NEEDS_MLX
def test_quantized_cache_exclusions_hold() -> None:
    """The fixtures left out of the quantized-cache test are left out for the stated reason."""
    from mlxfit.model.oracle import FORWARD_FALLBACK

    checked = set(MANIFEST) - NOT_CHECKED
    assert NO_KV_GROUP <= checked and KV_BITS_REFUSED_NOT_RUNNABLE <= checked
    assert not NO_KV_GROUP & KV_BITS_REFUSED_NOT_RUNNABLE
    for name in sorted(NO_KV_GROUP):
        assert _kv_group(_fixture(name)) is None, f"{name}: mlx-lm can quantize it now"
    for name in sorted(KV_BITS_REFUSED_NOT_RUNNABLE):
        config = _fixture(name)
        group = _kv_group(config)
        assert group is not None, name
        cfg, run = _quantized_run(name, config, group)
        assert cfg.family in FORWARD_FALLBACK, name
        with pytest.raises(UsageError):
            validate_run(cfg, run)


# Real configs: the shared set (tests/fixtures/configs/*.json) and published configs of further
# families (configs/published/, MANIFEST.json there says where each came from).
PUBLISHED = FIXTURES / "configs" / "published"  # README.md there
REAL_CONFIGS = sorted((FIXTURES / "configs").glob("*.json")) + sorted(
    p for p in PUBLISHED.glob("*.json") if p.name != "MANIFEST.json")


@NEEDS_MLX
@pytest.mark.parametrize("path", REAL_CONFIGS, ids=lambda p: p.stem)
def test_real_config_matches_mlx_lm(path: Path) -> None:
    _check(json.loads(path.read_text()), path.name, REAL_CONTEXTS, REAL_STATE_CONTEXTS)


def _stated_head_dim(config: dict) -> dict:
    """The fixture with a head_dim that is not hidden_size // heads (text_config's for a
    wrapper), as microsoft/Phi-tiny-MoE's config states one."""
    cfg = parse_config(config)
    heads = next(ly.attn.q_heads for ly in cfg.layers if ly.attn is not None)
    inner = config.get("text_config") or config
    stated = dict(inner, head_dim=cfg.hidden // heads // 2)
    return dict(config, text_config=stated) if "text_config" in config else stated


@NEEDS_MLX
@pytest.mark.parametrize("name", sorted(n for n in MANIFEST
                                        if resolve_family(n)[0] in IGNORES_HEAD_DIM))
def test_ignored_head_dim_matches_mlx_lm(name: str) -> None:
    """A config's head_dim that mlx-lm's ModelArgs drops: the caches stay hidden // heads wide."""
    _check(_stated_head_dim(_fixture(name)), name, [QUANTIZED])


@NEEDS_MLX
def test_ignored_head_dim_is_mlx_lms() -> None:
    import dataclasses
    import importlib

    for name in IGNORES_HEAD_DIM:
        args = importlib.import_module(f"mlx_lm.models.{name}").ModelArgs
        assert "head_dim" not in {f.name for f in dataclasses.fields(args)}, name
    assert {resolve_family(n)[0] for n in MANIFEST} >= IGNORES_HEAD_DIM


UNLOADABLE = FIXTURES / "configs" / "unloadable"


@NEEDS_MLX
@pytest.mark.parametrize("path", sorted(p for p in UNLOADABLE.glob("*.json")
                                        if p.name != "MANIFEST.json"), ids=lambda p: p.stem)
def test_unloadable_config_is_refused_like_mlx_lm_fails(path: Path) -> None:
    """A published config mlx-lm cannot load (a required ModelArgs field absent): mlxfit
    refuses it in one line naming config.json and the field mlx-lm's TypeError names."""
    from mlxfit.model.oracle import build_model

    config = json.loads(path.read_text())
    with pytest.raises(MlxfitError) as e:
        build_model(config)
    field = e.value.field
    with pytest.raises(ConfigError) as ours:
        parse_config(config)
    assert field and ours.value.field == field
    text = str(ours.value)
    assert text.startswith("config.json: ") and f"'{field}'" in text and "\n" not in text


def test_loadable_fixtures_do_not_warn_of_missing_fields() -> None:
    """Every fixture mlx-lm builds (the oracle tests above) has the fields it requires: none
    is refused for one, none warned of a field mlx-lm's forward pass reads."""
    configs = [_fixture(n) for n in sorted(set(MANIFEST) - NOT_CHECKED)]
    configs += [json.loads(p.read_text()) for p in REAL_CONFIGS]
    for config in configs:
        assert not [w for w in parse_config(config).warnings if "first call fails" in w], config


@NEEDS_MLX
def test_every_mlx_lm_module_is_covered() -> None:
    """Every module of the installed mlx-lm: a row (directly, by mlxfit's alias or mlx-lm's
    remapping), or a stated reason it is not a text LM / not supported."""
    import mlx_lm.models

    modules = {p.stem for p in Path(mlx_lm.models.__file__).parent.glob("*.py")}
    uncovered = sorted(m for m in modules
                       if resolve_family(m)[1] is None and m not in NOT_TEXT_LM
                       and m not in NOT_SUPPORTED)
    assert uncovered == [], f"mlx-lm modules without a family row or a reason: {uncovered}"
    stale = sorted((set(NOT_TEXT_LM) | set(NOT_SUPPORTED) | set(FAMILIES)) - modules)
    assert stale == [], f"rows or reasons for modules mlx-lm no longer has: {stale}"


@NEEDS_MLX
def test_own_cache_is_whether_mlx_lm_defines_make_cache() -> None:
    from mlxfit.model.oracle import import_model_module

    for name, family in FAMILIES.items():
        model = import_model_module(name).Model
        assert family.own_cache == hasattr(model, "make_cache"), name


def test_every_row_has_a_fixture() -> None:
    """Each family row, alias and remapped model_type is checked through some fixture."""
    covered = {resolve_family(n)[0] for n in MANIFEST}
    for p in (FIXTURES / "configs").glob("*.json"):
        d = json.loads(p.read_text())
        covered.add(resolve_family(d.get("model_type", ""))[0])
    assert set(FAMILIES) - covered == set()
    assert set(FAMILY_ALIASES.values()) <= covered
    remapped = {resolve_family(t)[0] for t in MLX_LM_REMAPPING
                if mlx_lm_module(t) not in NOT_SUPPORTED}
    assert remapped - covered == set()


def test_manifest_records_provenance() -> None:
    files = {p.name for p in FAMILY_DIR.glob("*.json")} - {"MANIFEST.json"}
    assert files == {e["file"] for e in MANIFEST.values()}
    for name, entry in MANIFEST.items():
        assert entry["source"] and isinstance(entry["synthetic"], bool), name


@NEEDS_MLX
def test_architecture_remapping_is_mlx_lms() -> None:
    from mlx_lm.utils import MODEL_ARCHITECTURE_REMAPPING

    from mlxfit.model.families import MLX_LM_ARCH_REMAPPING

    assert MLX_LM_ARCH_REMAPPING == MODEL_ARCHITECTURE_REMAPPING
    d = {**_fixture("bailing_moe_v3"), "model_type": "bailing_hybrid",
         "architectures": ["BailingMoeV3ForCausalLM"]}
    assert parse_config(d).family == "bailing_moe_v3"
    _check(d, "bailing_hybrid as BailingMoeV3ForCausalLM", CONTEXTS[:1])


# deepseek_v41's LayerCache: a window, compressed groups and pending rows, all concatenated to
# their exact sizes; contexts just below, at and above multiples of the ratios (4, 128), the
# window (128), the 256-steps and the chunk boundaries, with prefill steps 512 and 2048.
V41_CONTEXTS = [(ctx, step, gen) for ctx in (1, 3, 4, 5, 127, 128, 129, 255, 256, 257, 513,
                                             2049, 2050, 4100)
                for step in (512, 2048) for gen in (0, 3) if gen < ctx]


@NEEDS_MLX
def test_deepseek_v41_compressed_layout_matches_mlx_lm() -> None:
    _check(_fixture("deepseek_v41_compressed"), "deepseek_v41_compressed", V41_CONTEXTS)


@NEEDS_MLX
@pytest.mark.parametrize("change", [{"engram_layer_ids": [1]}, {"compress_ratios": [0, 0, 4]}],
                         ids=["engram", "short-ratios"])
def test_deepseek_v41_configs_mlxfit_refuses_mlx_lm_refuses(change: dict) -> None:
    from mlxfit.errors import ConfigError
    from mlxfit.model.oracle import cache_plan

    d = {**_fixture("deepseek_v41_compressed"), **change}
    with pytest.raises(ConfigError):
        parse_config(d)
    with pytest.raises(MlxfitError):
        cache_plan(d, 8)


@NEEDS_MLX
def test_olmo_builds_without_ai2_olmo() -> None:
    """The oracle's placeholder for olmo.py's `import hf_olmo` probe is there only while the
    module is imported: afterwards hf_olmo is importable exactly when it is installed."""
    import importlib.util
    import sys

    from mlxfit.model.oracle import cache_plan

    installed = importlib.util.find_spec("hf_olmo") is not None
    run = cache_plan(_fixture("olmo"), 300)
    assert run.kv_bytes == parse_config(_fixture("olmo")).num_layers * 512 * 2 * 1024 * 2
    assert ("hf_olmo" in sys.modules) == (installed and "hf_olmo" in sys.modules)
    assert (importlib.util.find_spec("hf_olmo") is not None) == installed
