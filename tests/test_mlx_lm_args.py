"""mlxfit reads a config the way mlx-lm's ModelArgs does (model/mlx_lm_args.py, generated from the
installed mlx-lm by scripts/gen_mlx_lm_args.py; model/mlx_lm_fields.mlx_lm_reads), checked
against mlx-lm's own caches (the lazy oracle, model/oracle.py):

- the generated table is the installed mlx-lm's (an upgrade fails here until regenerated);
- every family fixture cut down to the fields its ModelArgs requires, so mlx-lm fills every
  default and __post_init__ derivation: mlxfit's cache bytes equal mlx-lm's, and where mlx-lm
  cannot build the config mlxfit refuses it or warns that mlx-lm cannot load it, naming a field;
- fields a module declares but never reads (DECLARED_NOT_READ) changed: bytes unchanged;
- each field a family's ModelArgs requires (REQUIRED_FIELDS, its text class's too) or its
  build dereferences though it defaults to None (NEEDED_FIELDS), removed from the family
  fixture: building the model with mlx-lm fails, and mlxfit refuses the config in one line
  naming config.json and the field; one only the forward pass reads (CALL_NEEDED_FIELDS):
  mlx-lm builds it, its first call fails, mlxfit warns naming it;
- the smallest reproducers of reviews/difffuzz-3.md's defaults / field-name findings
  (tests/fixtures/family_defaults/) stay exact.

Skipped, with the reason, only when mlx or mlx-lm cannot be imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import ON_M4PRO, invoke, make_folder

from mlxfit.errors import ConfigError, MlxfitError
from mlxfit.estimate.memory import Run, kv_bytes_final
from mlxfit.model.families import NOT_SUPPORTED, mlx_lm_module
from mlxfit.model.mlx_extra import mlx_missing_reason
from mlxfit.model.mlx_lm_args import MODEL_ARGS
from mlxfit.model.mlx_lm_fields import (
    CALL_NEEDED_FIELDS,
    DECLARED_NOT_READ,
    MERGES_TEXT,
    MISTRAL3_TEXT,
    NEEDED_FIELDS,
    REQUIRED_FIELDS,
    TEXT_OR_FLAT,
    WRAPPED_TEXT,
)
from mlxfit.model.parse import parse_config

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
FAMILY_DIR = FIXTURES / "families"
MANIFEST = json.loads((FAMILY_DIR / "MANIFEST.json").read_text())
REGRESSIONS = FIXTURES / "family_defaults"
MLX_MISSING = mlx_missing_reason()
NEEDS_MLX = pytest.mark.skipif(MLX_MISSING is not None,
                               reason=f"mlx/mlx-lm not importable ({MLX_MISSING}): "
                                      'pip install ".[test,measure]"')

# (ctx, prefill_step_size): two chunks and a short last one; recurrent mixers (a per-token loop
# on the CPU) a shorter prompt over 256-token chunks. Cut-down configs run at mlx-lm's default
# dimensions (a 4096-wide, 32-layer model), lazily: nothing is allocated.
POINT = (1100, 512)
STATE_POINT = (300, 256)


def _fixture(name: str) -> dict:
    return json.loads((FAMILY_DIR / MANIFEST[name]["file"]).read_text())


def _module(config: dict) -> str:
    return mlx_lm_module(config["model_type"], config.get("architectures") or ())


def _mlxfit_and_mlx_lm(config: dict, where: str) -> tuple[tuple[int, int], tuple[int, int]]:
    from mlxfit.model.oracle import cache_plan

    cfg = parse_config(config, where=where)
    ctx, step = STATE_POINT if cfg.state_bytes else POINT
    ours = (kv_bytes_final(cfg, Run(ctx=ctx, gen=0, prefill_step_size=step)), cfg.state_bytes)
    got = cache_plan(config, ctx, prefill_step_size=step, gen=0)
    return ours, (got.kv_bytes, got.state_bytes)


@NEEDS_MLX
def test_generated_table_is_the_installed_mlx_lms() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_mlx_lm_args.py"),
                           "--check"], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _required(text_module: str, config: dict) -> dict:
    return {k: config[k] for k in MODEL_ARGS[text_module]["required"] if k in config}


def _cut_down(config: dict) -> dict:
    """model_type and the fields mlx-lm's args classes require, at the fixture's values: the
    top level's ModelArgs, and a wrapper's text_config cut to its text class's."""
    module = _module(config)
    mt = {"model_type": config["model_type"]}
    tc = config.get("text_config")
    if module in TEXT_OR_FLAT:
        inner = tc if isinstance(tc, dict) else config
        return {**mt, "text_config": _required(TEXT_OR_FLAT[module], inner)}
    if module in MERGES_TEXT:
        merged = {**config, **tc} if isinstance(tc, dict) else config
        return {**mt, **_required(module, merged)}
    cut = {**mt, **_required(module, config)}
    if isinstance(tc, dict) and module in WRAPPED_TEXT:
        text = WRAPPED_TEXT[module][0]
        cut["text_config"] = {k: v for k, v in tc.items() if k == "model_type"} | _required(
            text if not (module == "mistral3" and tc.get("model_type") in MISTRAL3_TEXT)
            else tc["model_type"], tc)
    return cut


