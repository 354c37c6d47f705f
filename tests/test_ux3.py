"""Issue 28 (review ux-3): what a Mac owner types gets the right answer. One group of checks
per finding F1-F10, each through the real console script where the CLI is the subject."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import MLXFIT_TAKING_CTRL_C

SRC = str(Path(__file__).resolve().parents[1] / "src")
Q8B = "mlx-community/Qwen3-8B-4bit"
M4PRO24 = "M4 Pro 24GB"


def mlxfit(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """The console script's own entry (main()), where click's errors are worded."""
    return subprocess.run([sys.executable, "-m", "mlxfit", *args], capture_output=True,
                          text=True, check=False, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": SRC, **(env or {})})


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: "), r.stderr
    return lines[0]


# ---------------------------------------------------------------- F7: verbs mistyped
@pytest.mark.parametrize("typed, meant", [("fti", "fit"), ("matirx", "matrix"),
                                          ("serve-paln", "serve-plan")])
def test_f7_mistyped_verb_gets_did_you_mean(typed, meant):
    line = one_error_line(mlxfit(typed))
    assert f"Did you mean '{meant}'" in line


def test_f7_python_name_of_a_verb_is_an_alias():
    a = mlxfit("serve_plan", Q8B, "--machine", M4PRO24, "--ctx", "8k", "--json")
    b = mlxfit("serve-plan", Q8B, "--machine", M4PRO24, "--ctx", "8k", "--json")
    assert a.returncode == b.returncode == 0, a.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout)


# ---------------------------------------------------------------- F9: positional and habits
@pytest.mark.parametrize("verb", ["fit", "serve-plan"])
@pytest.mark.parametrize("word, hint", [("32768", "--ctx 32768"), ("32k", "--ctx 32k"),
                                        (M4PRO24, f"--machine '{M4PRO24}'")])
def test_f9_stray_word_after_the_model_names_its_flag(verb, word, hint):
    line = one_error_line(mlxfit(verb, Q8B, word))
    assert f"did you mean {hint}?" in line and "chart" not in line


def test_f9_a_mac_given_as_the_model_is_refused_with_the_flag():
    line = one_error_line(mlxfit("fit", M4PRO24))
    assert f"--machine '{M4PRO24}'" in line and "not found" not in line


@pytest.mark.parametrize("verb", ["fit", "serve-plan"])
def test_f9_model_flag_is_the_positional_model(verb):
    a = mlxfit(verb, "--model", Q8B, "--machine", M4PRO24, "--ctx", "8k", "--json")
    b = mlxfit(verb, Q8B, "--machine", M4PRO24, "--ctx", "8k", "--json")
    c = mlxfit(verb, f"--model={Q8B}", "--machine", M4PRO24, "--ctx", "8k", "--json")
    assert a.returncode == b.returncode == c.returncode == 0, a.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout) == json.loads(c.stdout)


def test_f9_max_tokens_is_gen():
    a = mlxfit("fit", Q8B, "--machine", M4PRO24, "--max-tokens", "512", "--json")
    b = mlxfit("fit", Q8B, "--machine", M4PRO24, "--gen", "512", "--json")
    c = mlxfit("fit", Q8B, "--machine", M4PRO24, "--json")
    assert a.returncode == b.returncode == 0, a.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout) != json.loads(c.stdout)


@pytest.mark.parametrize("verb", ["fit", "serve-plan"])
def test_f9_no_model_says_which_default_is_sized(verb):
    from mlxfit.settings import DEFAULT_MODEL

    r = mlxfit(verb, "--machine", M4PRO24, "--ctx", "8k")
    assert r.returncode in (0, 1), r.stderr
    assert "no model given" in r.stderr and DEFAULT_MODEL in r.stderr
    named = mlxfit(verb, DEFAULT_MODEL, "--machine", M4PRO24, "--ctx", "8k")
    assert "no model given" not in named.stderr


# ---------------------------------------------------------------- F10: owners' machine names
@pytest.mark.parametrize("said, canonical", [
    ("MacBook Air M3 16GB", "M3 16GB"),
    ("Mac Studio M2 Ultra 192GB", "M2 Ultra 192GB"),
    ("M4Max64GB", "M4 Max 64GB"),
    ("Mac mini M4 Pro 24GB", "M4 Pro 24GB"),
    ('MacBook Pro 14" M4 Pro 24GB (2024)', "M4 Pro 24GB"),
    ("M2 Max 12-core CPU 38-core GPU 64GB", "M2 Max 38-core 64GB"),
    ("M3 Ultra 0.5TB", "M3 Ultra 512GB"),
])
def test_f10_owner_names_resolve(said, canonical):
    from mlxfit.hardware.resolve import resolve_machine

    a, b = resolve_machine(said), resolve_machine(canonical)
    assert (a.chip, a.gpu_cores, a.ram_bytes) == (b.chip, b.gpu_cores, b.ram_bytes)
    r = mlxfit("machine", said, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["machine"]["ram_bytes"] == b.ram_bytes


def test_f10_bare_chip_lists_its_sizes():
    from mlxfit.hardware.skus import load_sku_table

    sizes = {r for v in load_sku_table()["chips"]["M4"]["variants"] for r in v["ram_gb"]}
    line = one_error_line(mlxfit("machine", "M4"))
    assert all(str(s) in line for s in sizes), line


def test_f10_suggestions_stay_in_the_generation():
    line = one_error_line(mlxfit("machine", "M3 Maxx 36GB"))
    near = line.split("nearest: ")[1].split(", ")
    assert near[0] == "M3 Max" and all(n.startswith("M3") for n in near), line


# ---------------------------------------------------------------- F1: matrix --quants formats
def test_f1_matrix_quants_markdown_and_csv_show_the_converted_rows():
    import csv
    import io

    args = ("matrix", "mlx-community/Qwen3-8B-bf16", "--quants", "4,8", "--ctx", "32k",
            "--chips", "M4")
    doc = json.loads(mlxfit(*args, "--json").stdout)
    runs = {(q["label"], r["name"]): r for q in doc["quants"] for r in q["rows"]}
    source_runs = {r["name"]: r["runs"] for r in doc["rows"]}
    # The case the review hit: the source does not run where a conversion does.
    assert any(r["runs"] and not source_runs[n] for (_, n), r in runs.items())

    md = mlxfit(*args, "--format", "markdown")
    assert md.returncode == 0, md.stderr
    table = [ln for ln in md.stdout.splitlines() if ln.startswith("| ")]
    labels = [h.split(" (")[0] for h in table[0].strip("| ").split(" | ")[1:]]
    assert labels == [q["label"] for q in doc["quants"]]
    body = table[2:]
    assert len(body) == len(doc["quants"][0]["rows"])
    for line in body:
        name, *cells = line.strip("| ").split(" | ")
        for label, cell in zip(labels, cells, strict=True):
            r = runs[(label, name)]
            assert (cell == "no") == (not r["runs"]), line
            if r["runs"]:
                assert cell.startswith(f"{r['max_safe_context'] // 1024}k"), line

    rows = list(csv.DictReader(io.StringIO(mlxfit(*args, "--format", "csv").stdout)))
    assert len(rows) == len(runs)
    for row in rows:
        r = runs[(row["quant"], row["name"])]
        assert int(row["total_bytes"]) == r["total_bytes"]
        assert row["runs"] == ("true" if r["runs"] else "false") and int(row["max_safe_context"]) == \
            r["max_safe_context"]


# ---------------------------------------------------------------- F2: a wrong --revision
def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_f2_wrong_revision_of_a_cached_model_fails_when_the_hub_cannot_be_asked(tmp_path):
    from st_helpers import cache_catalog_model

    commit = "b7e3d222acb3" + "0" * 28
    cache_catalog_model(tmp_path / "hub", Q8B, commit=commit)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "0", "HF_HOME": "",
           "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
           "MLXFIT_HUB_BACKOFF_SECONDS": "0.005", "MLXFIT_HUB_MAX_WAIT_SECONDS": "0.02"}
    line = one_error_line(mlxfit("fit", Q8B, "--revision", "zzzz", "--machine", M4PRO24,
                                 env=env))
    assert "zzzz" in line and commit[:12] in line, line
    ok = mlxfit("fit", Q8B, "--revision", commit[:8], "--machine", M4PRO24, "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["source"] == "hf-cache"


# ---------------------------------------------------------------- F5: the GPU watchdog, everywhere
def test_f5_every_verb_shows_fits_gpu_watchdog_warning():
    """Llama-3.3-70B 4-bit at 32K on a 16-core M4 Pro 64GB: fit warns that a prefill chunk may
    trip the watchdog; matrix, pick, serve-plan and a one-host cluster carry the same text."""
    llama, mac, row = "mlx-community/Llama-3.3-70B-Instruct-4bit", "M4 Pro 64GB", \
        "M4 Pro 16-core 64GB"
    fit = json.loads(mlxfit("fit", llama, "--ctx", "32k", "--machine", mac, "--json").stdout)
    dog = [w for w in fit["warnings"] if "GPU watchdog" in w]
    assert fit["fits"] and len(dog) == 1, fit["warnings"]
    dog = dog[0]

    mx = json.loads(mlxfit("matrix", llama, "--ctx", "32k", "--chips", "M4 Pro",
                           "--json").stdout)
    rows = {r["name"]: r for r in mx["rows"]}
    assert rows[row]["watchdog_warning"] == dog
    assert all(r["watchdog_warning"] is None for r in mx["rows"] if not r["runs"])
    table = mlxfit("matrix", llama, "--ctx", "32k", "--chips", "M4 Pro").stdout
    assert "yes!" in table and "GPU watchdog" in table
    md = mlxfit("matrix", llama, "--ctx", "32k", "--chips", "M4 Pro", "--format",
                "markdown").stdout
    assert f"| {row} | 273 | yes! |" in md

    pick = json.loads(mlxfit("pick", "--catalog", "--only-fits", "--ctx", "32k", "--machine",
                             mac, "--json").stdout)
    cand = next(c for c in pick["catalog"] if c["model"] == llama)
    assert cand["watchdog_warning"] == dog

    sp = json.loads(mlxfit("serve-plan", llama, "--ctx", "32k", "--users", "1", "--machine",
                           mac, "--json").stdout)
    assert dog in sp["warnings"]

    cl = json.loads(mlxfit("cluster", llama, "--ctx", "32k", "--host", mac, "--json").stdout)
    assert dog in cl["warnings"]


# ---------------------------------------------------------------- F6: fit --parallel = serve-plan
@pytest.mark.parametrize("n", [1, 4])
def test_f6_fit_parallel_agrees_with_serve_plan(n):
    base = (Q8B, "--ctx", "32k" if n == 1 else "8k", "--machine", M4PRO24, "--json")
    f = mlxfit("fit", *base, "--parallel", str(n))
    s = mlxfit("serve-plan", *base, "--users", str(n))
    fit, plan = json.loads(f.stdout), json.loads(s.stdout)
    assert plan["concurrency"] == n, plan
    assert f.returncode == s.returncode == 0, (f.stderr, s.stderr)
    assert fit["total_bytes"] == plan["total_bytes"]
    assert fit["command"] == plan["command"]
    assert f"--prompt-cache-bytes {plan['prompt_cache_bytes']}" in fit["command"]


def test_f6_explicit_prompt_cache_is_sized_and_capped():
    a = json.loads(mlxfit("fit", Q8B, "--ctx", "8k", "--machine", M4PRO24, "--parallel", "2",
                          "--prompt-cache", "3", "--json").stdout)
    b = json.loads(mlxfit("fit", Q8B, "--ctx", "8k", "--machine", M4PRO24, "--parallel", "2",
                          "--prompt-cache", "1", "--json").stdout)
    per = (a["total_bytes"] - b["total_bytes"]) // 2  # two more cached prompts
    assert "--prompt-cache-size 3" in a["command"]
    assert f"--prompt-cache-bytes {(3 + 2) * per}" in a["command"]


def test_f6_server_advice_shows_batched_tok_s():
    args = (Q8B, "--ctx", "8k", "--parallel", "8", "--prompt-cache", "10", "--machine", M4PRO24)
    doc = json.loads(mlxfit("fit", *args, "--json").stdout)
    opts = doc["advice"]["options"]
    batched = [i for i, o in enumerate(opts) if "--decode-concurrency 8" in (o["command"] or "")]
    assert batched, opts
    text = mlxfit("fit", *args).stdout.splitlines()
    for i in batched:
        line = next(ln for ln in text if ln.startswith(f" {i + 1}. "))
        single = f"{opts[i]['predicted_decode_tps']:,.1f} tok/s"
        assert "tok/s per user" in line and single not in line, line


# ---------------------------------------------------------------- F3: past the trained context
def _tiny(root: Path, max_pos: int, rope: dict | None) -> Path:
    from st_helpers import qwen_tiny

    folder = qwen_tiny(root)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["max_position_embeddings"] = max_pos
    cfg.pop("rope_scaling", None)
    if rope is not None:
        cfg["rope_scaling"] = rope
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("max_pos, rope, limit", [
    (4096, {"rope_type": "yarn", "factor": 4.0}, 4 * 4096),
    (8192, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, 4 * 4096),
    (4096, {"rope_type": "dynamic", "factor": 2.0}, 2 * 4096),
    (4096, None, 4096),
    (4096, {"rope_type": "linear", "factor": 8.0}, 4096),  # trained with it: already the length
    (4096, {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 1024},
     4096),
])
def test_f3_rope_scaling_sets_the_context_limit_as_mlx_lm_applies_it(tmp_path, max_pos, rope,
                                                                      limit):
    folder = _tiny(tmp_path / "m", max_pos, rope)
    r = mlxfit("fit", str(folder), "--ctx", "16k", "--machine", M4PRO24, "--json")
    doc = json.loads(r.stdout)
    assert doc["context_limit"] == limit
    assert doc["beyond_context_limit"] == (16384 > limit)
    assert r.returncode == (1 if 16384 > limit else 0), r.stderr


def test_f3_past_the_trained_context_shows_memory_speed_and_a_longer_sibling():
    args = ("fit", "mlx-community/Qwen3-30B-A3B-4bit", "--ctx", "64k", "--machine",
            "M4 Pro 48GB")
    r = mlxfit(*args, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["beyond_context_limit"] and not doc["fits"]
    assert doc["total_bytes"] < doc["usable_bytes"]
    assert doc["predicted_decode_tps"] and doc["predicted_ttft_s"]
    assert any("past the model's trained context" in w for w in doc["warnings"])
    text = mlxfit(*args).stdout
    head = text.splitlines()[0]
    assert "FITS IN MEMORY" in head and "DOES NOT FIT" not in head
    assert f"{doc['predicted_decode_tps']:,.1f} tok/s" in text
    assert "mlx-community/Qwen3-30B-A3B-Instruct-2507-4bit: same size" in text
    assert "rope_scaling" in text and "YaRN" in text
    sib = json.loads(mlxfit("fit", "mlx-community/Qwen3-30B-A3B-Instruct-2507-4bit", "--ctx",
                            "64k", "--machine", "M4 Pro 48GB", "--json").stdout)
    assert sib["fits"] and f"{sib['predicted_decode_tps']:,.1f} tok/s" in text


# ---------------------------------------------------------------- F8: 80 columns and pipes
def mlxfit_tty(*args: str, cols: int = 80) -> str:
    """The console script on a real pseudo-terminal `cols` wide (COLUMNS too): its output."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": str(cols), "NO_COLOR": "1",
           "TERM": "dumb"}
    p = subprocess.Popen([*MLXFIT_TAKING_CTRL_C, *args], stdout=slave, stderr=slave,
                         stdin=subprocess.DEVNULL, env=env, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    p.wait(timeout=120)
    return out.decode().replace("\r\n", "\n")


COMMAND_STARTS = ("$ ", "mlx-lm: ", "mlx_lm.", "mlx.launch", "sudo ")


def _prose_fits(text: str, cols: int = 80) -> None:
    """Every line but a command to copy fits the width: rich word-wrapped it, no terminal cut."""
    for line in text.splitlines():
        if len(line) > cols:
            assert line.strip().startswith(COMMAND_STARTS), line


def test_f8_fit_keeps_the_verdict_whole_at_80_columns():
    llama = "mlx-community/Llama-3.3-70B-Instruct-4bit"
    out = mlxfit_tty("fit", llama, "--ctx", "64k", "--machine", "M4 Max 64GB")
    assert "DOES NOT FIT" in out.splitlines()[0], out[:300]
    _prose_fits(out)


def test_f8_pick_never_splits_a_model_id_at_80_columns():
    args = ("pick", "--catalog", "--machine", "M4 Pro 48GB", "--ctx", "32k")
    doc = json.loads(mlxfit(*args, "--json").stdout)
    ids = [c["model"] for c in doc["catalog"]]
    assert any(len(i) > 40 for i in ids)
    lines = mlxfit_tty(*args).splitlines()
    for i in ids:
        assert any(i in ln for ln in lines), i
    _prose_fits("\n".join(lines))


@pytest.mark.parametrize("args", [
    ("fit", Q8B, "--machine", M4PRO24),
    ("matrix", Q8B, "--chips", "M4 Pro"),
    ("pick", "--catalog", "--machine", M4PRO24),
    ("serve-plan", Q8B, "--machine", M4PRO24, "--ctx", "8k"),
])
def test_f8_piped_tables_have_no_trailing_spaces(args):
    r = mlxfit(*args)
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) > 5
    assert [ln for ln in lines if ln != ln.rstrip(" ")] == []


