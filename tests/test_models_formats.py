"""`mlxfit models`, "did you mean", `--format` of matrix and pick, and pick's run flags
(issue 14), through the CLI."""

from __future__ import annotations

import csv
import io
import json

import pytest
from st_helpers import ON_M4PRO, cache_catalog_model, invoke

from mlxfit.sources.catalog import catalog_ids

Q8B = "mlx-community/Qwen3-8B-4bit"
Q4B = "mlx-community/Qwen3-4B-Instruct-2507-4bit"
Q30 = "mlx-community/Qwen3-30B-A3B-4bit"
M2PRO = "M2 Pro 32GB"


@pytest.fixture(autouse=True)
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def _json(*args: str, codes=(0, 1)) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code in codes, r.output
    return json.loads(r.stdout)


def _markdown_rows(text: str) -> list[list[str]]:
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows[2:]]


# --------------------------------------------------------------------------- models


def test_models_lists_the_catalog_and_the_cache(hub):
    cache_catalog_model(hub, Q4B)
    cache_catalog_model(hub, Q8B, as_id="acme/my-qwen")  # a cached model the catalog lacks
    d = _json("models", codes=(0,))
    assert d["schema_version"] == 2 and d["query"] is None
    ids = [m["model"] for m in d["models"]]
    # ux-3 F11: a cached catalog model is one row (the downloaded copy), not two
    assert d["total"] == len(ids) == len(catalog_ids()) + 1
    assert len(set(ids)) == len(ids)
    cached = [m for m in d["models"] if m["source"] == "hf-cache"]
    assert [m["model"] for m in cached] == ["acme/my-qwen", Q4B]  # downloaded first
    assert all(m["downloaded"] and len(m["revision"]) == 40 for m in cached)
    assert [m["in_catalog"] for m in cached] == [False, True]
    assert not any(m["downloaded"] for m in d["models"] if m["source"] == "catalog")
    text = invoke("models", Q4B).stdout
    rows = [ln for ln in text.splitlines() if ln.startswith(Q4B)]
    assert len(rows) == 1 and "cache, in catalog" in rows[0]
    my = cached[0]
    fit = _json("fit", Q8B, *ON_M4PRO)
    assert (my["family"], my["model_type"], my["quant"], my["weights_bytes"],
            my["context_limit"]) == ("qwen3", "qwen3", "4-bit", fit["weights_bytes"],
                                     fit["context_limit"])


def test_models_query_matches_every_word():
    d = _json("models", "QWEN3", "4-bit", codes=(0,))
    assert d["query"] == "QWEN3 4-bit" and len(d["models"]) >= 5
    for m in d["models"]:
        assert "qwen3" in (m["model"] + m["family"]).lower() and m["quant"] == "4-bit"
    r = invoke("models", "no-such-model-anywhere")
    assert r.exit_code == 0 and "0 of" in r.stdout and "nothing matches" in r.stdout


def test_models_query_matches_whole_words():
    # ux-3 F11: "8B" is Qwen3-8B's size, not the 8bit in "gemma-3-27b-it-8bit"
    ids = [m["model"] for m in _json("models", "8B", codes=(0,))["models"]]
    assert "mlx-community/Qwen3-8B-4bit" in ids
    assert not any(i.endswith("-8bit") and "-8B-" not in i for i in ids), ids
    three = [m["model"] for m in _json("models", "3b", codes=(0,))["models"]]
    assert "mlx-community/SmolLM3-3B-4bit" in three
    assert not any("A3B" in i or "30B" in i for i in three), three
    qwen = _json("models", "qwen", codes=(0,))["models"]  # a prefix of a name part still finds
    assert any(m["model"] == "mlx-community/Qwen3-8B-4bit" for m in qwen)


def test_models_context_of_a_config_that_leaves_the_default_out():
    # gemma-3-12b's text_config omits max_position_embeddings (transformers' default, 131072):
    # models and fit give the same limit, and fit no longer warns about the descriptor.
    (g,) = _json("models", "gemma-3-12b", codes=(0,))["models"]
    fit = _json("fit", "mlx-community/gemma-3-12b-it-4bit", *ON_M4PRO)
    assert g["context_limit"] == fit["context_limit"] == 131072
    assert not any("max_position_embeddings" in w for w in fit["warnings"])


