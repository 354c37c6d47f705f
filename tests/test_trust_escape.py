"""One escaper for every untrusted string that reaches a terminal, a shell script or a CSV cell
(issue 29, class 3): ``mlxfit.render.text`` (``controls``, ``esc``, ``shell_comment``,
``shell_arg``, ``csv_cell``). Folder names, hosts-file names and cached repo ids are made for
real; run.sh is run by a real ``sh`` (with ``mlx.launch`` and ``python3`` stubbed); reports go
through a real strict-UTF-8 stdout in a child process."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from st_helpers import make_folder, make_hf_cache

import mlxfit
from mlxfit.render.tabular import csv_text
from mlxfit.render.text import controls

SRC = Path(mlxfit.__file__).resolve().parent.parent  # the children run the code under test
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# What must never reach a terminal raw: C0 (but \n, \t: the report's own layout), DEL, C1, the
# bidi embeddings / overrides / isolates and marks, line separators, lone surrogates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                    "\ud800-\udfff]")
TINY = {"model.embed_tokens.weight": ("BF16", [64, 32]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 64])}
CONFIG = {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
          "intermediate_size": 64, "max_position_embeddings": 65536,
          # the rest of what mlx-lm's qwen3 ModelArgs requires
          "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_theta": 1e6}


def run_cli(*args: str | bytes, cwd: Path | None = None, env: dict[str, str] | None = None):
    e = dict(os.environ, PYTHONPATH=str(SRC), HF_HUB_OFFLINE="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "mlxfit", *args], cwd=cwd, env=e,
                          capture_output=True, timeout=120, check=False)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40))
def test_controls_leaves_nothing_unsafe_and_encodes_as_strict_utf8(s: str) -> None:
    out = controls(s)
    assert not UNSAFE.search(out) and "\n" not in out and "\t" not in out
    out.encode("utf-8", "strict")  # a lone surrogate would raise here
    assert controls(out) == out  # escaping twice changes nothing
    if not any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in s):
        assert out == s  # ordinary text (any script, emoji) is shown as written


def test_controls_shows_each_bidi_override_and_surrogate():
    assert controls("a\u202eb") == "a\\u202eb"
    assert controls("x\udcff") == "x\\udcff"
    assert all(controls(c) == f"\\u{ord(c):04x}" for c in BIDI)


def hostile_folder(root: Path) -> Path:
    """A model folder whose name flips text (U+202E) and is not UTF-8 (byte 0xff)."""
    name = os.fsencode(root) + b"/FITS \xe2\x80\xae TIF TON SEOD \xff"
    os.mkdir(name)
    return make_folder(Path(os.fsdecode(name)), CONFIG, {"model.safetensors": TINY})


@pytest.mark.parametrize("extra", [(), ("--explain",), ("--json",), ("--ctx", "999999")])
def test_a_hostile_folder_name_on_a_strict_utf8_stdout(tmp_path: Path, extra) -> None:
    """The bidi override would reorder the verdict on screen; the 0xff byte (a lone
    surrogate once decoded) was a UnicodeEncodeError traceback under a strict stdout."""
    folder = hostile_folder(tmp_path)
    r = run_cli("fit", os.fsencode(folder), "--machine",
                "M4 Max 128GB", *extra,
                env={"PYTHONIOENCODING": "utf-8:strict", "COLUMNS": "200"})
    out, err = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    assert r.returncode in (0, 1), (r.returncode, out[-2000:], err[-2000:])
    assert "Traceback" not in err and not UNSAFE.search(out + err), (out, err)
    if "--json" in extra:
        assert json.loads(out)["model"].endswith("TIF TON SEOD \udcff")
    else:
        assert "\\u202e TIF TON SEOD \\udcff" in out


# --------------------------------------------------------------------------- run.sh

STUB = "#!/bin/sh\nexit 0\n"


def test_run_sh_never_runs_a_name_from_the_model_folder_or_the_hosts_file(tmp_path: Path):
    """The audit's probe: a newline in the model folder's name or a hosts-file name/ssh ended
    a comment line of run.sh, and the rest became a command the user was told to run."""
    layers = 2
    cfg = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": layers,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "vocab_size": 100, "max_position_embeddings": 4096, "tie_word_embeddings": False,
           "rms_norm_eps": 1e-6}
    spec = {"model.embed_tokens.weight": ("BF16", [100, 64]),
            "lm_head.weight": ("BF16", [100, 64])}
    for i in range(layers):
        spec[f"model.layers.{i}.self_attn.k_proj.weight"] = ("BF16", [32, 64])
        spec[f"model.layers.{i}.mlp.down_proj.weight"] = ("BF16", [64, 128])
    folder = make_folder(tmp_path / "m\ntouch pwned-model\n#", cfg,
                         {"model.safetensors": spec}, index=True)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[hosts]]\nmachine = "M4 Max 128GB"\nname = "a\\ntouch pwned-name"\n'
                     'ssh = "b\\ntouch pwned-ssh; $(touch pwned-subst)"\n'
                     '[[hosts]]\nmachine = "M4 Max 128GB"\nssh = "c`touch pwned-tick`"\n')
    out = tmp_path / "out"
    r = run_cli("cluster", str(folder), "--hosts-file", str(hosts), "--ctx", "1024",
                "--write", str(out))
    assert r.returncode in (0, 1), r.stderr.decode()
    script = (out / "run.sh").read_text()
    for line in script.splitlines():
        assert (not line or line == 'cd "$(dirname "$0")"'
                or line.startswith(("#", "mlx.launch ", "python3 "))), line
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("mlx.launch", "python3"):
        (stubs / tool).write_text(STUB)
        (stubs / tool).chmod(0o755)
    run = tmp_path / "cwd"
    run.mkdir()
    done = subprocess.run(["sh", str(out / "run.sh")], cwd=run, capture_output=True, text=True,
                          timeout=60, check=False,
                          env={"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    planted = [p for d in (run, out, tmp_path) for p in d.iterdir() if "pwned" in p.name
               and p != folder]
    assert planted == []


# --------------------------------------------------------------------------- CSV


def test_csv_cells_that_would_be_formulas_are_neutralised_numbers_kept():
    text = csv_text(["a", "b"], [["=1+2", -3.5], ["+1+1", "-3.5"], ["@SUM(A1)", 42],
                                 ["-1+2", "-1,234.5"], ["\tx", None], ["ok=1", "1e3"]])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1:] == [["'=1+2", "-3.5"], ["'+1+1", "-3.5"], ["'@SUM(A1)", "42"],
                        ["'-1+2", "-1,234.5"], ["'\\x09x", ""], ["ok=1", "1e3"]]


@pytest.mark.parametrize("verb", [("models", "--format", "csv"),
                                  ("pick", "--machine", "M4 Max 128GB", "--ctx", "4096",
                                   "--format", "csv")])
def test_cached_repo_ids_never_reach_a_csv_cell_as_a_formula(tmp_path: Path, verb) -> None:
    cache = tmp_path / "hub"
    files = {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": TINY}
    for i, org in enumerate(("=HYPERLINK(1)", "@SUM(1)", "+cmd", "-2+3")):
        make_hf_cache(cache, f"{org}/x", files, commit=str(i) * 40)
    r = run_cli(*verb, env={"HF_HUB_CACHE": str(cache), "HOME": str(tmp_path / "home")})
    assert r.returncode in (0, 1), r.stderr.decode()
    rows = list(csv.reader(io.StringIO(r.stdout.decode())))
    names = [row[0] for row in rows[1:]]
    assert sorted(n for n in names if "/x" in n) == [
        "'+cmd/x", "'-2+3/x", "'=HYPERLINK(1)/x", "'@SUM(1)/x"], names
    for row in rows:
        for cell in row:
            assert not cell.startswith(("=", "+", "@", "\t", "\r")), row
