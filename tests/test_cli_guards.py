"""What the CLI tells a user so a run is not misread (issue 14): flags mlx-lm would ignore,
mlx-lm's flags beside mlxfit's, the prompt the command needs, download size, --with-vision
without a tower. Through the CLI."""

from __future__ import annotations

import json

import pytest
from st_helpers import ON_M4PRO, config_dict, invoke, make_folder

MISTRAL = "mlx-community/Mistral-7B-Instruct-v0.3-4bit"  # llama family: its own make_cache()
Q8B = "mlx-community/Qwen3-8B-4bit"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


def _json(*args: str) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_ignored_max_kv_size_is_said_and_left_out_of_the_command():
    """mlx-lm 0.32's make_prompt_cache returns model.make_cache() without max_kv_size."""
    args = ("fit", MISTRAL, "--ctx", "16384", *ON_M4PRO)
    plain = _json(*args)
    d = _json(*args, "--max-kv-size", "4096")
    assert d["total_bytes"] == plain["total_bytes"] and d["run"]["max_kv_size"] is None
    assert "--max-kv-size" not in d["command"] and d["command"] == plain["command"]
    (w,) = [w for w in d["warnings"] if "--max-kv-size" in w]
    assert w.startswith("--max-kv-size 4096 is ignored by mlx-lm for this model")
    r = invoke(*args, "--max-kv-size", "4096")
    assert f"warning: {w}" in r.stdout.splitlines()


def test_honoured_max_kv_size_stays_in_the_command():
    d = _json("fit", Q8B, "--ctx", "16384", *ON_M4PRO, "--max-kv-size", "4096")
    assert d["run"]["max_kv_size"] == 4096 and "--max-kv-size 4096" in d["command"]
    assert not any("--max-kv-size" in w for w in d["warnings"])


def test_advice_names_mlx_lm_flags_and_mlxfit_flags():
    # --prompt-cache 10 asked for: without it fit plans the cached prompts that fit (issue 28)
    asked = ("--parallel", "8", "--prompt-cache", "10", "--ctx", "32k")
    r = invoke("fit", Q8B, *asked, *ON_M4PRO)
    assert r.exit_code == 1
    d = _json("fit", Q8B, *asked, *ON_M4PRO)
    changes = [c for o in d["advice"]["options"] for c in o["changes"]]
    cache = next(c for c in changes if c["kind"] == "prompt_cache")
    assert cache["label"].startswith("--prompt-cache-size ") and \
        cache["mlxfit"] == "--prompt-cache " + cache["label"].split()[-1]
    ctx = next(c for c in changes if c["kind"] == "context")
    assert ctx["mlxfit"].startswith("--ctx ") and "--ctx" not in ctx["label"]
    assert f"re-check with mlxfit: {cache['mlxfit']}" in r.stdout
    # The re-check flag is one mlxfit takes: pasting it back works.
    again = invoke("fit", Q8B, "--parallel", "8", "--ctx", "32k", *ON_M4PRO,
                   *cache["mlxfit"].split())  # the re-check flag replaces --prompt-cache 10
    assert again.exit_code in (0, 1), again.output


def test_command_carries_gen_and_says_what_the_prompt_holds():
    r = invoke("fit", Q8B, "--ctx", "32k", "--gen", "512", *ON_M4PRO)
    lines = r.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("mlx-lm: "))
    assert "--max-tokens 512 " in lines[i]
    assert lines[i + 1] == ("  prompt.txt: the 32,256-token prompt this run was sized for; "
                            "--max-tokens is your --gen (512, at least 1)")


def _vlm_folder(tmp_path, with_tower: bool):
    cfg = config_dict("Qwen__Qwen3-0.6B")
    spec = {"model.embed_tokens.weight": ("BF16", [151936, 1024]),
            "lm_head.weight": ("BF16", [151936, 1024])}
    if with_tower:
        spec["vision_tower.patch_embed.weight"] = ("BF16", [1024, 1024, 4])
    return make_folder(tmp_path / ("vlm" if with_tower else "txt"), cfg,
                       {"model.safetensors": spec}), spec


def test_download_size_beside_the_weights(tmp_path):
    folder, _ = _vlm_folder(tmp_path, with_tower=True)
    d = _json("fit", str(folder), *ON_M4PRO, "--ctx", "1024")
    on_disk = (folder / "model.safetensors").stat().st_size
    assert d["weights"]["download_bytes"] == on_disk > d["weights_bytes"]
    assert d["weights"]["vision_bytes"] == 1024 * 1024 * 4 * 2
    r = invoke("fit", str(folder), *ON_M4PRO, "--ctx", "1024")
    assert f"download {on_disk / 1e9:,.2f} GB" in r.stdout
    cat = _json("fit", Q8B, *ON_M4PRO)["weights"]  # the catalog: its tensors, a lower bound
    assert cat["download_at_least"] is True and d["weights"]["download_at_least"] is False