def test_models_formats_agree():
    d = json.loads(invoke("models", "llama", "--format", "json").stdout)
    assert d["schema_version"] == 2 and d["models"]
    r = invoke("models", "llama", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [x["model"] for x in rows] == [m["model"] for m in d["models"]]
    assert [int(x["weights_bytes"]) for x in rows] == [m["weights_bytes"] for m in d["models"]]
    md = _markdown_rows(invoke("models", "llama", "--format", "markdown").stdout)
    assert [x[0] for x in md] == [m["model"] for m in d["models"]]
    assert [x[4] for x in md] == [f"{m['weights_bytes'] / 1e9:,.2f}" for m in d["models"]]


def test_bad_format_is_one_line():
    r = invoke("models", "--format", "yaml")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "mlxfit: error: --format must be table, markdown, csv or json, got 'yaml'"]


# --------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize("typo, want", [
    ("mlx-community/Qwen3-8B-4bt", "did you mean mlx-community/Qwen3-8B-4bit"),
    ("Qwen3-8B-4bit", "did you mean mlx-community/Qwen3-8B-4bit?"),  # no org
    ("someone-else/Qwen3-8B-4bit", "did you mean mlx-community/Qwen3-8B-4bit?"),
    ("acme/my-qwem", "did you mean acme/my-qwen?"),  # from the cache
])
def test_unknown_model_gets_did_you_mean(typo, want, hub):
    cache_catalog_model(hub, Q4B, as_id="acme/my-qwen")
    r = invoke("fit", typo, *ON_M4PRO)  # HF_HUB_OFFLINE=1 (conftest): nothing reaches the Hub
    assert r.exit_code == 2
    (line,) = r.stderr.splitlines()
    assert line.endswith(want) or f"; {want}" in line, line


def test_nothing_close_gets_no_guess():
    r = invoke("fit", "zzz/entirely-different", *ON_M4PRO)
    assert r.exit_code == 2 and "did you mean" not in r.stderr


# --------------------------------------------------------------------------- matrix --format


def test_matrix_markdown_and_csv_are_the_json():
    args = ("matrix", Q30, "--ctx", "32k", "--chips", "M4 Pro,M4 Max")
    d = _json(*args)
    md = invoke(*args, "--format", "markdown").stdout
    assert md.startswith(f"Which Macs run **{Q30}** at 32,768 tokens with mlx-lm")
    rows = _markdown_rows(md)
    assert len(rows) == len(d["rows"]) == d["skus_considered"]
    for cells, row in zip(rows, d["rows"]):
        assert cells[0] == row["name"]
        assert cells[2] == ("yes" if row["runs"] else "buffer" if row["fits"] else "no")
        assert cells[3] == f"{row['max_safe_context']:,}"
        tps = row["predicted_decode_tps"]
        assert cells[4] == (f"{tps:,.1f}" if row["runs"] and tps is not None else "")
    rows = list(csv.DictReader(io.StringIO(invoke(*args, "--format", "csv").stdout)))
    assert [x["name"] for x in rows] == [r["name"] for r in d["rows"]]
    assert [int(x["ram_bytes"]) for x in rows] == [r["machine"]["ram_bytes"] for r in d["rows"]]
    assert [int(x["max_safe_context"]) for x in rows] == [r["max_safe_context"]
                                                          for r in d["rows"]]


# --------------------------------------------------------------------------- pick


def test_pick_catalog_with_an_empty_cache_answers():
    r = invoke("pick", "--catalog", "--ctx", "32k", "--machine", M2PRO)
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"pick for {M2PRO} at 32,768 tokens: nothing downloaded; ")
    assert "catalog models run here" in first
    r = invoke("pick", "--ctx", "32k", "--machine", M2PRO)  # no catalog: no answer
    assert r.exit_code == 1


def test_pick_only_fits_and_formats():
    d = _json("pick", "--catalog", "--machine", M2PRO, "--ctx", "32k")
    o = _json("pick", "--catalog", "--machine", M2PRO, "--ctx", "32k", "--only-fits")
    assert o["only_fits"] is True
    assert [c["model"] for c in o["catalog"]] == [c["model"] for c in d["catalog"] if c["runs"]]
    assert len(o["catalog"]) < len(d["catalog"])
    md = invoke("pick", "--catalog", "--machine", M2PRO, "--ctx", "32k", "--only-fits",
                "--format", "markdown").stdout
    assert [x[0] for x in _markdown_rows(md)] == [c["model"] for c in o["catalog"]]


