"""mlxfit pick: the seed's auto-load rule over a real (sparse) Hugging Face cache built in
tmp_path, the explain table, --catalog, and every kind of bad input (nothing of ours mocked)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from st_helpers import M4PRO, invoke, make_hf_cache, runner, write_sparse

from mlxfit.cli.app import app
from mlxfit.errors import MachineError, UsageError
from mlxfit.hardware.resolve import GIB
from mlxfit.model.mlx_extra import mlx_missing_reason
from mlxfit.render.pick import candidate_to_json, pick_to_json
from mlxfit.settings import DEFAULT_MODEL
from mlxfit.sources.catalog import load_entry
from mlxfit.sources.folder import missing_numbered_shards
from mlxfit.sources.hf_cache import adapter_reason, drafter_reason
from mlxfit.verbs.pick import Option, choose, load_settings, pick

MLX_MISSING = mlx_missing_reason()
QWEN8 = "mlx-community/Qwen3-8B-4bit"  # 4.61 GB of weights, the built-in default
QWEN30 = "mlx-community/Qwen3-30B-A3B-4bit"  # 17.18 GB
QWEN4 = "mlx-community/Qwen3-4B-Instruct-2507-4bit"  # 2.26 GB


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """No developer file (~/.config/mlxfit/*) leaks in; the HF cache is ours."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return home


def commit_of(repo_id: str) -> str:
    return hashlib.sha1(repo_id.encode()).hexdigest()


def spec_of(repo_id: str) -> tuple[dict, dict]:
    e = load_entry(repo_id)
    assert e is not None, repo_id
    return e.config, {t.name: (t.dtype, list(t.shape)) for t in e.tensors}


def cache_model(cache: Path, repo_id: str, *, as_id: str | None = None, shards: int = 2,
                index: bool = True, commit: str | None = None, refs=("main",),
                config: dict | None = None) -> Path:
    """A snapshot of a catalog model in the hub layout: real config.json, sparse shards holding
    exactly the catalog's tensors (headers are real; data is a hole)."""
    cfg, spec = spec_of(repo_id)
    names = list(spec)
    per = -(-len(names) // shards)
    files: dict[str, bytes | dict] = {"config.json": json.dumps(config or cfg).encode()}
    weight_map = {}
    for s in range(shards):
        fname = (f"model-{s + 1:05d}-of-{shards:05d}.safetensors" if shards > 1
                 else "model.safetensors")
        part = {n: spec[n] for n in names[s * per:(s + 1) * per]}
        files[fname] = part
        weight_map.update({n: fname for n in part})
    if index and shards > 1:
        files["model.safetensors.index.json"] = json.dumps(
            {"metadata": {}, "weight_map": weight_map}).encode()
    rid = as_id or repo_id
    return make_hf_cache(cache, rid, files, commit=commit or commit_of(rid), refs=refs)


def hub(tmp_path: Path) -> Path:
    return tmp_path / "hub"


def by_model(p) -> dict:
    return {c.model: c for c in p.candidates}


# ---------------------------------------------------------------------------------------------
# The rule, pure
# ---------------------------------------------------------------------------------------------

GB = 10**9


def opt(name: str, weights_gb: float, total_gb: float, usable_gb: float = 19.6,
        coexist_gb: float = 15.5) -> Option:
    total = int(total_gb * GB)
    return Option(name, int(weights_gb * GB), total, total <= usable_gb * GB,
                  total <= coexist_gb * GB)


def test_rule_default_downloaded_and_fitting_wins_over_larger():
    opts = [opt("big", 12, 14), opt("default", 4.6, 6.7), opt("huge", 40, 45)]
    c = choose(opts, "default", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (c.index, c.rule) == (1, "default")
    assert c.verdicts[1].chosen and c.verdicts[1].budget == "usable"
    # Each passed-over candidate's reason says what it would do here (issue 14).
    assert c.verdicts[0].reason == ("it fits the coexist budget (14.00 GB of 15.50 GB); the "
                                    "default model (default) comes first when it is downloaded "
                                    "and fits")
    assert c.verdicts[2].reason.startswith("it does not fit: needs 45.00 GB > the usable 19.60")


def test_rule_default_that_only_fits_usable_still_wins():
    """The seed's step 1 asks the default to fit at all, not to fit the coexist budget."""
    opts = [opt("default", 16, 18), opt("small", 2, 3)]
    c = choose(opts, "default", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (c.index, c.rule) == (0, "default")


def test_rule_largest_within_coexist_when_default_absent():
    """A 26B (~17 GB) on a 24 GB Mac fits but would take the whole machine: passed over."""
    opts = [opt("a4b-26b", 14.2, 16.8), opt("9b", 5.0, 6.4), opt("4b", 2.3, 4.2)]
    c = choose(opts, "not-downloaded", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (c.index, c.rule) == (1, "coexist")
    assert "over the coexist budget" in c.verdicts[0].reason
    assert "fits the usable" in c.verdicts[0].reason
    assert "smaller than 9b" in c.verdicts[2].reason
    assert all(v.budget == "coexist" for v in c.verdicts)
    assert "not downloaded" in c.reason
    # The same model on a 64 GB Mac clears the budget: RAM-relative by design.
    big = [opt("a4b-26b", 14.2, 16.8, 55.7, 41.2), opt("9b", 5.0, 6.4, 55.7, 41.2)]
    assert choose(big, "x", int(55.7 * GB), int(41.2 * GB), 0.6).index == 0


def test_rule_default_that_does_not_fit_falls_through():
    opts = [opt("default", 30, 33), opt("small", 2, 3)]
    c = choose(opts, "default", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (c.index, c.rule) == (1, "coexist")
    assert "the default model, but it does not fit" in c.verdicts[0].reason
    assert c.reason.startswith("the default model does not fit")


def test_rule_largest_that_fits_at_all_as_last_resort():
    opts = [opt("heavy", 16, 18), opt("heavier", 17, 19), opt("too-big", 30, 33)]
    c = choose(opts, "none", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (opts[c.index].model, c.rule) == ("heavier", "fits")
    assert all(v.budget == "usable" for v in c.verdicts)
    assert "does not fit" in c.verdicts[2].reason
    assert "smaller than heavier" in c.verdicts[0].reason


def test_rule_none_fits_names_the_smallest():
    opts = [opt("a", 30, 33), opt("b", 20, 21)]
    c = choose(opts, "none", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (c.index, c.rule) == (None, "none")
    assert "b, needs 21.00 GB" in c.reason and not any(v.chosen for v in c.verdicts)


def test_rule_a_model_blocked_by_the_gpu_buffer_does_not_fit():
    """Total within the usable memory but one array over maxBufferLength: it cannot run, and
    the verdict says why rather than quoting a total that fits."""
    why = "one array (attention (prefill), 12.00 GB) exceeds the GPU's largest buffer"
    opts = [Option("blocked", 9 * GB, 14 * GB, False, False, why), opt("small", 2, 3)]
    c = choose(opts, "blocked", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert (c.index, c.rule) == (1, "coexist")
    assert c.verdicts[0].reason == f"the default model, but it does not fit ({why})"
    c = choose(opts[:1], "x", int(19.6 * GB), int(15.5 * GB), 0.6)
    assert c.rule == "none" and c.reason.endswith(why)


def test_rule_no_candidates():
    c = choose([], "x", 1, 1, 0.6)
    assert (c.index, c.rule, c.verdicts) == (None, "none", ())


def test_rule_ties_are_broken_by_name():
    opts = [opt("b", 5, 6), opt("a", 5, 6)]
    assert choose(opts, "x", int(19.6 * GB), int(15.5 * GB), 0.6).index == 1


# ---------------------------------------------------------------------------------------------
# pick() over a real cache
# ---------------------------------------------------------------------------------------------


def test_default_model_is_qwen3_8b_4bit_and_in_the_catalog():
    assert DEFAULT_MODEL == QWEN8
    assert load_entry(DEFAULT_MODEL) is not None


def test_pick_default_when_downloaded(tmp_path):
    for rid in (QWEN8, QWEN30, QWEN4):
        cache_model(hub(tmp_path), rid)
    p = pick(8192, machine=M4PRO, default_model=QWEN8)
    assert (p.chosen, p.rule) == (QWEN8, "default")
    assert [c.model for c in p.candidates] == [QWEN30, QWEN8, QWEN4]  # largest first
    c = by_model(p)
    assert c[QWEN8].chosen and c[QWEN8].is_default and c[QWEN8].budget_bytes == p.usable_bytes
    assert c[QWEN8].weights_bytes == 4_607_731_712  # the real conversion, from our headers
    assert c[QWEN8].source_kind == "hf-cache" and c[QWEN8].revision == commit_of(QWEN8)
    assert p.warnings == () and p.skipped == ()
    assert p.coexist_bytes == int(24 * GIB * 0.6)


def test_pick_totals_are_those_of_fit(tmp_path):
    import mlxfit

    snap = cache_model(hub(tmp_path), QWEN30)
    p = pick(16384, machine=M4PRO)
    r = mlxfit.fit(QWEN30, 16384, machine=M4PRO)
    c = p.candidates[0]
    assert (c.total_bytes, c.fits, c.runs, c.max_safe_context) == (
        r.total_bytes, r.fits, r.runs, r.max_safe_context)
    assert c.predicted_decode_tps == r.predicted_decode_tps
    assert c.location == str(snap)


def test_pick_coexist_then_fits_then_none(tmp_path):
    cache_model(hub(tmp_path), QWEN30)
    cache_model(hub(tmp_path), QWEN4)
    # Default absent: the 30B (18.8 GB at 8K) is over 0.6 of 24 GiB, the 4B is chosen.
    p = pick(8192, machine=M4PRO)
    assert (p.chosen, p.rule) == (QWEN4, "coexist")
    c = by_model(p)
    assert c[QWEN30].fits and not c[QWEN30].fits_coexist and not c[QWEN30].chosen
    assert "over the coexist budget" in c[QWEN30].reason
    assert c[QWEN30].budget_bytes == p.coexist_bytes
    # A 64 GB Mac: the 30B now leaves room for other apps.
    assert pick(8192, machine="M4 Pro 64GB").chosen == QWEN30
    # Only the heavy one: the last resort takes it.
    shutil.rmtree(hub(tmp_path) / "models--mlx-community--Qwen3-4B-Instruct-2507-4bit")
    p = pick(8192, machine=M4PRO)
    assert (p.chosen, p.rule) == (QWEN30, "fits")
    assert p.candidates[0].budget == "usable"
    # Nothing fits an 8 GB Mac.
    p = pick(8192, machine="M2 8GB")
    assert (p.chosen, p.rule) == (None, "none")
    assert "none of the 1 downloaded models fits" in p.reason and QWEN30 in p.reason


def test_coexist_is_never_above_the_usable_memory(tmp_path):
    cache_model(hub(tmp_path), QWEN4)
    p = pick(8192, machine=M4PRO, memory_budget_gb=3.0, coexist_fraction=1.0)
    assert p.coexist_bytes == p.usable_bytes == 3 * 10**9


def test_settings_file_and_arguments(tmp_path, isolated_home):
    cache_model(hub(tmp_path), QWEN8)
    cache_model(hub(tmp_path), QWEN4)
    cfg = isolated_home / ".config" / "mlxfit" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f'[pick]\ndefault_model = "{QWEN4}"\ncoexist_fraction = 0.5\n'
                   '[other_verb]\nanything = 1\n')
    p = pick(8192, machine=M4PRO)
    assert (p.chosen, p.rule, p.default_model_from) == (QWEN4, "default", str(cfg))
    assert p.coexist_fraction == 0.5 and p.coexist_bytes == int(24 * GIB * 0.5)
    # Arguments win over the file; the default is matched case-insensitively.
    p = pick(8192, machine=M4PRO, default_model=QWEN8.upper(), coexist_fraction=0.7)
    assert (p.chosen, p.default_model_from, p.coexist_fraction) == (QWEN8, "argument", 0.7)


@pytest.mark.parametrize("text, msg", [
    ("[pick\n", "cannot read"),
    ('[pick]\ndefault_modle = "x"\n', "unknown key 'default_modle'"),
    ("[pick]\ncoexist_fraction = 1.5\n", "coexist_fraction must be a number in (0, 1]"),
    ("[pick]\ncoexist_fraction = true\n", "coexist_fraction must be a number"),
    ('[pick]\ndefault_model = ""\n', "default_model must be a repo id"),
    ('pick = 3\n', "[pick] must be a table"),
])
def test_bad_settings_file(tmp_path, text, msg):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=None) as e:
        load_settings(path)
    assert msg in str(e.value) and str(path) in str(e.value)


def test_missing_settings_file_means_builtins(tmp_path):
    s = load_settings(tmp_path / "nope.toml")
    assert (s.default_model, s.coexist_fraction, s.default_model_from) == (None, 0.6, "none")


def test_no_default_model_unless_the_user_sets_one(tmp_path):
    # ux-3 F16: mlxfit's own default (what `fit` sizes when no model is named) is not the
    # user's choice: without one, the largest that fits the coexist budget wins.
    for rid in (QWEN8, QWEN30, QWEN4):
        cache_model(hub(tmp_path), rid)
    p = pick(8192, machine=M4PRO)  # 30B is over the coexist budget: 8B is the largest within
    assert (p.chosen, p.rule, p.default_model) == (QWEN8, "coexist", None)
    assert not any(c.is_default for c in p.candidates)
    assert "default model" not in p.reason
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[pick]\ndefault_model = "{QWEN4}"\n')
    assert pick(8192, machine=M4PRO, config_path=cfg).rule == "default"
    off = pick(8192, machine=M4PRO, config_path=cfg, no_default_model=True)
    assert (off.chosen, off.rule, off.default_model) == (QWEN8, "coexist", None)
    with pytest.raises(UsageError, match="contradict"):
        pick(8192, machine=M4PRO, default_model=QWEN8, no_default_model=True)


def test_no_default_model_flag(tmp_path):
    for rid in (QWEN8, QWEN4):
        cache_model(hub(tmp_path), rid)
    r = invoke("pick", "--machine", M4PRO, "--default-model", QWEN4, "--json")
    assert json.loads(r.stdout)["chosen"] == QWEN4, r.output
    r = invoke("pick", "--machine", M4PRO, "--no-default-model", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["chosen"], d["default_model"]) == (QWEN8, None)
    text = invoke("pick", "--machine", M4PRO).stdout
    assert "no default model" in text and "(default)" not in text


@pytest.mark.parametrize("kw", [{"ctx": 0}, {"coexist_fraction": 0.0},
                                {"default_model": "  "}])
def test_bad_arguments(tmp_path, kw):
    with pytest.raises(UsageError):
        pick(**{"ctx": 8192, "machine": M4PRO, **kw})


# ---------------------------------------------------------------------------------------------
# What is (not) a candidate
# ---------------------------------------------------------------------------------------------


def test_drafters_and_adapters_are_skipped_quietly(tmp_path):
    cache_model(hub(tmp_path), QWEN4)
    # By name (mlx-community publishes "...-DRAFT" repos), by config (EAGLE3's draft vocab).
    cache_model(hub(tmp_path), "mlx-community/Qwen3-0.6B-4bit",
                as_id="mlx-community/Qwen3-0.6B-4bit-DRAFT")
    cfg, _ = spec_of("mlx-community/Qwen3-0.6B-4bit")
    cache_model(hub(tmp_path), "mlx-community/Qwen3-0.6B-4bit", as_id="someone/Qwen3-0.6B-head",
                config={**cfg, "draft_vocab_size": 32000})
    make_hf_cache(hub(tmp_path), "someone/qwen3-lora", {
        "adapter_config.json": b'{"fine_tune_type": "lora"}',
        "adapters.safetensors": {"x.lora_a": ("BF16", [8, 8])},
    }, commit="a" * 40)
    p = pick(8192, machine=M4PRO)
    assert [c.model for c in p.candidates] == [QWEN4]
    kinds = {s.model: s.kind for s in p.skipped}
    assert kinds == {"mlx-community/Qwen3-0.6B-4bit-DRAFT": "drafter",
                     "someone/Qwen3-0.6B-head": "drafter", "someone/qwen3-lora": "adapter"}
    assert p.warnings == ()  # not broken: nothing to warn about


def test_detectors():
    assert drafter_reason("mlx-community/Qwen2.5-0.5B-Instruct-DRAFT", None)
    assert drafter_reason("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", None)
    assert drafter_reason("x/y", {"architectures": ["LlamaForCausalLMEagle3"]})
    assert drafter_reason("x/y", {"model_type": "medusa"})
    assert drafter_reason("mlx-community/Qwen3-8B-4bit", {"model_type": "qwen3",
                                                         "architectures": ["Qwen3ForCausalLM"]}) is None
    assert drafter_reason("x/Eagleton-7B", None) is None  # a word, not the EAGLE head
    assert adapter_reason(["adapter_config.json", "adapter_model.safetensors"])
    assert adapter_reason(["config.json", "model.safetensors"]) is None
    assert missing_numbered_shards(["model-00001-of-00003.safetensors",
                                    "model-00003-of-00003.safetensors"]) == [
        "model-00002-of-00003.safetensors"]
    assert missing_numbered_shards(["model.safetensors"]) == []
    assert missing_numbered_shards(["model-1-of-2.safetensors"]) == ["model-2-of-2.safetensors"]


def test_not_a_model_repos_are_listed_not_warned(tmp_path):
    cache_model(hub(tmp_path), QWEN4)
    cfg, _ = spec_of(QWEN8)
    make_hf_cache(hub(tmp_path), "Qwen/Qwen3-8B", {"config.json": json.dumps(cfg).encode()},
                  commit="b" * 40)  # AutoConfig fetched only config.json
    make_hf_cache(hub(tmp_path), "bartowski/Qwen3-8B-GGUF", {
        "config.json": json.dumps(cfg).encode(), "Qwen3-8B-Q4_K_M.gguf": b"GGUF"},
        commit="c" * 40)
    make_hf_cache(hub(tmp_path), "org/tokenizer-only", {"tokenizer.json": b"{}"}, commit="d" * 40)
    (hub(tmp_path) / "datasets--org--data").mkdir()  # not a model repo: ignored
    (hub(tmp_path) / ".locks").mkdir()
    p = pick(8192, machine=M4PRO)
    assert [c.model for c in p.candidates] == [QWEN4] and p.warnings == ()
    reasons = {s.model: (s.kind, s.reason) for s in p.skipped}
    assert reasons["Qwen/Qwen3-8B"] == (
        "not-a-model", "no model*.safetensors: weights not downloaded (config.json only)")
    assert "Qwen3-8B-Q4_K_M.gguf" in reasons["bartowski/Qwen3-8B-GGUF"][1]
    assert reasons["org/tokenizer-only"][0] == "not-a-model"
    assert set(reasons) == {"Qwen/Qwen3-8B", "bartowski/Qwen3-8B-GGUF", "org/tokenizer-only"}


def test_any_revision_main_first_then_newest(tmp_path):
    """refs/main names the snapshot used; a repo whose main snapshot is broken falls back to
    an older complete one, and says so."""
    old = cache_model(hub(tmp_path), QWEN4, commit="1" * 40, refs=("v1",))
    new = cache_model(hub(tmp_path), QWEN4, commit="2" * 40, refs=("main",))
    p = pick(8192, machine=M4PRO)
    assert p.candidates[0].revision == "2" * 40
    (new / "model-00002-of-00002.safetensors").unlink()  # main is now half-downloaded
    p = pick(8192, machine=M4PRO)
    c = p.candidates[0]
    assert c.revision == "1" * 40 and c.location == str(old)
    assert any("revision 222222222222 skipped" in n and "missing" in n for n in c.notes)
    assert p.warnings == ()


# ---------------------------------------------------------------------------------------------
# Bad input: never abort the whole pick
# ---------------------------------------------------------------------------------------------


def test_empty_and_missing_cache(tmp_path):
    p = pick(8192, machine=M4PRO)  # HF_HUB_CACHE points at a folder that does not exist
    assert (p.chosen, p.candidates, p.skipped) == (None, (), ())
    assert "no loadable MLX model" in p.reason and str(hub(tmp_path)) in p.reason
    assert any("no Hugging Face cache at" in n for n in p.notes)
    hub(tmp_path).mkdir()
    p = pick(8192, machine=M4PRO)
    assert p.chosen is None and not any("no Hugging Face cache" in n for n in p.notes)


def test_cache_path_that_is_a_file_is_a_warning(tmp_path):
    hub(tmp_path).write_text("not a folder")
    p = pick(8192, machine=M4PRO)
    assert p.chosen is None
    assert len(p.warnings) == 1 and "cannot read the Hugging Face cache" in p.warnings[0]


def test_broken_symlinks_in_snapshots(tmp_path):
    cache_model(hub(tmp_path), QWEN4)
    snap = cache_model(hub(tmp_path), QWEN8)
    (snap / "config.json").resolve().unlink()  # blob gone: config.json dangles
    snap30 = cache_model(hub(tmp_path), QWEN30)
    (snap30 / "model-00001-of-00002.safetensors").resolve().unlink()  # a shard dangles
    p = pick(8192, machine=M4PRO)
    assert [c.model for c in p.candidates] == [QWEN4] and p.chosen == QWEN4
    reasons = {s.model: s.reason for s in p.skipped}
    assert "broken symlink" in reasons[QWEN8] and "config.json" in reasons[QWEN8]
    assert "broken symlink" in reasons[QWEN30]
    assert len(p.warnings) == 2 and all(w.startswith("skipped ") for w in p.warnings)


def test_half_downloaded_model(tmp_path):
    cache_model(hub(tmp_path), QWEN4)
    snap = cache_model(hub(tmp_path), QWEN8, shards=3)
    (snap / "model-00002-of-00003.safetensors").unlink()  # as an interrupted download leaves it
    snap30 = cache_model(hub(tmp_path), QWEN30, shards=3, index=False)
    (snap30 / "model-00003-of-00003.safetensors").unlink()  # and without an index
    p = pick(8192, machine=M4PRO, default_model=QWEN8)
    assert p.chosen == QWEN4  # the default is not usable: the largest within budget
    assert p.reason.startswith(f"the default model {QWEN8} is in the cache but skipped (broken)")
    reasons = {s.model: s.reason for s in p.skipped}
    assert "missing shard model-00002-of-00003.safetensors" in reasons[QWEN8]
    assert reasons[QWEN30] == "half-downloaded: model-00003-of-00003.safetensors missing"


def test_corrupted_header_in_one_of_many(tmp_path):
    for rid in (QWEN8, QWEN30, QWEN4, "mlx-community/Qwen3-4B-Instruct-2507-8bit"):
        cache_model(hub(tmp_path), rid)
    blob = (hub(tmp_path) / "models--mlx-community--Qwen3-8B-4bit" / "snapshots" /
            commit_of(QWEN8) / "model-00002-of-00002.safetensors").resolve()
    with open(blob, "r+b") as f:  # the JSON header is no longer JSON
        f.seek(8)
        f.write(b"\xff\xfe garbage!")
    p = pick(8192, machine=M4PRO)
    assert len(p.candidates) == 3 and QWEN8 not in by_model(p)
    assert p.chosen == "mlx-community/Qwen3-4B-Instruct-2507-8bit"  # 4.27 GB < 15.46 budget
    assert len(p.warnings) == 1 and p.warnings[0].startswith(f"skipped {QWEN8}@")
    assert "model-00002-of-00002.safetensors" in p.warnings[0]


def test_truncated_header_and_garbled_config(tmp_path):
    cache_model(hub(tmp_path), QWEN4)
    snap = cache_model(hub(tmp_path), QWEN8, shards=1)
    blob = (snap / "model.safetensors").resolve()
    with open(blob, "r+b") as f:
        f.write(struct.pack("<Q", 10**12))  # declares a 1 TB header
    snap30 = cache_model(hub(tmp_path), QWEN30)
    cfg_blob = (snap30 / "config.json").resolve()
    cfg_blob.write_text("{not json")
    p = pick(8192, machine=M4PRO)
    assert [c.model for c in p.candidates] == [QWEN4]
    reasons = {s.model: s.reason for s in p.skipped}
    assert "invalid JSON" in reasons[QWEN30]
    assert "its header length exceeds" in reasons[QWEN8]


def test_snapshot_symlink_loop_is_skipped(tmp_path):
    """A real OSError even for root (ELOOP): the repo is skipped, the pick goes on."""
    cache_model(hub(tmp_path), QWEN4)
    repo = hub(tmp_path) / "models--org--loop"
    repo.mkdir(parents=True)
    (repo / "snapshots").symlink_to(repo / "snapshots")
    p = pick(8192, machine=M4PRO)
    assert p.chosen == QWEN4
    assert any(w.startswith("skipped org/loop") and "cannot list its snapshots" in w
               for w in p.warnings)


def _as_unprivileged(fn):
    """Run fn() where file permissions bite: in a forked child that drops root, if we are root
    (root reads a mode-000 folder), else in-process. Returns fn()'s JSON-able result."""
    if os.geteuid() != 0:
        return fn()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        code = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            out = json.dumps({"ok": fn()})
        except BaseException as e:  # noqa: BLE001 - report anything to the parent
            out, code = json.dumps({"error": f"{type(e).__name__}: {e}"}), 1
        os.write(w, out.encode())
        os._exit(code)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    got = json.loads(b"".join(chunks))
    assert "ok" in got, got.get("error")
    return got["ok"]


@pytest.fixture
def shared_dir():
    """A folder an unprivileged child can traverse (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="mlxfit-pick-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d)


def test_unreadable_repo_and_unreadable_cache(shared_dir, monkeypatch):
    cache = shared_dir / "hub"
    cache_model(cache, QWEN4)
    cache_model(cache, QWEN8)
    for p in [cache, *cache.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
        elif p.is_file() and not p.is_symlink():
            p.chmod(0o644)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(shared_dir / "home"))  # absent: built-in settings
    (cache / "models--mlx-community--Qwen3-8B-4bit").chmod(0o000)

    def run():
        return pick_to_json(pick(8192, machine=M4PRO))

    d = _as_unprivileged(run)
    assert d["chosen"] == QWEN4  # the unreadable default is skipped, not fatal
    assert any(w.startswith(f"skipped {QWEN8}") and "Permission denied" in w
               for w in d["warnings"]), d["warnings"]

    cache.chmod(0o000)
    d = _as_unprivileged(run)
    assert d["chosen"] is None and d["candidates"] == []
    assert any("cannot read the Hugging Face cache" in w and "Permission denied" in w
               for w in d["warnings"]), d["warnings"]


def test_unknown_chip_lists_nearest_names(tmp_path):
    with pytest.raises(MachineError, match="nearest: M4 Pro"):
        pick(8192, machine="M4 Proo 24GB")
    r = runner.invoke(app, ["pick", "--machine", "M9 Ultra 64GB"])
    assert r.exit_code == 2
    assert "unknown chip 'M9 Ultra'" in r.stderr and "nearest:" in r.stderr


# ---------------------------------------------------------------------------------------------
# --catalog
# ---------------------------------------------------------------------------------------------


def test_catalog_ranks_not_downloaded_variants(tmp_path):
    cache_model(hub(tmp_path), QWEN8)
    p = pick(8192, machine=M4PRO, catalog=True)
    assert p.catalog is not None
    ids = [c.model for c in p.catalog]
    assert QWEN8 not in ids and len(ids) == len(set(ids)) >= 13  # the downloaded one is above
    assert all(c.source_kind == "catalog" and not c.chosen for c in p.catalog)
    # One row per quant variant: the Qwen3-4B-Instruct-2507 family shows all three.
    quants = {c.model: c.quant for c in p.catalog}
    assert quants[QWEN4] == "4-bit"
    assert quants["mlx-community/Qwen3-4B-Instruct-2507-8bit"] == "8-bit"
    assert quants["mlx-community/Qwen3-4B-Instruct-2507-bf16"] == "bf16"
    # Ranked: every row that fits outright first, largest first, then the tight ones
    # (issue 27); then the rest, closest to fitting first.
    fits = [c for c in p.catalog if c.verdict == "fits"]
    tight = [c for c in p.catalog if c.verdict == "tight"]
    rest = [c for c in p.catalog if not c.runs]
    assert p.catalog == tuple(fits + tight + rest) and fits and rest
    for group in (fits, tight):
        assert [c.weights_bytes for c in group] == sorted(
            (c.weights_bytes for c in group), reverse=True)
    assert [c.total_bytes for c in rest] == sorted(c.total_bytes for c in rest)
    assert all(c.total_bytes <= p.usable_bytes for c in fits)
    # over the memory, or an array over the GPU's buffer, or past its context limit (Phi-3 4k)
    assert all(c.total_bytes > p.usable_bytes or (c.fits and not c.runs)
               or c.result.beyond_context for c in rest)
    assert any(c.result.beyond_context and not c.fits for c in rest)
    # The choice is among downloaded models only.
    assert p.chosen == QWEN8


def test_catalog_off_by_default():
    assert pick(8192, machine=M4PRO).catalog is None


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_cli_json_is_the_twin(tmp_path):
    cache_model(hub(tmp_path), QWEN30)
    cache_model(hub(tmp_path), QWEN4)
    r = runner.invoke(app, ["pick", "--machine", M4PRO, "--json", "--catalog"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d == pick_to_json(pick(8192, machine=M4PRO, catalog=True))
    assert d["chosen"] == QWEN4 and d["rule"] == "coexist"
    assert [c["model"] for c in d["candidates"]] == [QWEN30, QWEN4]
    c30 = d["candidates"][0]
    assert (c30["chosen"], c30["budget"], c30["budget_bytes"]) == (False, "coexist",
                                                                   d["coexist_bytes"])
    assert c30["total_bytes"] > d["coexist_bytes"] and "over the coexist budget" in c30["reason"]


def test_cli_table_explains_every_candidate(tmp_path):
    cache_model(hub(tmp_path), QWEN30)
    cache_model(hub(tmp_path), QWEN4)
    cache_model(hub(tmp_path), "mlx-community/Qwen3-0.6B-4bit",
                as_id="mlx-community/Qwen3-0.6B-4bit-DRAFT")
    r = runner.invoke(app, ["pick", "--machine", M4PRO, "--ctx", "4096"], terminal_width=200)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert f"at 4,096 tokens: {QWEN4}" in out
    big = pick(4096, machine=M4PRO).candidates[0]
    assert big.model == QWEN30 and 15.47e9 < big.total_bytes < 19.59e9
    assert ("1. passed over (budget: coexist 15.46 GB): over the coexist budget: needs "
            f"{big.total_bytes / 1e9:.2f} GB > 15.46 GB; fits the usable 19.60 GB, but an "
            "auto-pick leaves room for other apps") in out
    assert "2. chosen (budget: coexist 15.46 GB): the largest that fits the coexist budget" in out
    assert f"Qwen3-0.6B-4bit-DRAFT@{commit_of('mlx-community/Qwen3-0.6B-4bit-DRAFT')[:12]} " \
        "(drafter): a speculative-decoding drafter" in out


def test_cli_exit_1_when_nothing_fits(tmp_path):
    cache_model(hub(tmp_path), QWEN30)
    r = runner.invoke(app, ["pick", "--machine", "M1 8GB"])
    assert r.exit_code == 1
    assert "nothing" in r.stdout and "none of the 1 downloaded models fits" in r.stdout


def test_cli_bad_settings_is_exit_2(tmp_path, isolated_home):
    cfg = isolated_home / ".config" / "mlxfit" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("[pick]\ncoexist_fraction = 2\n")
    r = runner.invoke(app, ["pick", "--machine", M4PRO])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert str(cfg) in r.stderr


def test_cli_empty_cache_is_exit_1_not_a_crash(tmp_path):
    r = runner.invoke(app, ["pick", "--machine", M4PRO])
    assert r.exit_code == 1 and "no downloaded candidate" in r.stdout


def test_write_sparse_helper_is_real_safetensors(tmp_path):
    """Guard for the fixtures above: the sparse blobs parse with the safetensors library."""
    from safetensors import safe_open

    p = write_sparse(tmp_path / "x.safetensors", {"a": ("BF16", [4, 4]), "b": ("U32", [2])})
    with safe_open(str(p), framework="numpy") as f:
        assert sorted(f.keys()) == ["a", "b"]


def test_model_warnings_reach_the_candidate_not_machine_ones(tmp_path):
    """An unknown model_type is sized as a plain transformer, with a warning on that candidate;
    the probe's 'no bandwidth' (this Linux box) is not repeated per candidate."""
    cfg, _ = spec_of(QWEN4)
    cache_model(hub(tmp_path), QWEN4, as_id="someone/odd-model",
                config={**cfg, "model_type": "qwen3_future"})
    p = pick(8192)  # probes this machine: not Apple Silicon, no bandwidth
    (c,) = p.candidates
    assert any("unknown model_type 'qwen3_future'" in w for w in c.warnings)
    assert not any("bandwidth" in w for w in c.warnings)
    assert c.predicted_decode_tps is None
    r = runner.invoke(app, ["pick", "--machine", M4PRO], terminal_width=200)
    assert "warning: unknown model_type 'qwen3_future'" in r.stdout


def test_unreadable_config_folder_is_one_clear_error(shared_dir, monkeypatch):
    """~/.config/mlxfit that cannot be entered: an error naming the file, not a traceback."""
    home = shared_dir / "home"
    (home / ".config" / "mlxfit").mkdir(parents=True)
    (home / ".config" / "mlxfit" / "config.toml").write_text("[pick]\n")
    (home / ".config").chmod(0o755)
    (home / ".config" / "mlxfit").chmod(0o000)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(shared_dir / "hub"))

    def run():
        try:
            pick(8192, machine=M4PRO)
        except UsageError as e:
            return str(e)
        return "no error"

    msg = _as_unprivileged(run)
    assert msg.startswith("cannot read ") and "config.toml" in msg and "Permission denied" in msg


# --------------------------------------------------------------------------- --plan


def test_pick_plan_marks_an_unknown_family_unverified(tmp_path):
    """--plan auto (the default) on a model_type neither the table nor mlx-lm knows: the
    plain-transformer estimate, flagged on the candidate in the JSON (with mlx-lm installed,
    after the oracle failed: a warning says it fell back)."""
    cfg, _ = spec_of(QWEN4)
    cache_model(hub(tmp_path), QWEN4, as_id="someone/odd-model",
                config={**cfg, "model_type": "qwen3_future"})
    (c,) = pick_to_json(pick(8192, machine=M4PRO))["candidates"]
    assert (c["family_known"], c["plan_source"]) == (False, "plain transformer (unverified)")
    table = pick_to_json(pick(8192, machine=M4PRO, plan="table"))["candidates"][0]
    assert table["total_bytes"] == c["total_bytes"]


def test_pick_plan_is_checked_first(tmp_path):
    r = runner.invoke(app, ["pick", "--machine", M4PRO, "--plan", "guess"])
    assert r.exit_code == 2 and "--plan must be one of" in r.stderr


@pytest.mark.skipif(MLX_MISSING is not None, reason=f"mlx/mlx-lm not importable ({MLX_MISSING})")
def test_pick_plan_mlx_lm_cross_checks_each_candidate(tmp_path):
    """--plan mlx-lm: each downloaded model's table plan is checked against mlx-lm's own caches
    (here Kimi-Linear's MLA + KDA layout): the candidate says so, its plan is mlx-lm's, and its
    KV and state bytes are the table's (they agree)."""
    cfg = json.loads((Path(__file__).parent / "fixtures" / "families"
                      / "kimi_linear.json").read_text())
    make_hf_cache(hub(tmp_path), "someone/kimi-tiny", {
        "config.json": json.dumps(cfg).encode(),
        "model.safetensors": {"model.embed_tokens.weight": ("BF16", [cfg["vocab_size"],
                                                                    cfg["hidden_size"]])}},
        commit=commit_of("someone/kimi-tiny"))
    derived = pick(3000, machine=M4PRO, plan="mlx-lm").candidates[0]
    tabled = pick(3000, machine=M4PRO, plan="table").candidates[0]
    got, table = candidate_to_json(derived), candidate_to_json(tabled)
    assert got["plan_source"].startswith("mlx-lm ") and table["plan_source"] == "table"
    assert any(n.startswith("cross-checked: the family table matches") for n in got["notes"])
    assert (derived.result.kv_bytes, derived.result.state_bytes) == (
        tabled.result.kv_bytes, tabled.result.state_bytes)


# ---------------------------------------------------------------------------------------------
# ux-3 F18: GGUF repos named as such; a half-download of a catalog model still answers
# ---------------------------------------------------------------------------------------------


def test_gguf_only_repo_is_named_as_llama_cpp_format(tmp_path):
    make_hf_cache(hub(tmp_path), "bartowski/Qwen3-8B-GGUF",
                  {"Qwen3-8B-Q4_K_M.gguf": b"GGUF"}, commit="c" * 40)
    r = invoke("fit", "bartowski/Qwen3-8B-GGUF", "--machine", M4PRO)
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "\n" not in line and "GGUF" in line and "llama.cpp" in line and "MLX" in line
    p = pick(8192, machine=M4PRO)
    (s,) = p.skipped
    assert s.kind == "not-a-model" and "GGUF" in s.reason


def test_half_downloaded_catalog_model_is_sized_from_the_catalog(tmp_path):
    snap = cache_model(hub(tmp_path), QWEN8, shards=3)
    (snap / "model-00002-of-00003.safetensors").unlink()
    r = invoke("fit", QWEN8, "--machine", M4PRO, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["source"] == "catalog"
    assert any("half-downloaded" in n and "catalog" in n for n in d["notes"]), d["notes"]
    full = json.loads(invoke("fit", QWEN8, "--machine", M4PRO, "--json",
                             env={"HF_HUB_CACHE": str(tmp_path / "empty")}).stdout)
    assert d["total_bytes"] == full["total_bytes"]


def test_half_download_outside_the_catalog_says_how_many_are_missing(tmp_path):
    snap = cache_model(hub(tmp_path), QWEN8, as_id="someone/own-model", shards=3)
    (snap / "model-00002-of-00003.safetensors").unlink()
    r = invoke("fit", "someone/own-model", "--machine", M4PRO)
    assert r.exit_code == 2
    assert "(1 of 3 missing: half-downloaded?)" in r.stderr, r.stderr