# ---------------------------------------------------------------- F4: measure
def _spawn_tty(*args: str, cols: int = 120):
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": str(cols), "TERM": "xterm"}
    p = subprocess.Popen([*MLXFIT_TAKING_CTRL_C, *args], stdout=slave, stderr=slave,
                         stdin=subprocess.DEVNULL, env=env, close_fds=True)
    os.close(slave)
    return p, master


def _read_until(master: int, p, seen: list[str], done, limit_s: float = 300) -> bool:
    """Read the terminal into `seen` until done(text) (True) or the process ends (False)."""
    import select
    import time

    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                seen.append(os.read(master, 65536).decode(errors="replace"))
            except OSError:
                return False
            if done("".join(seen)):
                return True
        elif p.poll() is not None:
            return False
    return False


def test_f4_measure_stops_on_ctrl_c_and_its_clock_moves_within_a_chunk():
    """A 0.6B 4-bit model on MLX's CPU backend spends minutes in its one prefill chunk: the
    clock must tick while it does, and a real SIGINT must end the run (exit 130)."""
    import re
    import signal

    pytest.importorskip("mlx_lm")
    p, master = _spawn_tty("measure", "mlx-community/Qwen3-0.6B-4bit", "--random-weights",
                           "--ctx", "1024", "--gen", "1")
    seen: list[str] = []
    try:
        clocks = re.compile(r"prefill 0 of [\d,]+ prompt tokens \(chunk 0 of 1\), (\d+) s")
        in_chunk = _read_until(master, p, seen, lambda t: len(set(clocks.findall(t))) >= 2)
        assert in_chunk, "".join(seen)[-2000:]
        os.kill(p.pid, signal.SIGINT)
        rc = p.wait(timeout=60)  # the chunk alone takes minutes: only a stop ends it here
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    assert rc == 130


