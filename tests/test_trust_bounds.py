"""Bounds before allocation (issue 29, class 4) and one exit-code rule for output that cannot be
written (class 6). Every case runs the real CLI in a child process under a timeout and an
address-space limit (RLIMIT_AS), so a hang is a timeout and unbounded memory a MemoryError;
broken pipes, full disks (/dev/full) and terminals (a pty) are real."""

from __future__ import annotations

import json
import os
import pty
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import make_folder, make_hf_cache, write_sparse

import mlxfit

SRC = Path(mlxfit.__file__).resolve().parent.parent  # the children run the code under test
LIMIT = 768 << 20
CHILD = r"""
import resource, runpy, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.argv = ["mlxfit"] + sys.argv[2:]
runpy.run_module("mlxfit", run_name="__main__")
"""
M4 = ("--machine", "M4 Max 128GB")
CONFIG = {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
          "intermediate_size": 64, "max_position_embeddings": 65536,
          # the rest of what mlx-lm's qwen3 ModelArgs requires
          "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_theta": 1e6}
TENSORS = {"model.embed_tokens.weight": ("BF16", [64, 32]),
           "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 64]),
           "model.layers.1.mlp.down_proj.weight": ("BF16", [32, 64])}


def run_cli(*args: str, env: dict[str, str] | None = None, stdout=subprocess.PIPE,
            timeout: float = 60, limit: int = LIMIT) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(SRC), HF_HUB_OFFLINE="1")
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return subprocess.run([sys.executable, "-c", CHILD, str(limit), *args], env=e,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout,
                          check=False)


def one_line(r: subprocess.CompletedProcess, *fragments: str, longest: int = 400) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln]
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: "), r.stderr[-3000:]
    assert len(lines[0]) <= longest, lines[0][:500]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def folder(root: Path, config: dict | None = None, shards: dict | None = None) -> Path:
    return make_folder(root / "m", config or CONFIG, shards or {"model.safetensors": TENSORS})


# --------------------------------------------------------------------------- counts in names


def test_a_shard_count_in_a_name_is_bounded_in_a_folder(tmp_path: Path) -> None:
    """model-00001-of-99999999999.safetensors made the missing-shard check list 10^11 names."""
    f = folder(tmp_path, shards={"model-00001-of-99999999999.safetensors": TENSORS})
    one_line(run_cli("fit", str(f), *M4), "model-00001-of-99999999999.safetensors", "100,000")