CUT_DOWN = sorted(n for n in MANIFEST if _module(_fixture(n)) in MODEL_ARGS
                  and _fixture(n)["model_type"] not in NOT_SUPPORTED)


def test_cut_down_covers_the_families() -> None:
    # every fixture's module has an entry (generated from mlx-lm)
    assert len(CUT_DOWN) == len([n for n in MANIFEST
                                 if _fixture(n)["model_type"] not in NOT_SUPPORTED])


@NEEDS_MLX
@pytest.mark.parametrize("name", CUT_DOWN)
def test_cut_down_config_matches_mlx_lm(name: str) -> None:
    from mlxfit.model.oracle import build_model, cache_plan

    config = _cut_down(_fixture(name))
    try:
        build_model(config)
    except MlxfitError:  # mlx-lm cannot build it: mlxfit refuses it, naming a field
        with pytest.raises(ConfigError) as e:
            parse_config(config, where=name)
        assert "'" in str(e.value) and "\n" not in str(e.value), str(e.value)
        return
    try:
        cache_plan(config, 4)
    except MlxfitError:  # built, its first call fails: mlxfit refuses or warns
        try:
            warnings = parse_config(config, where=name).warnings
        except ConfigError:
            return
        assert any("first call fails" in w for w in warnings), (name, warnings)
        return
    ours, mlx_lm = _mlxfit_and_mlx_lm(config, name)
    assert ours == mlx_lm, f"{name} cut down to {sorted(config)}: mlxfit vs mlx-lm"


def _mismatched(config: dict, field: str) -> dict:
    heads = config["num_attention_heads"] if "num_attention_heads" in config else config["n_head"]
    hidden = config["hidden_size"] if "hidden_size" in config else config["n_embd"]
    value = hidden // heads // 2 if field == "head_dim" else max(heads // 2, 1)
    assert value != config.get(field), field
    return dict(config, **{field: value})


@NEEDS_MLX
@pytest.mark.parametrize(("module", "field"),
                         [(m, f) for m, fields in DECLARED_NOT_READ.items() for f in fields])
def test_declared_but_not_read_field_matches_mlx_lm(module: str, field: str) -> None:
    """helium's head_dim, gpt2's and gpt_neox's num_key_value_heads: ModelArgs declares them,
    the attention never reads them."""
    config = _mismatched(_fixture(module), field)
    ours, mlx_lm = _mlxfit_and_mlx_lm(config, module)
    assert ours == mlx_lm


def _claimed(module: str) -> list[str]:
    return (list(REQUIRED_FIELDS.get(module, ()))
            + [f for f, _ in NEEDED_FIELDS.get(module, ())])


def _text_class(module: str, config: dict) -> str | None:
    tc = config.get("text_config")
    if not isinstance(tc, dict):
        return None
    if module in TEXT_OR_FLAT:
        return TEXT_OR_FLAT[module]
    if module == "mistral3" and tc.get("model_type") in MISTRAL3_TEXT:
        return tc["model_type"]
    return WRAPPED_TEXT[module][0] if module in WRAPPED_TEXT else None


def _without_each_required(config: dict):
    """(field, config without it) for each field mlxfit says mlx-lm needs that ``config``
    states: the module's on the top level, its text class's in text_config."""
    module = _module(config)
    for k in _claimed(module):
        if k in config:
            yield k, {a: b for a, b in config.items() if a != k}
    text = _text_class(module, config)
    if text is not None:
        tc = config["text_config"]
        post_init = WRAPPED_TEXT[module][1] if module in WRAPPED_TEXT else {}
        for k in [*MODEL_ARGS[text]["required"], *_claimed(text)]:
            if k in post_init:  # the wrapper's __post_init__ sets it
                continue
            if k in tc:
                yield k, {**config, "text_config": {a: b for a, b in tc.items() if a != k}}


