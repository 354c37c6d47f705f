"""Local files mlxfit did not write, of the wrong type or size (issue 13, classes 3 and 6): a
FIFO, a device or a 2 GB sparse file where config.json, the shard index, a shard, a draft
model's index or a Hub cache entry should be. Each runs the real CLI in a child process with a
timeout and an address-space limit (RLIMIT_AS), so a hang is a timeout and unbounded memory a
MemoryError, either of which fails the test; the child reports its own time and peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import M4PRO, make_folder, make_hf_cache

SRC = Path(__file__).resolve().parent.parent / "src"
LIMIT = 512 << 20  # a CLI run needs < 400 MiB of address space; a 2 GB read would not fit
TINY = {"model.embed_tokens.weight": ("BF16", [64, 32]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 64])}
TINY_CONFIG = {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
               "intermediate_size": 64, "max_position_embeddings": 4096,
               # the rest of what mlx-lm's qwen3 ModelArgs requires
               "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
               "rope_theta": 1e6}
INDEX = "model.safetensors.index.json"

CHILD = r"""
import resource, runpy, sys, time
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.argv = ["mlxfit"] + sys.argv[2:]
t = time.monotonic()
try:
    runpy.run_module("mlxfit", run_name="__main__")
finally:
    sys.stderr.write("\nBOUND seconds=%.2f maxrss_kb=%d\n" % (
        time.monotonic() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30):
    e = dict(os.environ, PYTHONPATH=str(SRC), **(env or {}))
    e.pop("HF_ENDPOINT", None)
    e["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-c", CHILD, str(LIMIT), *args], env=e,
                          capture_output=True, text=True, timeout=timeout, check=False)


def error_line(r) -> str:
    """The run's one error line (exit 2, no traceback); the BOUND line is the harness's."""
    lines = [ln for ln in r.stderr.splitlines() if ln and not ln.startswith("BOUND ")]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: "), r.stderr
    assert "Traceback" not in r.stderr
    print(r.stderr.splitlines()[-1])
    return lines[0]


def tiny(root: Path, name: str = "tiny", index: bool = False) -> Path:
    return make_folder(root / name, TINY_CONFIG, {"model.safetensors": TINY}, index=index)


def fit(folder: Path, *more: str, **kw):
    return run_cli("fit", str(folder), "--machine", M4PRO, *more, **kw)


def test_fifo_config(tmp_path: Path) -> None:
    folder = tiny(tmp_path)
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    msg = error_line(fit(folder))
    assert "config.json: cannot read: a FIFO, not a regular file" in msg


def test_fifo_index(tmp_path: Path) -> None:
    folder = tiny(tmp_path)
    os.mkfifo(folder / INDEX)
    assert f"{INDEX}: cannot read: a FIFO" in error_line(fit(folder))


def test_fifo_shard(tmp_path: Path) -> None:
    """A FIFO that the index names as its shard: refused, not opened for a blocking read."""
    folder = tiny(tmp_path, index=True)
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    msg = error_line(fit(folder))
    assert "model.safetensors" in msg


def test_fifo_index_of_the_draft_model(tmp_path: Path) -> None:
    main, draft = tiny(tmp_path, "main"), tiny(tmp_path, "draft")
    os.mkfifo(draft / INDEX)
    r = fit(main, "--draft-model", str(draft))
    assert f"{INDEX}: cannot read: a FIFO" in error_line(r)


def test_fifo_in_the_hf_cache_does_not_hang_pick(tmp_path: Path) -> None:
    """One bad entry in the Hugging Face cache is skipped with its reason; the scan goes on."""
    cache = tmp_path / "hf"
    good = make_hf_cache(cache, "acme/good", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                              "model.safetensors": TINY}, commit="a" * 40)
    bad = make_hf_cache(cache, "acme/bad", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                            "model.safetensors": TINY}, commit="b" * 40)
    os.mkfifo(bad / INDEX)
    r = run_cli("pick", "--machine", M4PRO, "--json", env={"HF_HUB_CACHE": str(cache)})
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    skipped = {s["model"]: s["reason"] for s in doc["skipped"]}
    assert "a FIFO" in skipped["acme/bad"]
    assert "acme/good" in {c["model"] for c in doc["candidates"]}
    assert good.is_dir()


def test_huge_ref_in_the_hf_cache_is_not_read(tmp_path: Path) -> None:
    """A ref file holds a 40-character hash: a 2 GB sparse one is refused from its size (under
    RLIMIT_AS reading it would end in a MemoryError), and the scan goes on."""
    cache = tmp_path / "hf"
    repo = make_hf_cache(cache, "acme/good", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                              "model.safetensors": TINY}, commit="a" * 40)
    pr = repo.parents[1] / "refs" / "pr" / "1"
    pr.parent.mkdir(parents=True, exist_ok=True)
    with open(pr, "wb") as f:
        f.truncate(2 << 30)
    r = run_cli("pick", "--machine", M4PRO, "--json", env={"HF_HUB_CACHE": str(cache)})
    assert r.returncode in (0, 1), r.stderr
    assert "acme/good" in {c["model"] for c in json.loads(r.stdout)["candidates"]}


def test_fifo_as_a_hub_cache_entry(tmp_path: Path) -> None:
    """mlxfit's own cache, planted: the entry file is a FIFO."""
    cache = tmp_path / "mlxfit-cache"
    repo = cache / "hub" / "huggingface.co" / "models--acme--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots").mkdir()
    (repo / "refs" / "main").write_text("c" * 40)
    os.mkfifo(repo / "snapshots" / ("c" * 40 + ".json.gz"))
    r = run_cli("fit", "acme/tiny", "--machine", M4PRO, env={"MLXFIT_CACHE_DIR": str(cache)})
    assert "a FIFO, not a regular file" in error_line(r)