def test_f4_unquantized_builds_the_config_without_its_quantization(tmp_path):
    pytest.importorskip("mlx_lm")
    cfg = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "intermediate_size": 128, "vocab_size": 256, "rms_norm_eps": 1e-6,
           "rope_theta": 10000, "max_position_embeddings": 4096, "tie_word_embeddings": True,
           "quantization": {"group_size": 64, "bits": 4}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    run = ("measure", str(tmp_path), "--random-weights", "--ctx", "64", "--gen", "2",
           "--dtype", "float32", "--json")
    q, u = mlxfit(*run), mlxfit(*run, "--unquantized")
    assert q.returncode == u.returncode == 0, (q.stderr, u.stderr)
    wq = {t["name"]: t for t in json.loads(q.stdout)["comparison"]}["weights"]
    du = json.loads(u.stdout)
    wu = {t["name"]: t for t in du["comparison"]}["weights"]
    assert wu["measured"] == wu["predicted"] > 4 * wq["measured"]  # float32 vs 4-bit
    assert not any("quantized" in w for w in du["warnings"])
    assert "--unquantized" in one_error_line(mlxfit("measure", str(tmp_path), "--ctx", "64",
                                                    "--unquantized"))


# ---------------------------------------------------------------- an mlx-lm older than 0.32
def _dist(root: Path, version: str) -> Path:
    """A real installed-package record of mlx-lm at `version` (what importlib.metadata reads)."""
    d = root / f"mlx_lm-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mlx-lm\nVersion: {version}\n")
    return root


