"""A hostile or broken Hub (issue 13, classes 4, 5, 6 and 8), served for real on 127.0.0.1
(tests/hub_server.py): a server that drips a byte every few tenths of a second, a 206 held open
half-sent, a listing of 100,000 shards or of a 2^64-byte shard, credentials in HF_ENDPOINT, a
server that ignores Range. The CLI runs in a child process with a timeout (the bound) and, for
Ctrl-C, gets a real SIGINT while a request is in flight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_server import FakeHub
from st_helpers import M4PRO, MLXFIT_TAKING_CTRL_C, qwen_tiny

from mlxfit.sources.resolve import resolve_model

SRC = Path(__file__).resolve().parent.parent / "src"
SHA = "5" * 40


def cli(*args: str, timeout: float = 30, **env_extra: str):
    e = dict(os.environ, PYTHONPATH=str(SRC), **env_extra)
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "mlxfit", *args], env=e, capture_output=True,
                       text=True, timeout=timeout, check=False)
    print(f"BOUND {args[:2]} seconds={time.monotonic() - t:.2f}")
    return r


def one_error(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: "), r.stderr
    return lines[0]


def cache_files(env_dir: Path) -> list[Path]:
    root = env_dir / "mlxfit-cache"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# --- deadlines --------------------------------------------------------------------------------


def test_slow_drip_hits_the_request_deadline(server: FakeHub, tmp_path: Path,
                                             env: Path) -> None:
    """One byte every 0.2 s never trips the 10 s read timeout; the 1.5 s request deadline ends
    it. The child's timeout (20 s) is the bound a hang would cross."""
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    server.fault("/cdn/", drip=0.2)
    r = cli("fit", "acme/tiny", "--machine", M4PRO, timeout=20,
            MLXFIT_HUB_REQUEST_DEADLINE_SECONDS="1.5")
    msg = one_error(r)
    assert "too slow" in msg and "limit 1.5 s" in msg and "REQUEST_DEADLINE" in msg, msg
    assert not [p for p in cache_files(env) if p.name.endswith(".json.gz")]