@NEEDS_MLX
@pytest.mark.parametrize("name", CUT_DOWN)
def test_required_field_absent_is_refused_as_mlx_lm_fails(name: str) -> None:
    """The oracle for the refusal: without any field mlxfit refuses a config for lacking,
    mlx-lm's ModelArgs.from_dict / Model() fails (nothing refused that mlx-lm loads), and
    mlxfit's one line names config.json and that field."""
    from mlxfit.model.oracle import build_model

    checked = 0
    for field, config in _without_each_required(_fixture(name)):
        with pytest.raises(MlxfitError):
            build_model(config)
        with pytest.raises(ConfigError) as e:
            parse_config(config)
        text = str(e.value)
        assert e.value.field == field, text
        assert text.startswith("config.json: ") and f"'{field}'" in text and "\n" not in text
        checked += 1
    assert checked or not (_claimed(_module(_fixture(name)))), name


@NEEDS_MLX
@pytest.mark.parametrize(("module", "field"),
                         [(m, f) for m, fields in CALL_NEEDED_FIELDS.items() for f, _ in fields])
def test_call_needed_field_absent_builds_fails_at_call_and_warns(module: str,
                                                                 field: str) -> None:
    from mlxfit.model.oracle import build_model, cache_plan

    config = {k: v for k, v in _fixture(module).items() if k != field}
    assert field in _fixture(module), f"{module}: the fixture states {field}"
    build_model(config)  # mlx-lm loads it …
    with pytest.raises(MlxfitError):
        cache_plan(config, 4)  # … and its first call fails
    assert any(f"'{field}'" in w and "first call fails" in w
               for w in parse_config(config).warnings)


REGRESSION_FILES = sorted(p for p in REGRESSIONS.glob("*.json") if p.name != "MANIFEST.json")


@NEEDS_MLX
@pytest.mark.parametrize("path", REGRESSION_FILES, ids=lambda p: p.stem)
def test_defaults_finding_stays_exact(path: Path) -> None:
    ours, mlx_lm = _mlxfit_and_mlx_lm(json.loads(path.read_text()), path.name)
    assert ours == mlx_lm


def test_regressions_record_their_source() -> None:
    manifest = json.loads((REGRESSIONS / "MANIFEST.json").read_text())
    assert set(manifest) == {p.name for p in REGRESSION_FILES}


def test_longcat_depth_is_num_layers_not_transformers_sublayers() -> None:
    """transformers' LongcatFlashConfig saves num_hidden_layers = 2 x num_layers (sublayers);
    mlx-lm builds num_layers layers (LongCat-Flash-Lite was sized with 2x its KV)."""
    base = _fixture("longcat_flash")
    n = base.get("num_layers") or base["num_hidden_layers"]
    one = parse_config(dict(base, num_layers=n, num_hidden_layers=2 * n))
    assert one.num_layers == n


# ----------------------------------------------------------------- conversion (quantize_model)

def _convert_case(name: str) -> tuple[dict, str]:
    config = {k: v for k, v in _fixture(name).items()
              if k not in ("quantization", "quantization_config")}
    return config, _module(config)


def _mlx_lm_sanitized(config: dict, layout: dict) -> dict[str, tuple[int, ...]]:
    """mlx-lm's own Model.sanitize on lazy zeros of ``layout`` (never evaluated)."""
    import mlx.core as mx  # heavy, optional: the measure extra
    from mlx.utils import tree_flatten  # heavy, optional: as above

    from mlxfit.model.oracle import mlx_lm_classes

    model_cls, args_cls = mlx_lm_classes(config)
    model = model_cls(args_cls.from_dict(config))
    dtypes = {k: v.dtype for k, v in tree_flatten(model.parameters())}
    weights = {k: mx.zeros(shape, dtypes[k]) for k, (_, shape) in layout.items()}
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    return {k: tuple(v.shape) for k, v in weights.items()}


CONVERTED = sorted(n for n in MANIFEST if _fixture(n)["model_type"] not in NOT_SUPPORTED
                   and _fixture(n)["model_type"] != "olmo")  # olmo.py: ai2-olmo absent