@pytest.mark.parametrize("which", ["config.json", INDEX])
def test_dev_zero(tmp_path: Path, which: str) -> None:
    folder = tiny(tmp_path)
    (folder / which).unlink(missing_ok=True)
    (folder / which).symlink_to("/dev/zero")
    assert "a character device, not a regular file" in error_line(fit(folder))


@pytest.mark.parametrize("which", ["config.json", INDEX])
def test_two_gigabyte_sparse_json(tmp_path: Path, which: str) -> None:
    """Refused from its size alone (64 MB, the Hub path's cap), never read: under RLIMIT_AS of
    512 MiB, reading 2 GB would end in a MemoryError."""
    folder = tiny(tmp_path)
    with open(folder / which, "wb") as f:
        f.truncate(2 << 30)
    msg = error_line(fit(folder))
    assert f"{which}: cannot read: 2,147,483,648 bytes, over the 64,000,000-byte limit" in msg


def test_shard_symlinked_to_a_secret_prints_none_of_it(tmp_path: Path) -> None:
    """A "shard" that is a link to some other file: its first 8 bytes are not a header length
    to print (they would spell the secret as a number)."""
    folder = tiny(tmp_path)
    secret = tmp_path / "secret.txt"
    for content in (b"hunter2!" + b"x" * 100, b"\x11\0\0\0\0\0\0\0" + b"p" * 30,
                    b"pw=" + b"\xff" * 5 + b"tail"):
        secret.write_bytes(content)
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").symlink_to(secret)
        r = fit(folder, "--json")
        msg = error_line(r)
        n = int.from_bytes(content[:8], "little")
        for leak in (str(n), f"{n:,}", "hunter2", "pppp", "tail"):
            # The paths are taken out first: pytest numbers its folders ("pytest-317").
            shown = (r.stdout + msg).replace(str(tmp_path), "")
            assert leak not in shown, (leak, msg)
        assert "model.safetensors" in msg


@pytest.mark.parametrize("name", ["config.toml", "calibration.toml", "apple_skus.toml"])
def test_fifo_user_settings_file(tmp_path: Path, name: str) -> None:
    """~/.config/mlxfit/*.toml: a FIFO is not a settings file. Callers look for a regular file
    (so it is ignored, as if absent), and read_toml itself opens regular files only; either
    way the run ends (the child's timeout is the bound), it never hangs."""
    conf = tmp_path / "xdg" / "mlxfit"
    conf.mkdir(parents=True)
    os.mkfifo(conf / name)
    r = run_cli("fit", "mlx-community/Qwen3-0.6B-4bit", "--machine", M4PRO,
                env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert r.returncode == 0 and "FITS" in r.stdout, r.stderr


def test_read_toml_refuses_a_fifo_and_a_device(tmp_path: Path) -> None:
    from mlxfit.errors import MlxfitError
    from mlxfit.settings import read_toml

    os.mkfifo(tmp_path / "x.toml")
    with pytest.raises(MlxfitError, match="x.toml: a FIFO, not a regular file"):
        read_toml(tmp_path / "x.toml", "settings")
    with pytest.raises(MlxfitError, match="a character device, not a regular file"):
        read_toml(Path("/dev/zero"), "settings")


def test_fifo_as_a_hub_cache_ref(tmp_path: Path) -> None:
    """refs/main of mlxfit's own cache, planted as a FIFO: treated as no cached ref."""
    cache = tmp_path / "mlxfit-cache"
    refs = cache / "hub" / "huggingface.co" / "models--acme--tiny" / "refs"
    refs.mkdir(parents=True)
    os.mkfifo(refs / "main")
    r = run_cli("fit", "acme/tiny", "--machine", M4PRO, env={"MLXFIT_CACHE_DIR": str(cache)})
    assert "not in mlxfit's Hub metadata cache" in error_line(r)


def test_huge_main_ref_when_fitting_a_cached_repo(tmp_path: Path) -> None:
    """fit on a repo of the HF cache reads refs/main itself: a 2 GB sparse ref is one line
    naming the refs, not a 2 GB read (run_cli's address-space limit would end that in a
    MemoryError)."""
    cache = tmp_path / "hf"
    repo = make_hf_cache(cache, "acme/good", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                              "model.safetensors": TINY}, commit="a" * 40)
    with open(repo.parents[1] / "refs" / "main", "wb") as f:
        f.truncate(2 << 30)
    r = run_cli("fit", "acme/good", "--machine", M4PRO, env={"HF_HUB_CACHE": str(cache)})
    assert "cannot read its refs" in error_line(r)


def test_revision_cannot_walk_out_of_refs(tmp_path: Path) -> None:
    """--revision ../../x names no ref and no snapshot: a file outside refs/ is not read."""
    cache = tmp_path / "hf"
    repo = make_hf_cache(cache, "acme/good", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                              "model.safetensors": TINY}, commit="a" * 40)
    outside = repo.parents[1] / "planted"
    outside.write_text("a" * 40)  # would resolve to the cached snapshot if followed
    r = run_cli("fit", "acme/good", "--revision", "../planted", "--machine", M4PRO,
                env={"HF_HUB_CACHE": str(cache)})
    # refused as no revision name at all (git's ref-name rules) before any cache is looked at
    assert "--revision '../planted' is not a branch, tag or commit name" in error_line(r)
