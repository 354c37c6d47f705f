"""Every file mlxfit writes goes through one writer, ``mlxfit.writefile`` (issue 29, class 1):
a temporary file beside the target, never a symbolic link or a FIFO written through, validated,
then moved over the target atomically. Tested with real links, FIFOs and child processes (a
write to a FIFO would block: each such case runs in a child under a timeout), and a real Hub
stand-in for the metadata cache. ``tests/test_layout.py`` checks that no other module opens a
file for writing."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import FakeHub
from st_helpers import make_folder, qwen_tiny

import mlxfit
from mlxfit.errors import MlxfitError, SourceError
from mlxfit.records import append_record
from mlxfit.sources.hub import fetch as mhub

SRC = Path(mlxfit.__file__).resolve().parent.parent  # the children run the code under test


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real CLI in a child: a write that blocks on a FIFO is a timeout, a failed test."""
    e = dict(os.environ, PYTHONPATH=str(SRC), HF_HUB_OFFLINE="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "mlxfit", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout, check=False)


def one_error_line(r: subprocess.CompletedProcess, *fragments: str) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln]
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: "), r.stderr[-2000:]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def qwen2_folder(root: Path, name: str = "m", layers: int = 4) -> Path:
    """A small dense qwen2 (mlx-lm can pipeline it) in bf16, sparse shards."""
    cfg = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": layers,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "vocab_size": 100, "max_position_embeddings": 4096, "tie_word_embeddings": False,
           "rms_norm_eps": 1e-6}
    spec = {"model.embed_tokens.weight": ("BF16", [100, 64]),
            "lm_head.weight": ("BF16", [100, 64]), "model.norm.weight": ("BF16", [64])}
    for i in range(layers):
        p = f"model.layers.{i}."
        spec.update({p + "self_attn.q_proj.weight": ("BF16", [64, 64]),
                     p + "self_attn.k_proj.weight": ("BF16", [32, 64]),
                     p + "self_attn.v_proj.weight": ("BF16", [32, 64]),
                     p + "self_attn.o_proj.weight": ("BF16", [64, 64]),
                     p + "mlp.gate_proj.weight": ("BF16", [128, 64]),
                     p + "mlp.up_proj.weight": ("BF16", [128, 64]),
                     p + "mlp.down_proj.weight": ("BF16", [64, 128])})
    return make_folder(root / name, cfg, {"model.safetensors": spec}, index=True)


# --------------------------------------------------------------------------- cluster --write