@pytest.mark.parametrize("verb", [("fit", Q8B), ("serve-plan", Q8B, "--ctx", "8k"), ("pick",)])
def test_old_mlx_lm_on_this_machine_gets_one_warning(tmp_path, verb):
    old = _dist(tmp_path / "old", "0.20.1")
    new = _dist(tmp_path / "new", "0.32.9")
    hub = {"HF_HUB_CACHE": str(tmp_path / "hub")}  # pick scans an empty cache, not the user's
    env_old = {"PYTHONPATH": f"{old}{os.pathsep}{SRC}", **hub}
    r = mlxfit(*verb, "--json", env=env_old)
    warn = [w for w in json.loads(r.stdout)["warnings"] if "mlx-lm 0.20.1" in w]
    assert len(warn) == 1 and "0.32" in warn[0], r.stdout[-800:]
    # the text report says it on one line
    lines = [ln for ln in mlxfit(*verb, env=env_old).stdout.splitlines() if "0.20.1" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning:")
    # a named Mac is not this machine; 0.32 or newer is what mlxfit models
    named = mlxfit(*verb, "--machine", M4PRO24, "--json", env=env_old)
    assert "0.20.1" not in named.stdout
    current = mlxfit(*verb, "--json", env={"PYTHONPATH": f"{new}{os.pathsep}{SRC}", **hub})
    assert "mlxfit models mlx-lm" not in current.stdout


@pytest.mark.parametrize("verb", [("matrix", "--chips", "M4 Pro"), ("cluster", "--host", M4PRO24)])
def test_f9_model_flag_in_the_other_model_verbs(verb):
    a = mlxfit(verb[0], "--model", Q8B, *verb[1:], "--json")
    b = mlxfit(verb[0], Q8B, *verb[1:], "--json")
    assert a.returncode == b.returncode == 0, a.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout)