def test_slow_drip_hits_the_fetch_deadline(server: FakeHub, tmp_path: Path,
                                           env: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    server.fault("/cdn/", drip=0.2)
    r = cli("fit", "acme/tiny", "--machine", M4PRO, timeout=20,
            MLXFIT_HUB_FETCH_DEADLINE_SECONDS="1")
    msg = one_error(r)
    assert "did not finish within 1 s" in msg or "limit 1 s" in msg, msg


def test_headers_dripped_forever_hit_the_fetch_deadline(server: FakeHub,
                                                        tmp_path: Path) -> None:
    """The model info's headers, a byte every 0.2 s: no read times out, the fetch deadline
    (1.5 s here) ends it; the model-info request runs on a daemon thread for this."""
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    server.fault("/api/models/", drip_headers=0.2)
    r = cli("fit", "acme/tiny", "--machine", M4PRO, timeout=20,
            MLXFIT_HUB_FETCH_DEADLINE_SECONDS="1.5")
    msg = one_error(r)
    assert "did not finish within 1.5 s" in msg, msg


def test_206_held_open_says_so(server: FakeHub, tmp_path: Path) -> None:
    """Headers and half the body, then silence: not "did not answer"."""
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    server.fault("/cdn/", hold=5)
    r = cli("fit", "acme/tiny", "--machine", M4PRO, timeout=20,
            HF_HUB_DOWNLOAD_TIMEOUT="1", MLXFIT_HUB_RETRIES="1")
    msg = one_error(r)
    assert "answered for acme/tiny/" in msg and "but then sent nothing for 1 s" in msg, msg
    assert "2 attempts" in msg and "s in all" in msg


CHILD_SIGINT = r"""
import sys, runpy
sys.argv = ["mlxfit"] + sys.argv[1:]
runpy.run_module("mlxfit", run_name="__main__")
"""


def test_ctrl_c_ends_the_fetch_and_caches_nothing(server: FakeHub, tmp_path: Path,
                                                  env: Path) -> None:
    """A real SIGINT to a real child while 3 shard reads drip: it exits 130 (interrupted, not
    finished), leaving no cache entry and no temporary file. How fast is printed (BOUND), not
    asserted: a loaded machine may take longer than the usual fraction of a second."""
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    server.fault("/cdn/", drip=0.5)
    p = subprocess.Popen([*MLXFIT_TAKING_CTRL_C, "fit", "acme/tiny", "--machine", M4PRO],
                         env=dict(os.environ, PYTHONPATH=str(SRC)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # until the header reads are in flight
            if len([e for e in server.requests("hub") if e.path.endswith(".safetensors")]) >= 3:
                time.sleep(0.3)
                break
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        print(f"BOUND sigint->exit seconds={time.monotonic() - t:.2f}")
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, (p.returncode, err)
    assert "Traceback" not in err
    assert cache_files(env) == [], cache_files(env)


# --- caps and sizes ---------------------------------------------------------------------------


def model_info(siblings: list[dict]) -> bytes:
    return json.dumps({"id": "acme/big", "sha": SHA, "siblings": siblings}).encode()


def test_a_hundred_thousand_shards_are_refused_before_any_is_read(server: FakeHub) -> None:
    names = [{"rfilename": f"model-{i:06d}-of-100000.safetensors", "size": 10**9}
             for i in range(1, 100_001)] + [{"rfilename": "config.json", "size": 100}]
    server.fault("/api/models/acme/big", status=200, body=model_info(names))
    r = cli("fit", "acme/big", "--machine", M4PRO)
    msg = one_error(r)
    assert "100,000 model*.safetensors files, more than the 4,096" in msg, msg
    assert len(server.requests()) == 1  # the model info, nothing else


@pytest.mark.parametrize("size", [2**64, 2**53 + 1])
def test_shard_size_past_2_to_the_53(server: FakeHub, size: int) -> None:
    names = [{"rfilename": "model.safetensors", "size": size},
             {"rfilename": "config.json", "size": 100}]
    server.fault("/api/models/acme/big", status=200, body=model_info(names))
    msg = one_error(cli("fit", "acme/big", "--machine", M4PRO))
    assert f"{size:,} bytes, past any real file" in msg, msg


# --- secrets ----------------------------------------------------------------------------------


def test_credentials_in_hf_endpoint_are_never_shown_nor_stored(server: FakeHub,
                                                               tmp_path: Path,
                                                               env: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    secret = "pa55SECRETword"
    ep = server.url.replace("http://", f"http://mirroruser:{secret}@")
    outs = [cli("fit", "acme/tiny", "--machine", M4PRO, "--verbose", HF_ENDPOINT=ep),
            cli("fit", "acme/tiny", "--machine", M4PRO, "--json", HF_ENDPOINT=ep,
                MLXFIT_HUB_REF_TTL_SECONDS="0"),
            cli("fit", "acme/missing", "--machine", M4PRO, HF_ENDPOINT=ep),  # 401/404 error
            cli("fit", "acme/tiny", "--machine", M4PRO, "--revision", "nope", HF_ENDPOINT=ep),
            cli("fit", "acme/other", "--machine", M4PRO,  # connection refused
                HF_ENDPOINT=f"http://mirroruser:{secret}@127.0.0.1:9")]
    assert outs[0].returncode == 0, outs[0].stderr
    assert [o.returncode for o in outs[2:]] == [2, 2, 2], [o.stderr for o in outs]
    for o in outs:
        assert secret not in o.stdout + o.stderr and "mirroruser" not in o.stdout + o.stderr
    files = cache_files(env)
    assert any(p.name.endswith(".json.gz") for p in files)
    for p in files:
        assert secret not in str(p) and "mirroruser" not in str(p)
        data = p.read_bytes()
        if p.name.endswith(".gz"):
            import gzip

            data = gzip.decompress(data)
        assert secret.encode() not in data and b"mirroruser" not in data


# --- messages ---------------------------------------------------------------------------------


def test_verbose_counts_bytes_sent_past_the_ranges(tmp_path: Path, env: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that ignores Range sends tensor data we never asked for: --verbose must not
    claim "no tensor data" then."""
    from huggingface_hub.utils import close_session

    with FakeHub(honor_range=False) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        s.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
        src = resolve_model("acme/tiny")
        close_session()
        sent = s.bytes_sent()
    t = src.transfer
    assert t is not None and t.unasked_bytes > 0 and t.bytes <= sent
    assert "no tensor data" not in t.describe()
    assert f"{t.unasked_bytes:,} bytes past the ranges asked" in t.describe()