def test_with_vision_says_when_there_is_no_tower(tmp_path):
    folder, _ = _vlm_folder(tmp_path, with_tower=False)
    d = _json("fit", str(folder), *ON_M4PRO, "--ctx", "1024", "--with-vision")
    assert "--with-vision: no vision/audio tower to count: its safetensors hold no " \
        "vision/audio tensors" in d["notes"]
    d = _json("fit", "mlx-community/gemma-3-12b-it-4bit", *ON_M4PRO, "--with-vision")
    assert any(n.startswith("--with-vision: no vision/audio tower to count: this catalog "
                            "descriptor") for n in d["notes"])
    folder, _ = _vlm_folder(tmp_path, with_tower=True)
    d = _json("fit", str(folder), *ON_M4PRO, "--ctx", "1024", "--with-vision")
    assert not any("--with-vision" in n for n in d["notes"])


def test_cluster_write_refuses_a_plan_that_does_not_fit(tmp_path):
    out = tmp_path / "launch"
    args = ("cluster", "mlx-community/Kimi-K2-Instruct-4bit", "--host", "M3 Ultra 512GB",
            "--host", "M4 Max 128GB", "--write", str(out))
    r = invoke(*args)
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.splitlines() == [
        ("mlxfit: error: --write: nothing written: the pipeline plan does not fit at 8,192 "
        "tokens; a launch script for it would run out of memory (--force writes it anyway)")]
    r = invoke(*args, "--force")
    assert r.exit_code == 1  # written, and still does not fit
    assert {p.name for p in out.iterdir()} >= {"run.sh", "hostfile.json", "plan.json"}
    assert "DOES NOT FIT" in (out / "run.sh").read_text()


# --------------------------------------------------------------------------- charts


def test_chart_equals_sign_and_unwritable_path(tmp_path):
    out = tmp_path / "c.svg"
    r = invoke("fit", Q8B, *ON_M4PRO, "--ctx", "32k", f"--chart={out}")
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("<svg ") and f"chart written to {out}" in r.stdout
    (tmp_path / "d.svg").mkdir()
    for bad in (tmp_path / "no" / "such" / "c.svg", tmp_path / "d.svg"):
        r = invoke("fit", Q8B, *ON_M4PRO, "--chart", str(bad))
        assert r.exit_code == 2 and r.stdout == ""
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"mlxfit: error: --chart {bad}: cannot write it: ")


def test_terminal_and_svg_share_their_axes(tmp_path):
    """The same context labels (256, 1K, 4K, ...) and y ticks in both; the SVG draws the
    largest safe context as a line, like the PNG; labels stay inside the frame."""
    import re

    out = tmp_path / "c.svg"
    assert invoke("fit", Q8B, *ON_M4PRO, "--ctx", "32k", "--chart", str(out)).exit_code == 0
    text = invoke("fit", Q8B, *ON_M4PRO, "--ctx", "32k", "--chart").stdout
    svg = out.read_text()
    labels = re.findall(r'text-anchor="middle">([0-9]+K?)</text>', svg)
    tick_line = next(ln for ln in text.splitlines() if ln.rstrip().endswith("tokens (log)"))
    assert tick_line.split()[:-2] == labels and labels[:3] == ["256", "512", "1K"]
    ylabels = [ln.split("│")[0].strip() for ln in text.splitlines() if "│" in ln]
    svg_y = re.findall(r'text-anchor="end">([0-9.]+)</text>', svg)
    # Round ticks (0, 5, ..., 25 GB): the SVG's are the terminal's.
    assert set(svg_y) <= {v for v in ylabels if v} and "25" in svg_y
    assert "usable 19.60" in text
    safe = _json("fit", Q8B, *ON_M4PRO, "--ctx", "32k")["max_safe_context"]
    assert f"largest safe {safe:,}</text>" in svg and 'stroke="#2ca02c" stroke-dasharray' in svg
    width = int(re.search(r'<svg [^>]*width="([0-9]+)"', svg).group(1))
    xs = [float(v) for v in re.findall(r'<text x="([0-9.]+)"', svg)]
    assert all(0 <= v <= width for v in xs)


def test_machine_named_is_not_said_to_be_probed():
    r = invoke("machine", "M4 Pro 24GB")
    assert r.exit_code == 0 and "probed from" not in r.stdout
    assert "where each figure came from" in r.stdout and "--machine 'M4 Pro 24GB'" in r.stdout