def test_cluster_write_never_follows_a_link_planted_in_the_directory(tmp_path: Path) -> None:
    """The audit's probe: run.sh in the --write directory is a link to another file; mlxfit
    wrote through it and chmod-ed the target 755."""
    folder = qwen2_folder(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    victim.chmod(0o644)
    (out / "run.sh").symlink_to(victim)
    r = run_cli("cluster", str(folder), "--host", "2x M4 Max 128GB", "--ctx", "1024",
                "--write", str(out))
    one_error_line(r, "run.sh", "symbolic link")
    assert victim.read_text() == "keep me\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert (out / "run.sh").is_symlink()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left
    # and nothing else either: a refused run.sh leaves no hostfile.json or plan.json behind
    assert sorted(p.name for p in out.iterdir()) == ["run.sh"]


def test_cluster_write_replaces_its_own_files(tmp_path: Path) -> None:
    """A second --write into the same directory replaces the files (run.sh stays 0o755)."""
    folder = qwen2_folder(tmp_path)
    out = tmp_path / "out"
    for _ in range(2):
        r = run_cli("cluster", str(folder), "--host", "2x M4 Max 128GB", "--ctx", "1024",
                    "--write", str(out))
        assert r.returncode == 0, r.stderr
    assert stat.S_IMODE((out / "run.sh").stat().st_mode) == 0o755
    assert json.loads((out / "hostfile.json").read_text())["hosts"]
    assert sorted(p.name for p in out.iterdir()) == ["hostfile.json", "plan.json", "run.sh"]


# --------------------------------------------------------------------------- --chart


def test_chart_to_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    folder = qwen2_folder(tmp_path)
    fifo = tmp_path / "chart.svg"
    os.mkfifo(fifo)
    r = run_cli("fit", str(folder), "--machine", "M4 Max 128GB", "--ctx", "1024",
                "--chart", str(fifo))
    one_error_line(r, "--chart", "FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_chart_through_a_link_is_refused(tmp_path: Path) -> None:
    folder = qwen2_folder(tmp_path)
    victim = tmp_path / "victim.svg"
    victim.write_text("keep me")
    (tmp_path / "chart.svg").symlink_to(victim)
    r = run_cli("fit", str(folder), "--machine", "M4 Max 128GB", "--ctx", "1024",
                "--chart", str(tmp_path / "chart.svg"))
    one_error_line(r, "--chart", "symbolic link")
    assert victim.read_text() == "keep me"


def test_chart_replaces_a_file_keeping_its_mode(tmp_path: Path) -> None:
    folder = qwen2_folder(tmp_path)
    chart = tmp_path / "chart.svg"
    chart.write_text("old")
    chart.chmod(0o600)
    r = run_cli("fit", str(folder), "--machine", "M4 Max 128GB", "--ctx", "1024",
                "--chart", str(chart))
    assert r.returncode == 0, r.stderr
    assert "<svg" in chart.read_text()
    assert stat.S_IMODE(chart.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- the writer


def test_write_file_keeps_the_old_file_when_validation_fails(tmp_path: Path) -> None:
    from mlxfit.writefile import write_file  # new in issue 29: the rest of the file runs on main

    target = tmp_path / "f.toml"
    target.write_text("old = 1\n")

    def refuse(data: bytes) -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        write_file(target, "new = 2\n", validate=refuse)
    assert target.read_text() == "old = 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.toml"]


def test_write_file_refuses_links_fifos_and_directories(tmp_path: Path) -> None:
    from mlxfit.writefile import NotWritable, write_file

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link").symlink_to(victim)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name in ("link", "dangling", "fifo", "dir"):
        with pytest.raises(NotWritable):
            write_file(tmp_path / name, "x")
    assert victim.read_text() == "keep" and not (tmp_path / "nowhere").exists()
    assert stat.S_ISFIFO((tmp_path / "fifo").lstat().st_mode)


APPEND_TO_FIFO = """
import sys
from mlxfit.errors import MlxfitError
from mlxfit.records import append_record
try:
    append_record({"a": 1}, sys.argv[1])
except MlxfitError as e:
    print(e)
    sys.exit(2)
"""


def test_measure_records_are_never_appended_through_a_link_or_to_a_fifo(tmp_path: Path) -> None:
    victim = tmp_path / "victim.jsonl"
    victim.write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(victim)
    with pytest.raises(MlxfitError, match="symbolic link"):
        append_record({"a": 1}, tmp_path / "link.jsonl")
    assert victim.read_text() == "{}\n"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-c", APPEND_TO_FIFO, str(fifo)], capture_output=True,
                       check=False,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert r.returncode == 2 and "FIFO" in r.stdout, (r.stdout, r.stderr)
    # and the ordinary case still appends, one line per record
    good = tmp_path / "m.jsonl"
    append_record({"a": 1}, good)
    append_record({"b": 2}, good)
    assert [json.loads(ln) for ln in good.read_text().splitlines()] == [{"a": 1}, {"b": 2}]


# --------------------------------------------------------------------------- the Hub cache


@pytest.fixture
def hub(env: Path, monkeypatch: pytest.MonkeyPatch):
    from huggingface_hub.utils import close_session

    with FakeHub() as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        yield s
        close_session()


def test_a_cache_entry_mlxfit_writes_is_never_called_corrupt(hub: FakeHub, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    """An entry that compresses under MLXFIT_HUB_MAX_CACHE_ENTRY_BYTES but inflates past it
    was written, then refused as corrupt on every later run. Now it is checked with the
    reader's own rules before it replaces anything: not written, and the fetch says so."""
    hub.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    mhub.fetch_model("acme/tiny")
    cache = tmp_path / "mlxfit-cache"
    (entry,) = cache.rglob("*.json.gz")
    packed, inflated = entry.stat().st_size, len(gzip.decompress(entry.read_bytes()))
    assert packed < inflated
    shutil.rmtree(cache)
    monkeypatch.setenv("MLXFIT_HUB_MAX_CACHE_ENTRY_BYTES", str((packed + inflated) // 2))
    src = mhub.fetch_model("acme/tiny")
    assert any("could not write mlxfit's Hub metadata cache" in n for n in src.notes), src.notes
    try:
        again = mhub.load_cached("acme/tiny")
    except SourceError as e:
        pytest.fail(f"the entry mlxfit wrote is called corrupt: {e}")
    assert again is None
