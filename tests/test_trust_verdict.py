"""A verdict never contradicts itself (issue 13, class 9): a run past the model's context
limit does not fit (exit 1, "fits": false, the reason in the headline and the JSON), matrix
counts no SKU as running it, pick prefers a model that holds the context; --chart to a path
that cannot be written is one line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from st_helpers import M4PRO, invoke, make_folder, make_hf_cache

TINY = {"model.embed_tokens.weight": ("BF16", [64, 32]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 64])}
BIGGER = {"model.embed_tokens.weight": ("BF16", [64, 32]),
          "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 4096])}


def config(max_pos: int) -> dict:
    return {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
            "intermediate_size": 64, "max_position_embeddings": max_pos,
            # the rest of what mlx-lm's qwen3 ModelArgs requires
            "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
            "rope_theta": 1e6}


def test_fit_past_the_context_limit_does_not_fit(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m4k", config(4096), {"model.safetensors": TINY})
    r = invoke("fit", str(folder), "--ctx", "32768", "--machine", M4PRO)
    assert r.exit_code == 1, r.output
    head = " ".join(" ".join(r.output.splitlines()[:2]).split())  # Rich wraps at 80 columns
    # Memory is not why (issue 28): the headline says it fits in memory, and what is past.
    assert "FITS IN MEMORY" in head and "past the model's trained context of 4,096" in head
    j = invoke("fit", str(folder), "--ctx", "32768", "--machine", M4PRO, "--json")
    doc = json.loads(j.stdout)
    assert j.exit_code == 1 and doc["fits"] is False and doc["beyond_context_limit"] is True
    # the speed is shown beside the warning (issue 28), the safe context stays the limit
    assert doc["predicted_decode_tps"] is not None and doc["max_safe_context"] == 4096
    assert any("context limit" in p for p in doc["problems"])
    # At the limit it fits, and says nothing of the kind.
    ok = json.loads(invoke("fit", str(folder), "--ctx", "4096", "--machine", M4PRO,
                           "--json").stdout)
    assert ok["fits"] is True and ok["problems"] == [] and not ok["beyond_context_limit"]


def test_matrix_counts_no_sku_past_the_limit(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m4k", config(4096), {"model.safetensors": TINY})
    doc = json.loads(invoke("matrix", str(folder), "--ctx", "32768", "--json").stdout)
    assert doc["fits_count"] == 0 and not any(r["runs"] or r["fits"] for r in doc["rows"])
    doc = json.loads(invoke("matrix", str(folder), "--ctx", "4096", "--json").stdout)
    assert doc["fits_count"] == len(doc["rows"]) > 0


def test_pick_prefers_a_model_that_holds_the_context(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    make_hf_cache(cache, "acme/big-4k", {"config.json": json.dumps(config(4096)).encode(),
                                         "model.safetensors": BIGGER}, commit="a" * 40)
    make_hf_cache(cache, "acme/small-64k", {"config.json": json.dumps(config(65536)).encode(),
                                            "model.safetensors": TINY}, commit="b" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    doc = json.loads(invoke("pick", "--machine", M4PRO, "--ctx", "8192", "--json").stdout)
    assert doc["chosen"] == "acme/small-64k", doc
    big = next(c for c in doc["candidates"] if c["model"] == "acme/big-4k")
    assert not big["fits"] and "beyond its context limit" in big["reason"]
    # Within both limits the larger one wins, as before.
    doc = json.loads(invoke("pick", "--machine", M4PRO, "--ctx", "4096", "--json").stdout)
    assert doc["chosen"] == "acme/big-4k"


@pytest.mark.parametrize("where", ["missing/dir/c.svg", "ro/c.svg", "isdir.svg"])
def test_chart_to_an_unwritable_path(tmp_path: Path, where: str) -> None:
    folder = make_folder(tmp_path / "m", config(65536), {"model.safetensors": TINY})
    (tmp_path / "ro").mkdir()
    (tmp_path / "isdir.svg").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    target = tmp_path / where
    if where.startswith("ro/") and os.access(tmp_path / "ro", os.W_OK):
        target = Path("/proc/c.svg")  # root ignores 555; /proc refuses new files to anyone
    r = invoke("fit", str(folder), "--machine", M4PRO, "--chart", str(target))
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: --chart "), r.output
    assert "cannot write it" in lines[0]