@NEEDS_MLX
@pytest.mark.parametrize("name", CONVERTED)
def test_family_quantization_matches_mlx_lms_quantize_model(name: str) -> None:
    """Every family fixture's MLX-layout float model (built lazily, nothing evaluated)
    quantized by mlx-lm's quantize_model (4-bit affine; and mxfp4 where the family has a
    quantization predicate) against mlxfit's plan from the same layout: mlxfit's sanitize of
    that layout is mlx-lm's own Model.sanitize's, which modules quantize, its routers' 8-bit predicate,
    MoEGate / BitLinear left in float, the config block, and from float32 with --dtype
    bfloat16 its cast_predicate's exceptions. Where quantize_model fails, mlxfit refuses."""
    from convert_helpers import lazy_converted

    from mlxfit.errors import UsageError
    from mlxfit.model.convert_rules import QUANTIZE_FAILS, RULES, generated_rules, sanitized
    from mlxfit.model.quantize import QuantRecipe, plan_conversion
    from mlxfit.model.tensors import TensorInfo

    config, family = _convert_case(name)
    rules = RULES.get(family) or generated_rules(family)
    for mode in ("affine", "mxfp4")[: 2 if rules.predicate else 1]:
        try:
            real, block, _, source = lazy_converted(config, {"q_mode": mode})
        except TypeError as e:  # quantize_model itself fails
            assert family in QUANTIZE_FAILS, (name, str(e))
            with pytest.raises(UsageError):
                plan_conversion([], config, family, QuantRecipe(mode=mode))
            return
        tensors = [TensorInfo.of(k, d, s) for k, (d, s) in source.items()]
        assert _mlx_lm_sanitized(config, source) == {
            k: v.shape for k, v in sanitized(tensors, config, family)[0].items()}, name
        plan = plan_conversion(tensors, dict(config, torch_dtype=None), family,
                               QuantRecipe(mode=mode))
        got = {t.name: (t.dtype, t.shape) for t in plan.tensors}
        assert got == real, (name, mode, sorted(k for k in set(got) | set(real)
                                                if got.get(k) != real.get(k))[:4])
        assert plan.config["quantization"] == block, (name, mode)
        # from float32 with --dtype bfloat16: the family's cast_predicate keeps its exceptions
        f32 = [TensorInfo.of(k, "F32" if d in ("BF16", "F32") else d, s)
               for k, (d, s) in source.items()]
        cast = plan_conversion(f32, config, family, QuantRecipe(mode=mode, dtype="bfloat16"))
        assert {t.name: (t.dtype, t.shape) for t in cast.tensors} == real, (name, "cast")


def test_fit_refuses_a_config_mlx_lm_cannot_load_in_one_line(tmp_path: Path) -> None:
    """allenai/OLMoE-1B-7B-0924 as published has no rms_norm_eps, which mlx-lm's olmoe
    ModelArgs requires (its load raises TypeError): fit exits 2 with one line naming
    config.json and the field, where it used to size the run with a warning."""
    config = json.loads((FIXTURES / "configs" / "unloadable"
                         / "allenai__OLMoE-1B-7B-0924.json").read_text())
    folder = make_folder(tmp_path / "olmoe", config,
                         {"model.safetensors": {"model.norm.weight": ("BF16", [2048])}})
    r = invoke("fit", str(folder), "--ctx", "4096", *ON_M4PRO)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert len(lines) == 1 and "config.json" in lines[0] and "'rms_norm_eps'" in lines[0]
    assert "Traceback" not in r.output


@NEEDS_MLX
@pytest.mark.parametrize("field", ["index_head_dim", "index_n_heads"])
def test_minimax_m3_sparse_layers_need_the_indexer_widths(field: str) -> None:
    """minimax_m3_vl's sparse-attention layers build index projections index_n_heads x
    index_head_dim wide (both default None): without one mlx-lm cannot build the model and
    mlxfit refuses it naming the field; given nested (sparse_attention_config's
    sparse_num_index_heads / sparse_index_dim, as the published config spells them) both
    accept it with the same bytes."""
    from mlxfit.model.oracle import build_model

    config = _fixture("minimax_m3_vl")
    tc = config["text_config"]
    cut = {**config, "text_config": {k: v for k, v in tc.items() if k != field}}
    with pytest.raises(MlxfitError):
        build_model(cut)
    with pytest.raises(ConfigError) as e:
        parse_config(cut)
    assert e.value.field == field and f"'{field}'" in str(e.value)
    nested_key = {"index_head_dim": "sparse_index_dim",
                  "index_n_heads": "sparse_num_index_heads"}[field]
    nested = {**config, "text_config": {**cut["text_config"],
                                        "sparse_attention_config": {nested_key: tc[field]}}}
    ours, mlx_lm = _mlxfit_and_mlx_lm(nested, "minimax_m3_vl")
    assert ours == mlx_lm