def test_a_shard_count_in_a_name_is_bounded_in_a_pick_over_the_hf_cache(tmp_path: Path):
    cache = tmp_path / "hub"
    files = {"config.json": json.dumps(CONFIG).encode(),
             "model-00001-of-99999999999.safetensors": TENSORS}
    make_hf_cache(cache, "acme/huge", files, commit="a" * 40)
    make_hf_cache(cache, "acme/good", {"config.json": json.dumps(CONFIG).encode(),
                                       "model.safetensors": TENSORS}, commit="b" * 40)
    r = run_cli("pick", *M4, "--ctx", "4096", "--json",
                env={"HF_HUB_CACHE": str(cache), "HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert "acme/good" in json.dumps(doc) and "99999999999" in json.dumps(doc)


# --------------------------------------------------------------------------- headers


def _raw_shard(path: Path, header: bytes, data: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + data)


def test_a_header_of_objects_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """30 MB of "{}," parses into 10 million dicts (~1 GB): refused from its byte counts."""
    f = folder(tmp_path)
    _raw_shard(f / "model-extra.safetensors", b"[" + b"{}," * 10_000_000 + b"{}]")
    one_line(run_cli("fit", str(f), *M4), "model-extra.safetensors", "not a safetensors header")


def test_headers_are_capped_in_total(tmp_path: Path) -> None:
    """Two 60 MB headers (each under the format's 100 MB limit): the second would take the
    total past the cap and is refused unread. 25 maximal headers reached 11 GB."""
    f = folder(tmp_path)
    for i in (1, 2):
        meta = {"pad": "x" * 60_000_000}
        write_sparse(f / f"model-big{i}.safetensors",
                     {f"model.layers.0.extra{i}.weight": ("BF16", [4])}, metadata=meta)
    one_line(run_cli("fit", str(f), *M4, limit=1536 << 20), "model-big2.safetensors",
             "100,000,000 bytes in all")


# --------------------------------------------------------------------------- numbers in flags


@pytest.mark.parametrize(("args", "flag"), [
    (("fit", "{f}", *M4, "--ctx", "9" * 320 + "k"), "--ctx"),
    (("fit", "{f}", *M4, "--ctx", "9" * 5000), "--ctx"),
    (("fit", "{f}", "--machine", "M4 Max " + "9" * 5000 + "GB"), "--machine"),
    (("fit", "{f}", *M4, "--memory-budget", "9" * 5000 + "GB"), "--memory-budget"),
    (("cluster", "{f}", "--host", "M4 Max " + "9" * 5000 + "GB"), "host"),
    (("cluster", "{f}", "--host", "9" * 5000 + "x M4 Max 128GB"), "--host"),
])
def test_huge_numbers_in_flags_are_one_short_line(tmp_path: Path, args, flag) -> None:
    f = folder(tmp_path)
    one_line(run_cli(*(a.format(f=f) for a in args)), flag)


@pytest.mark.parametrize(("var", "value"), [
    ("HF_HUB_DOWNLOAD_TIMEOUT", "soon"),
    ("HF_HUB_DOWNLOAD_TIMEOUT", "nan"),
    ("MLXFIT_HUB_MAX_CACHE_ENTRY_BYTES", "9" * 5000),
    ("MLXFIT_HUB_FETCH_DEADLINE_SECONDS", "inf"),
    ("HTTPS_PROXY", "http://user:secret@[::1"),
    ("HTTPS_PROXY", "http://user:secret@host:99999999"),
    ("ALL_PROXY", "socks9://user:secret@host"),
])
def test_malformed_hub_environment_is_one_line_naming_it(tmp_path: Path, var, value) -> None:
    """Reading the Hub with a malformed timeout, cap or proxy variable: one line naming the
    variable (never the value of a proxy: it may carry a password), before any request."""
    r = run_cli("fit", "acme/model", *M4, env={
        var: value, "HF_HUB_OFFLINE": None, "HF_ENDPOINT": "http://127.0.0.1:9",
        "MLXFIT_CACHE_DIR": str(tmp_path / "c"), "HF_HUB_CACHE": str(tmp_path / "hf")})
    line = one_line(r, var)
    assert "secret" not in r.stderr and "9" * 100 not in line


@pytest.mark.parametrize(("entry", "field"), [
    ("name = 5", "name"), ('ssh = ["a"]', "ssh"), ('macos = "abc"', "macos"),
    ("macos = inf", "macos"), ("memory_budget_gb = inf", "memory_budget_gb"),
    ("memory_budget_gb = 1e300", "memory_budget_gb"), ("rdma = [[1]]", "rdma"),
])
def test_odd_types_in_a_hosts_file_are_one_line(tmp_path: Path, entry, field) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[[hosts]]\nmachine = "M4 Max 128GB"\n{entry}\n'
                     '[[hosts]]\nmachine = "M4 Max 128GB"\n')
    one_line(run_cli("cluster", str(folder(tmp_path)), "--hosts-file", str(hosts), "--ctx",
                     "1024"), str(hosts), field)


def test_hostile_measurement_records_are_skipped_with_a_reason(tmp_path: Path) -> None:
    base = {"config": dict(CONFIG, model_type="llama"), "ctx": 1024, "prefill_step_size": 512,
            "gen_tokens": 1, "peak_bytes": 10**8, "cache_bytes_end": 10**6,
            "active_after_load_bytes": 10**7, "backend": "cpu", "act_bytes": 4}
    hostile = [("peak_bytes", 1e400), ("peak_bytes", float("nan")), ("peak_bytes", "x"),
               ("source", [1]), ("predicted", [1]), ("config", [1]), ("ctx", 1e400),
               ("machine_info", [1]), ("backend", ["cpu"]), ("act_bytes", 1e400)]
    lines = [json.dumps(dict(base, **{k: v})) for k, v in hostile]
    lines += ['{"a": ' + "9" * 5000 + "}", "[" * 100_000, "",
              json.dumps(dict(base, backend="metal", machine_info={"bandwidth_gbs": 1e400},
                              decode_tok_s=-1, weights_read={"x": 1}))]
    src = tmp_path / "m.jsonl"
    src.write_text("\n".join(lines) + "\n")
    r = run_cli("calibrate", "--from", str(src), "--json",
                env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-3000:]
    if r.returncode == 0:
        skipped = json.loads(r.stdout)["skipped"]
        assert len(skipped) >= 9  # the rest are usable: odd "source"/"predicted" are ignored
        assert all("\n" not in json.dumps(s) for s in skipped)
    else:
        one_line(r)


# --------------------------------------------------------------------------- output


@pytest.mark.parametrize("args", [("fit", "{f}", *M4), ("fit", "{f}", *M4, "--json"),
                                  ("fit", "{f}", *M4, "--advise"), ("models",),
                                  ("matrix", "{f}", "--format", "csv")])
def test_a_closed_pipe_on_stdout_exits_141_quietly(tmp_path: Path, args) -> None:
    """`mlxfit fit M | head -1`: Rich and click said exit 1 ("does not fit")."""
    f = folder(tmp_path)
    r, w = os.pipe()
    os.close(r)
    try:
        done = run_cli(*(a.format(f=f) for a in args), stdout=w)
    finally:
        os.close(w)
    assert done.returncode == 141, (done.returncode, done.stderr[-2000:])
    assert done.stderr == ""


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_a_full_disk_on_stdout_is_one_line(tmp_path: Path, extra) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        r = run_cli("fit", str(folder(tmp_path)), *M4, *extra, stdout=full)
    one_line(r, "cannot write the output", "No space left on device")


def _on_a_pty(args: list[str], columns: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS=columns, TERM="xterm",
               HF_HUB_OFFLINE="1")
    leader, follower = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "mlxfit", *args], stdout=follower,
                         stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return p.wait(timeout=60), out.decode("utf-8", "replace")