@pytest.mark.parametrize("flags", [["--kv-bits", "8"], ["--prefill-step-size", "512"],
                                   ["--max-kv-size", "4k"],
                                   ["--kv-bits", "4", "--quantized-kv-start", "0",
                                    "--kv-group-size", "32"]])
def test_pick_run_flags_are_fits(flags, hub):
    """pick sizes each candidate with the run fit would: the same totals as `fit` with the
    same flags."""
    cache_catalog_model(hub, Q8B)
    p = _json("pick", *ON_M4PRO, "--ctx", "16k", *flags)
    f = _json("fit", Q8B, *ON_M4PRO, "--ctx", "16k", *flags)
    (c,) = p["candidates"]
    assert p["run"] == f["run"]
    assert (c["total_bytes"], c["max_safe_context"], c["predicted_decode_tps"]) == (
        f["total_bytes"], f["max_safe_context"], f["predicted_decode_tps"])


def test_pick_reasons_name_each_candidate(hub):
    for rid in (Q8B, Q4B, Q30):
        cache_catalog_model(hub, rid)
    d = _json("pick", "--machine", "M4 Max 64GB", "--ctx", "32k", "--default-model", Q8B)
    assert d["chosen"] == Q8B and d["rule"] == "default"
    others = [c for c in d["candidates"] if not c["chosen"]]
    assert len(others) == 2
    for c in others:  # each reason gives that candidate's own peak
        assert f"{c['total_bytes'] / 1e9:,.2f} GB" in c["reason"], c["reason"]
    assert len({c["reason"] for c in others}) == 2
    r = invoke("pick", "--machine", "M4 Max 64GB", "--ctx", "32k", "--default-model", Q8B)
    n = next(i for i, c in enumerate(d["candidates"], 1) if c["chosen"])
    assert any(ln.startswith(f"> {n}") for ln in r.stdout.splitlines())
    assert f"  {n}. chosen" in r.stdout


def test_models_quants_lists_each_unquantized_entry_as_convert_would_write_it():
    """`models --quants`: an unquantized catalog entry gains one row per conversion, sized as
    `fit --q-bits/--quant-predicate/--q-mode` sizes it (one path), quantized entries none."""
    d = _json("models", "qwen3-8b", "--quants", "4,mixed_3_6,mxfp4")
    rows = {r["model"]: r for r in d["models"]}
    bf16 = "mlx-community/Qwen3-8B-bf16"
    assert rows[bf16]["convert_command"] is None
    flags = {"4bit": ("--q-bits", "4"), "mixed_3_6": ("--quant-predicate", "mixed_3_6"),
             "mxfp4": ("--q-mode", "mxfp4")}
    for label, fl in flags.items():
        row = rows[f"{bf16} as {label}"]
        assert row["quant"] == label and "mlx_lm.convert" in row["convert_command"]
        fit = _json("fit", bf16, *fl, *ON_M4PRO)
        assert row["weights_bytes"] == fit["weights_bytes"], label
    assert not any(k.startswith(f"{Q8B} as") for k in rows)  # already quantized: no conversion
    sizes = [rows[f"{bf16} as {lb}"]["weights_bytes"] for lb in ("mixed_3_6", "mxfp4", "4bit")]
    assert sizes == sorted(sizes) and sizes[-1] < rows[bf16]["weights_bytes"] / 3


def test_catalog_fit_says_how_much_to_download():
    # ux-3 F12: the download size is the pre-download question; the catalog knows the
    # tensors, so the answer is "at least" their bytes (headers and towers add to it).
    from mlxfit.sources.catalog import load_entry

    d = _json("fit", Q8B, *ON_M4PRO)
    w = d["weights"]
    e = load_entry(Q8B)
    assert w["download_bytes"] == sum(t.nbytes for t in e.tensors)
    assert w["download_at_least"] is True
    text = invoke("fit", Q8B, *ON_M4PRO).stdout
    assert f"download at least {w['download_bytes'] / 1e9:,.2f} GB" in text