@pytest.mark.parametrize("columns", ["0", "5", "99999999"])
def test_a_terminal_of_any_claimed_width_gets_the_whole_report(tmp_path: Path, columns) -> None:
    """COLUMNS=0 on a terminal printed an empty report and exited 0."""
    rc, out = _on_a_pty(["fit", str(folder(tmp_path)), *M4, "--ctx", "1024"], columns)
    assert rc == 0, out
    assert "FITS" in out and len(out) > 500, out
    assert max(len(ln) for ln in out.splitlines()) < 20_000


def test_a_note_listing_thousands_of_files_stays_short(tmp_path: Path) -> None:
    """3,000 stray *.safetensors with long names beside the model made one 660,069-character
    note line."""
    f = folder(tmp_path)
    for i in range(3000):
        (f / f"consolidated-{i:05d}-{'x' * 200}.safetensors").write_bytes(b"")
    r = run_cli("fit", str(f), *M4, "--ctx", "1024")
    assert r.returncode == 0, r.stderr[-2000:]
    (note,) = [ln for ln in r.stdout.splitlines() if "not loaded by mlx-lm" in ln]
    assert len(note) < 4000 and "and 2,988 more" in note
    assert max(len(ln) for ln in r.stdout.splitlines()) < 4000


# --------------------------------------------------------------------------- contradictions


def test_a_config_deeper_than_its_tensors_is_refused(tmp_path: Path) -> None:
    """30 layers in config.json over tensors of 2: mlx-lm cannot load it; it was "FITS"."""
    f = folder(tmp_path, config=dict(CONFIG, num_hidden_layers=30))
    one_line(run_cli("fit", str(f), *M4, "--ctx", "1024"), "num_hidden_layers", "30 layers",
             "2 of them")


def test_a_shard_without_tensors_is_refused(tmp_path: Path) -> None:
    f = folder(tmp_path, shards={"model-00001-of-00002.safetensors": TENSORS,
                                 "model-00002-of-00002.safetensors": {}})
    one_line(run_cli("fit", str(f), *M4, "--ctx", "1024"),
             "model-00002-of-00002.safetensors", "holds no tensors")


def test_extra_layers_beyond_the_config_are_not_a_contradiction(tmp_path: Path) -> None:
    """DeepSeek-V3 ships layer 61 (multi-token prediction) over 61 layers: mlx-lm drops it."""
    spec = dict(TENSORS, **{"model.layers.2.mlp.down_proj.weight": ("BF16", [32, 64])})
    r = run_cli("fit", str(folder(tmp_path, shards={"model.safetensors": spec})), *M4,
                "--ctx", "1024")
    assert r.returncode == 0, r.stderr
