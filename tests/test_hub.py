"""Reading models from the Hugging Face Hub: a real HTTP server on 127.0.0.1 (tests/hub_server.py)
serving models built here, huggingface_hub pointed at it with HF_ENDPOINT.

Asserted from the server's side: which requests were made, the bytes it sent (headers and small
JSON, never tensor data), that a second run makes none, and each fault: 404, private, gated,
no safetensors, 429 then 200, 500 forever, slow answers, refused connections, a header longer
than its file, a connection cut mid-header. The token never appears in any output.
"""

from __future__ import annotations

import base64
import gzip
import json
import struct
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hub_server import FakeHub
from st_helpers import (
    ON_M4PRO,
    config_dict,
    invoke,
    make_folder,
    make_hf_cache,
    make_qwen3_8b_bf16,
    qwen_tiny,
    write_raw,
)

import mlxfit
from mlxfit.errors import ConfigError, MlxfitError, SourceError, WeightsError
from mlxfit.settings import HubSettings, Settings, from_environ
from mlxfit.sources.hub import fetch as mhub
from mlxfit.sources.hub import http as mhub_http
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.safetensors_header import read_headers

SENTINEL = "hf_SENTINELtokenZZZ0123456789abcdef"
FIRST_READ = 100_000  # bytes of a shard's first read (huggingface_hub's rule)


# --- environment ------------------------------------------------------------------------------


def with_hub(**kw) -> Settings:
    """The settings of the environment as it is now, with these HubSettings fields changed."""
    s = from_environ()
    return replace(s, hub=replace(s.hub, **kw))


RETRIES = HubSettings().retries


# --- models -----------------------------------------------------------------------------------


def qwen3_8b_bf16(root: Path, n_shards: int = 4) -> Path:
    """Qwen3-8B in bf16 (16.4 GB) as sparse shards: only headers occupy disk."""
    cfg = config_dict("Qwen__Qwen3-8B")
    return make_qwen3_8b_bf16(root, cfg, n_shards)


def header_len(path: Path) -> int:
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def shard_paths(folder: Path) -> list[Path]:
    return sorted(folder.glob("model*.safetensors"))


# --- what is fetched, and what is not ---------------------------------------------------------


def test_sharded_model_headers_only(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "tiny")
    sha = server.add_model("acme/tiny", folder)

    src = resolve_model("acme/tiny")

    assert src.kind == "hub" and src.name == "acme/tiny" and src.revision == sha
    assert src.location == f"{server.url}/acme/tiny/blob/{sha}"
    assert src.config == json.loads((folder / "config.json").read_text())
    assert list(src.tensors) == read_headers(shard_paths(folder))  # the local reader's answer
    assert src.files == tuple(f"{server.url}/acme/tiny/resolve/{sha}/{p.name}"
                              for p in shard_paths(folder))

    log = server.requests()
    info = [e for e in log if e.path.startswith("/api/models/")]
    assert len(info) == 1 and "blobs=true" in info[0].query
    jsons = sorted(e.path.rsplit("/", 1)[1] for e in log if e.path.endswith(".json"))
    assert jsons == ["config.json", "kv_config.json", "model.safetensors.index.json"]
    assert all(e.range is None for e in log if e.path.endswith(".json"))
    st = [e for e in log if e.path.endswith(".safetensors")]
    assert all(e.method == "GET" and e.range for e in st)  # never an unbounded GET of weights
    for p in shard_paths(folder):
        assert p.stat().st_size > FIRST_READ and 8 + header_len(p) <= FIRST_READ
        mine = sorted((e.server, e.range) for e in st if e.path.endswith(p.name))
        # one request: resolve -> 302 to the CDN, its first 100 KB hold the length and header
        assert mine == [("cdn", f"bytes=0-{FIRST_READ - 1}"), ("hub", f"bytes=0-{FIRST_READ - 1}")]
    assert not any(e.path.endswith("README.md") for e in log)

    header_bytes = sum(8 + header_len(p) for p in shard_paths(folder))
    json_bytes = sum((folder / n).stat().st_size for n in jsons)
    assert server.bytes_sent("cdn") == 3 * FIRST_READ
    assert server.bytes_sent() == 3 * FIRST_READ + json_bytes + info[0].sent
    t = src.transfer
    assert t is not None and not t.from_cache
    assert (t.requests, t.bytes) == (len(log), server.bytes_sent())
    assert (t.header_bytes, t.shards) == (header_bytes, 3)
    assert t.tail_bytes == 3 * FIRST_READ - header_bytes
    assert f"{t.tail_bytes:,} bytes past the headers" in t.describe()
    assert f"{t.bytes:,} bytes" in t.describe()
    # only the headers are kept
    (entry,) = env_cache(tmp_path).rglob("*.json.gz")
    shards = json.loads(gzip.decompress(entry.read_bytes()))["shards"]
    assert sorted(len(base64.b64decode(raw)) for _, _, raw in shards) == \
        sorted(8 + header_len(p) for p in shard_paths(folder))


def test_big_sparse_model_costs_kilobytes(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen3_8b_bf16(tmp_path / "q8b")
    server.add_model("Qwen/Qwen3-8B", folder)
    total = sum(p.stat().st_size for p in shard_paths(folder))
    assert total > 16e9

    r = mlxfit.fit("Qwen/Qwen3-8B", 4096, machine="M4 Max 64GB", verbose=True)

    assert r.source_kind == "hub"
    assert r.weights_bytes == sum(t.nbytes for t in read_headers(shard_paths(folder)))
    assert server.bytes_sent() < 500_000  # of 16.4 GB
    assert server.bytes_sent("cdn") == 4 * FIRST_READ
    assert any(n.startswith("read from the Hub:") for n in r.notes)


def test_single_file_model_and_notes(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "one", n_shards=1, index=False, kv_config=False)
    (folder / "consolidated.safetensors").write_bytes(b"")  # mlx-lm skips it; so do we
    server.add_model("acme/one", folder)

    src = resolve_model("acme/one")

    assert list(src.tensors) == read_headers([folder / "model.safetensors"])
    assert any("consolidated.safetensors" in n for n in src.notes)
    assert not any("consolidated" in e.path for e in server.requests())


def test_canonical_repo_without_org(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("tinyqwen", qwen_tiny(tmp_path / "t", n_shards=1))
    assert resolve_model("tinyqwen").kind == "hub"


def test_requests_run_in_parallel(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t", n_shards=12))
    server.latency = 0.2  # 28 requests, each 0.2 s in the server: overlaps are counted
    resolve_model("acme/tiny")
    assert len(server.requests()) == 28
    assert server.max_in_flight >= 4, server.max_in_flight  # shards are read side by side


def test_server_that_ignores_range_is_not_read_to_the_end(tmp_path: Path, env: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub.utils import close_session

    folder = qwen3_8b_bf16(tmp_path / "q8b", n_shards=2)
    with FakeHub() as s:
        s.honor_range = False
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        s.add_model("acme/q8b", folder)
        src = resolve_model("acme/q8b")
        close_session()
    assert list(src.tensors) == read_headers(shard_paths(folder))
    assert src.transfer is not None and src.transfer.bytes < 2_000_000  # of 16 GB offered


# --- the metadata cache -----------------------------------------------------------------------


def test_second_run_and_offline_make_no_request(server: FakeHub, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    first = resolve_model("acme/tiny")
    server.clear()

    again = resolve_model("acme/tiny")
    assert server.requests() == []
    assert again.tensors == first.tensors and again.config == first.config
    assert again.transfer is not None and again.transfer.from_cache
    assert again.transfer.requests == 0 and "no network" in again.transfer.describe()

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = resolve_model("acme/tiny")
    r = invoke("fit", "acme/tiny", "--ctx", "2048", *ON_M4PRO, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["source"] == "hub"
    assert offline.tensors == first.tensors
    assert server.requests() == []


def test_offline_and_not_cached_never_asks(server: FakeHub, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceError) as e:
        resolve_model("acme/tiny")
    msg = str(e.value)
    assert "acme/tiny not found" in msg and "HF_HUB_OFFLINE=1" in msg
    assert "the Hub was not asked" in msg and str(env_cache(tmp_path)) in msg
    assert server.requests() == []


def env_cache(tmp_path: Path) -> Path:
    return tmp_path / "mlxfit-cache" / "hub"


def test_offline_frozen_in_huggingface_hub(server: FakeHub, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE set when huggingface_hub was imported, unset since: its own guard
    stops the request, and the message says why."""
    import huggingface_hub.constants as hfc

    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", True)
    with pytest.raises(SourceError, match="offline mode"):
        resolve_model("acme/tiny")
    assert server.requests() == []


def test_branch_is_rechecked_after_ttl_and_follows_new_commits(server: FakeHub,
                                                                 tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "a"))
    first = mhub.fetch_model("acme/tiny")
    server.clear()

    same = mhub.fetch_model("acme/tiny", ref_ttl=0)  # stale ref: one request, same commit
    assert [e.path for e in server.requests()] == ["/api/models/acme/tiny"]
    assert same.transfer is not None and same.transfer.from_cache and same.transfer.requests == 1
    assert same.tensors == first.tensors

    new = server.add_model("acme/tiny", qwen_tiny(tmp_path / "b", width=512))
    moved = mhub.fetch_model("acme/tiny", ref_ttl=0)
    assert moved.revision == new and moved.tensors != first.tensors
    server.clear()
    assert mhub.fetch_model("acme/tiny").revision == new and server.requests() == []


def test_hub_unreachable_falls_back_to_stale_cache(server: FakeHub, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    first = mhub.fetch_model("acme/tiny")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    server.fault("/api/models/", status=503)
    src = mhub.fetch_model("acme/tiny", ref_ttl=0)
    assert src.tensors == first.tensors
    assert any("could not check the Hub for a newer commit" in n for n in src.notes)


def test_revisions_tags_and_commits(server: FakeHub, tmp_path: Path) -> None:
    main = server.add_model("acme/tiny", qwen_tiny(tmp_path / "a"))
    v2 = server.add_model("acme/tiny", qwen_tiny(tmp_path / "b", width=512), revision="v2")
    server.repos["acme/tiny"].refs["main"] = main

    a = resolve_model("acme/tiny")
    b = resolve_model("acme/tiny", revision="v2")
    assert (a.revision, b.revision) == (main, v2)
    assert list(b.tensors) == read_headers(shard_paths(tmp_path / "b"))
    assert any(e.path == "/api/models/acme/tiny/revision/v2" for e in server.requests())

    server.clear()
    assert resolve_model("acme/tiny", revision=v2).tensors == b.tensors  # by sha: cached
    assert resolve_model("acme/tiny", revision="v2").tensors == b.tensors
    assert server.requests() == []

    with pytest.raises(SourceError, match="revision v9 not found in acme/tiny"):
        resolve_model("acme/tiny", revision="v9")


def test_hf_cache_comes_first_then_the_hub_for_an_uncached_revision(server: FakeHub,
                                                                     tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t", n_shards=1, index=False, kv_config=False)
    v2 = server.add_model("acme/tiny", folder, revision="v2")
    make_hf_cache(tmp_path / "hf-cache", "acme/tiny",
                  {"config.json": (folder / "config.json").read_bytes(),
                   "model.safetensors": {"w": ("BF16", [8])}}, commit="c" * 40)

    assert resolve_model("acme/tiny").kind == "hf-cache"
    assert server.requests() == []
    src = resolve_model("acme/tiny", revision="v2")  # not in the HF cache: the Hub has it
    assert src.kind == "hub" and src.revision == v2


def test_corrupt_cache_entry(server: FakeHub, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    sha = server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    first = resolve_model("acme/tiny")
    entries = list(env_cache(tmp_path).rglob(f"{sha}.json.gz"))
    assert len(entries) == 1
    entries[0].write_bytes(gzip.compress(b"{not json"))

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceError, match="corrupt"):
        resolve_model("acme/tiny")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    again = resolve_model("acme/tiny")  # online: read again and repaired
    assert again.tensors == first.tensors and not again.transfer.from_cache


# --- faults -----------------------------------------------------------------------------------


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_not_found_without_and_with_token(server: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SourceError) as e:
        resolve_model("acme/nope")
    msg = one_line(e)
    assert "acme/nope not found on the Hub" in msg and "(401)" in msg and "private" in msg
    assert "hf auth login" in msg and "HF_TOKEN" in msg

    server.valid_tokens.add(SENTINEL)
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    with pytest.raises(SourceError) as e:
        resolve_model("acme/nope")
    assert "acme/nope not found on the Hub" in one_line(e) and "(404" in str(e.value)
    assert len(server.requests()) == 2  # one model-info request each, no retry


def test_private_repo(server: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/secret", qwen_tiny(tmp_path / "t"), private=True, granted=(SENTINEL,))
    with pytest.raises(SourceError, match="or it is private: if you have access, log in"):
        resolve_model("acme/secret")
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    assert resolve_model("acme/secret").kind == "hub"


def test_gated_repo(server: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("meta/gated", qwen_tiny(tmp_path / "t"), gated=True, granted=("hf_granted",))
    server.valid_tokens.add(SENTINEL)

    with pytest.raises(SourceError) as e:  # not logged in
        resolve_model("meta/gated")
    msg = one_line(e)
    assert "meta/gated is gated (401)" in msg and "hf auth login" in msg and "HF_TOKEN" in msg
    assert f"request access on {server.url}/meta/gated" in msg and "granted" in msg

    monkeypatch.setenv("HF_TOKEN", SENTINEL)  # logged in, not granted
    with pytest.raises(SourceError) as e:
        resolve_model("meta/gated")
    assert "has not been granted access (403)" in one_line(e)
    assert f"{server.url}/meta/gated" in str(e.value)

    server.clear()
    monkeypatch.delenv("HF_TOKEN")  # granted, through the stored login
    import huggingface_hub.constants as hfc

    Path(hfc.HF_TOKEN_PATH).write_text("hf_granted")
    src = resolve_model("meta/gated")
    assert src.kind == "hub"
    assert all(e.authorization == "Bearer hf_granted" for e in server.requests("hub"))
    assert all(e.authorization is None for e in server.requests("cdn"))  # never to the CDN


@pytest.mark.parametrize("files, needles", [
    ({"README.md": b"x", "tiny-Q4_K_M.gguf": b"GGUF", "tiny-Q8_0.gguf": b"GGUF"},
     ["GGUF", "tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "README.md", "conversion"]),
    ({"config.json": b"{}", "pytorch_model.bin": b"x"}, ["PyTorch .bin", "pytorch_model.bin"]),
    ({"config.json": b"{}", "weights.safetensors": b"x"}, ["weights.safetensors",
                                                            "model*.safetensors"]),
])
def test_no_safetensors_lists_files(server: FakeHub, tmp_path: Path, files: dict,
                                    needles: list[str]) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    server.add_model("acme/other", folder)
    with pytest.raises(WeightsError) as e:
        resolve_model("acme/other")
    msg = one_line(e)
    assert "no model*.safetensors on the Hub" in msg
    for n in needles:
        assert n in msg
    assert len(server.requests()) == 1  # model info only: nothing else to read


def test_no_config_json(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t", n_shards=1, index=False, kv_config=False)
    (folder / "config.json").unlink()
    server.add_model("acme/noconfig", folder)
    with pytest.raises(ConfigError, match="no config.json on the Hub"):
        resolve_model("acme/noconfig")


def test_429_then_200_is_retried(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t")
    server.add_model("acme/tiny", folder)
    server.fault("/api/models/", status=429, headers={"Retry-After": "0"}, times=2)
    server.fault("model-00002-of-00003", status=503, range_start=8, times=1)
    src = resolve_model("acme/tiny")
    assert list(src.tensors) == read_headers(shard_paths(folder))
    statuses = [e.status for e in server.requests() if e.path.startswith("/api/models/")]
    assert statuses == [429, 429, 200]
    assert src.transfer.requests == len(server.requests())


def test_500_forever_gives_up_after_bounded_retries(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("/config.json", status=500)
    with pytest.raises(mhub_http.HubUnreachable) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert "answered 500" in msg and "acme/tiny/config.json" in msg
    assert f"{RETRIES + 1} times" in msg and "HF_HUB_OFFLINE=1" in msg
    asked = [r for r in server.requests() if r.path.endswith("/config.json")]
    assert len(asked) == RETRIES + 1
    assert list(env_cache(tmp_path).rglob("*.json.gz")) == []  # nothing cached from a failure


def test_slow_server_times_out(server: FakeHub, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("/api/models/", delay=1.5)
    with pytest.raises(mhub_http.HubUnreachable) as e:
        resolve_model("acme/tiny", settings=with_hub(timeout=0.2, retries=1))
    msg = one_line(e)
    assert "did not answer within 0.2 s" in msg and "2 attempts" in msg
    assert "HF_HUB_OFFLINE=1 works for models already cached" in msg


def test_slow_but_in_time_is_fine(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("model-00001", delay=0.3)
    assert resolve_model("acme/tiny").kind == "hub"


def test_refused_connection(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(mhub_http.HubUnreachable) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert f"cannot reach the Hub at http://127.0.0.1:{port}" in msg
    assert "HF_HUB_OFFLINE=1 works for models already cached" in msg
    assert "attempts" not in msg  # refused is not retried


def test_header_larger_than_the_file(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t")
    bad = folder / "model-00002-of-00003.safetensors"
    write_raw(bad, {"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, 4,
              length=10_000_000)
    sha = server.add_model("acme/tiny", folder)
    with pytest.raises(WeightsError) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert msg.startswith(f"acme/tiny@{sha[:12]}/model-00002-of-00003.safetensors: ")
    size = bad.stat().st_size
    assert f"header length runs past the end of the file, {size} bytes" in msg
    mine = [r for r in server.requests() if r.path.endswith(bad.name)]
    assert size < FIRST_READ
    assert [(r.server, r.range) for r in mine] == [("hub", f"bytes=0-{size - 1}"),
                                                   ("cdn", f"bytes=0-{size - 1}")]
    assert sum(r.sent for r in mine) == size  # the first read only: the header never asked


def test_invalid_header_named_like_a_local_file(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t")
    write_raw(folder / "model-00003-of-00003.safetensors", b"{not json", 0)
    sha = server.add_model("acme/tiny", folder)
    with pytest.raises(WeightsError, match=rf"^acme/tiny@{sha[:12]}/model-00003-of-00003"
                                           r"\.safetensors: header is not valid JSON"):
        resolve_model("acme/tiny")


def test_missing_shard_listed_in_index(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t")
    (folder / "model-00003-of-00003.safetensors").unlink()
    sha = server.add_model("acme/tiny", folder)
    with pytest.raises(WeightsError) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert "missing shard model-00003-of-00003.safetensors" in msg
    assert f"acme/tiny@{sha[:12]}/model.safetensors.index.json" in msg and "/tmp" not in msg


def test_connection_cut_mid_header(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t")
    server.add_model("acme/tiny", folder)
    server.fault("model-00001-of-00003", server="cdn", drop=True)
    with pytest.raises(mhub_http.HubUnreachable) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert "connection cut while reading acme/tiny/model-00001-of-00003.safetensors" in msg
    assert f"{RETRIES + 1} attempts" in msg


def test_connection_cut_once_is_retried(server: FakeHub, tmp_path: Path) -> None:
    folder = qwen_tiny(tmp_path / "t")
    server.add_model("acme/tiny", folder)
    server.fault("model-00001-of-00003", server="cdn", drop=True, times=1)
    assert list(resolve_model("acme/tiny").tensors) == read_headers(shard_paths(folder))


@pytest.mark.parametrize("body", [b"<html>maintenance</html>", b"[]", b'{"sha": "x"}',
                                  b"[" * 100_000])
def test_unreadable_model_info(server: FakeHub, body: bytes) -> None:
    server.fault("/api/models/", status=200, body=body)
    with pytest.raises(SourceError, match="sent an unreadable model info for acme/x"):
        resolve_model("acme/x")


def test_json_file_too_large_is_not_read(server: FakeHub, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    with pytest.raises(WeightsError, match="not the small JSON file mlxfit expects"):
        resolve_model("acme/tiny", settings=with_hub(max_json_bytes=100))
    assert not any(e.path.endswith(".json") for e in server.requests())


def long_header_model(root: Path, layers: int = 160) -> Path:
    """Two shards: one whose header is longer than the first read (all the layers), one
    whose header is short (the embedding and the norm)."""
    cfg = config_dict("Qwen__Qwen3-0.6B")
    cfg["num_hidden_layers"] = layers
    layer: dict = {}
    for i in range(layers):
        p = f"model.layers.{i}."
        layer.update({p + "self_attn.q_proj.weight": ("BF16", [2048, 1024]),
                      p + "self_attn.k_proj.weight": ("BF16", [1024, 1024]),
                      p + "self_attn.v_proj.weight": ("BF16", [1024, 1024]),
                      p + "self_attn.o_proj.weight": ("BF16", [1024, 2048]),
                      p + "mlp.up_proj.weight": ("BF16", [3072, 1024]),
                      p + "mlp.gate_proj.weight": ("BF16", [3072, 1024]),
                      p + "mlp.down_proj.weight": ("BF16", [1024, 3072]),
                      p + "input_layernorm.weight": ("BF16", [1024])})
    rest = {"model.embed_tokens.weight": ("BF16", [151936, 1024]),
            "model.norm.weight": ("BF16", [1024])}
    return make_folder(root, cfg, {"model-00001-of-00002.safetensors": layer,
                                   "model-00002-of-00002.safetensors": rest}, index=True)


@pytest.mark.parametrize("bound", [True, "hang"])
def test_second_read_goes_to_the_resolve_url_not_the_signed_link(
        tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch, bound: bool | str) -> None:
    """Today's Hub: signed CDN links bound to the range they were first used with (another
    range: 403, or no answer). A header longer than the first read is finished through the
    resolve URL (a fresh link); a short one costs one request."""
    from huggingface_hub.utils import close_session

    folder = long_header_model(tmp_path / "long")
    big, small = shard_paths(folder)
    n = header_len(big)
    assert 8 + n > FIRST_READ > 8 + header_len(small)
    with FakeHub(range_bound=bound, json_redirect=True) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        hub.add_model("acme/long", folder)
        src = resolve_model("acme/long", settings=with_hub(timeout=3, retries=1))
        close_session()
    assert list(src.tensors) == read_headers([big, small])
    log = hub.requests()
    assert all(e.status < 400 for e in log), [(e.path, e.status) for e in log]
    mine = [(e.server, e.range) for e in log if e.path.endswith(big.name)]
    assert sorted(mine) == sorted([("hub", f"bytes=0-{FIRST_READ - 1}"),
                                   ("cdn", f"bytes=0-{FIRST_READ - 1}"),
                                   ("hub", f"bytes={FIRST_READ}-{7 + n}"),
                                   ("cdn", f"bytes={FIRST_READ}-{7 + n}")])
    assert sorted(e.server for e in log if e.path.endswith(small.name)) == ["cdn", "hub"]
    links = [e.query for e in log if e.server == "cdn"]
    assert len(links) == len(set(links)) == 3  # each signed link used once
    # small JSON files by a 307 to /api/resolve-cache, followed with the token kept
    assert sum(1 for e in log if e.path.startswith("/api/resolve-cache/")) == 2


def test_not_a_repo_id_is_never_asked(server: FakeHub) -> None:
    with pytest.raises(SourceError, match="not a Hugging Face repo id"):
        resolve_model("a--b")
    assert server.requests() == []


# --- the CLI, the token, progress -------------------------------------------------------------


def test_cli_fit_from_the_hub_and_faults_exit_2(server: FakeHub, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    r = invoke("fit", "acme/tiny", "--ctx", "2048", *ON_M4PRO, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["source"] == "hub"

    server.fault("/api/models/acme/down", status=502)
    for model, needle in [("acme/nope", "not found"), ("acme/down", "answered 502")]:
        r = invoke("fit", model, *ON_M4PRO)
        lines = [ln for ln in r.output.strip().splitlines() if ln]
        assert r.exit_code == 2 and len(lines) == 1 and needle in lines[0], r.output
        assert "Traceback" not in r.output


def test_token_never_appears(server: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capfd: pytest.CaptureFixture) -> None:
    """HF_TOKEN set to a sentinel, every fault from the CLI and the API: it reaches the Hub's
    origin (so the check means something) and no output, message or note."""
    folder = qwen_tiny(tmp_path / "t")
    server.valid_tokens.add(SENTINEL)
    server.add_model("acme/tiny", folder)
    server.add_model("meta/gated", folder, gated=True)
    server.add_model("acme/slow", folder)
    server.add_model("acme/cut", folder)
    server.add_model("acme/flaky", folder)
    server.add_model("acme/secret", folder, private=True, granted=(SENTINEL,))
    server.fault("/api/models/acme/flaky", status=503)
    server.fault("acme/cut/", drop=True, range_start=8)
    server.fault("/api/models/acme/slow", delay=1.0)
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "0.2")  # huggingface_hub already imported
    monkeypatch.setenv("MLXFIT_HUB_RETRIES", "1")

    seen: list[str] = []
    for model in ("acme/nope", "meta/gated", "acme/slow", "acme/cut", "acme/flaky",
                  "acme/secret", "acme/tiny"):
        r = invoke("fit", model, "--ctx", "1024", *ON_M4PRO)
        seen.append(r.output)
        try:
            src = resolve_model(model)
            seen.extend(src.notes)
            seen.append(src.transfer.describe())
        except MlxfitError as e:
            seen.append(str(e))
            seen.append(repr(e))
    out, err = capfd.readouterr()
    seen += [out, err]
    assert any(e.authorization == f"Bearer {SENTINEL}" for e in server.requests("hub"))
    assert all(e.authorization is None for e in server.requests("cdn"))
    assert all(SENTINEL not in s for s in seen)
    for p in env_cache(tmp_path).rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert SENTINEL.encode() not in (gzip.decompress(data) if p.suffix == ".gz" else data)


def test_progress_is_silent_off_a_terminal(server: FakeHub, tmp_path: Path,
                                           capfd: pytest.CaptureFixture) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    capfd.readouterr()
    resolve_model("acme/tiny", progress=True)
    assert capfd.readouterr() == ("", "")


def test_progress_on_a_terminal(server: FakeHub, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With a terminal, the shards are counted (Rich, transient) and the display is closed."""
    import rich.progress

    started: list[rich.progress.Progress] = []
    real_start = rich.progress.Progress.start

    def start(self):
        started.append(self)
        real_start(self)

    monkeypatch.setattr(rich.progress.Progress, "start", start)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "0")
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    resolve_model("acme/tiny", progress=True)
    if not started:
        pytest.skip("Rich does not treat this stderr as a terminal")
    (p,) = started
    assert not p.live.is_started
    assert [(t.completed, t.total) for t in p.tasks] == [(3, 3)]


# --- rate limits (today's Hub: RateLimit r=0;t=N, no Retry-After) ------------------------------


def test_rate_limit_window_is_waited_out(tmp_path: Path, env: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolvers bucket of 4 requests a 1-second window: the fetch needs 1 + 6, so some get
    429 with `RateLimit: "resolvers";r=0;t=1` and no Retry-After. They wait for the window
    (our own backoff here is 5-20 ms, far shorter) and the fetch succeeds."""
    from huggingface_hub.utils import close_session

    folder = qwen_tiny(tmp_path / "t")
    with FakeHub(quota={"resolvers": 4}, window=1.0) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        hub.add_model("acme/tiny", folder)
        src = resolve_model("acme/tiny", settings=with_hub(retries=2))
        close_session()
    assert list(src.tensors) == read_headers(shard_paths(folder))
    limited = [e for e in hub.requests("hub") if e.status == 429]
    assert limited and all("/resolve/" in e.path for e in limited)


@pytest.mark.parametrize("headers", [{"RateLimit": '"api";r=0;t=100000'},
                                     {"Retry-After": "9" * 5000},
                                     {"Retry-After": "301"}])
def test_a_wait_past_the_cap_fails_at_once_in_one_line(server: FakeHub, tmp_path: Path,
                                                       headers: dict) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("/api/models/", status=429, headers=headers, times=1)
    with pytest.raises(mhub_http.HubUnreachable) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert "answered 429" in msg and "asked to wait" in msg and "300 s" in msg, msg
    assert "HF_TOKEN" in msg and len(msg) < 400
    assert len(server.requests()) == 1  # not retried: the answer would be the same


def test_a_wait_past_the_fetch_deadline_fails_at_once(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("/api/models/", status=429, headers={"RateLimit": '"api";r=0;t=120'},
                 times=1)
    with pytest.raises(mhub_http.HubUnreachable) as e:
        resolve_model("acme/tiny", settings=with_hub(fetch_deadline_seconds=30))
    msg = one_line(e)
    assert "asked to wait 121 s" in msg and "MLXFIT_HUB_FETCH_DEADLINE_SECONDS" in msg, msg
    assert len(server.requests()) == 1


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "soon", "Wed, 99 Foo 2026 99:99:99 GMT",
                                   "-5", "1e9", ""])
def test_unreadable_retry_after_is_backoff(server: FakeHub, tmp_path: Path, value: str) -> None:
    """A Retry-After that is no number of seconds (a superscript two is a Unicode digit) and no
    HTTP date: our own backoff, then success; never a traceback."""
    folder = qwen_tiny(tmp_path / "t")
    server.add_model("acme/tiny", folder)
    raw = value.encode("utf-8").decode("latin-1")  # http.server writes headers as latin-1
    server.fault("/api/models/", status=429, headers={"Retry-After": raw}, times=1)
    assert list(resolve_model("acme/tiny").tensors) == read_headers(shard_paths(folder))


def test_rate_limited_cli_is_one_line_exit_2(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("/api/models/", status=429, headers={"Retry-After": "\u00b2".encode()
                                                      .decode("latin-1")})
    r = invoke("fit", "acme/tiny", *ON_M4PRO)
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert r.exit_code == 2 and len(lines) == 1 and "answered 429" in lines[0], r.output


# --- the token: its sources, and a Hub that echoes it -----------------------------------------


def test_broken_oidc_resource_is_one_line(server: FakeHub, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_OIDC_RESOURCE set outside a CI that mints id tokens: huggingface_hub's get_token()
    raises; one line, exit 2, and the Hub is not asked."""
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    monkeypatch.setenv("HF_OIDC_RESOURCE", "acme/tiny")
    monkeypatch.delenv("HF_OIDC_ID_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("ACTIONS_ID_TOKEN_REQUEST_URL", raising=False)
    r = invoke("fit", "acme/tiny", *ON_M4PRO)
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "cannot get the Hugging Face token (HF_OIDC_RESOURCE is set)" in lines[0]
    assert server.requests() == []


def test_token_file_that_is_a_fifo_never_hangs(server: FakeHub, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import huggingface_hub.constants as hfc

    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    fifo = tmp_path / "token-fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(hfc, "HF_TOKEN_PATH", str(fifo))
    with pytest.raises(SourceError, match="token-fifo \\(HF_TOKEN_PATH\\) is not a regular file"):
        resolve_model("acme/tiny")
    assert server.requests() == []


def test_token_echoed_by_the_hub_is_never_printed_or_cached(
        server: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture) -> None:
    """The Hub echoes the token into config.json, a header's metadata and a file name."""
    folder = qwen_tiny(tmp_path / "t")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["_name_or_path"] = SENTINEL
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / f"notes-{SENTINEL}.safetensors").write_bytes(b"")
    shard = folder / "model-00003-of-00003.safetensors"
    raw = shard.read_bytes()[: 8 + header_len(shard)]
    header = json.loads(raw[8:])
    header["__metadata__"] = {"who": SENTINEL}
    write_raw(shard, header, shard.stat().st_size - len(raw))
    server.valid_tokens.add(SENTINEL)
    server.add_model("acme/echo", folder)
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    capfd.readouterr()
    r = invoke("fit", "acme/echo", "--ctx", "1024", *ON_M4PRO, "--verbose")
    out, err = capfd.readouterr()
    r2 = invoke("fit", "acme/echo", "--ctx", "1024", *ON_M4PRO, "--json", "--verbose")
    assert r.exit_code in (0, 1) and r2.exit_code in (0, 1), r.output + r2.output
    assert any(e.authorization == f"Bearer {SENTINEL}" for e in server.requests("hub"))
    assert server.bytes_sent("hub") > 0
    for text in (r.output, r2.output, out, err):
        assert SENTINEL not in text
    entries = list(env_cache(tmp_path).rglob("*.json.gz"))
    assert entries
    for p in entries:
        assert SENTINEL.encode() not in gzip.decompress(p.read_bytes())
        assert b"*" * len(SENTINEL) in base64.b64decode(
            json.loads(gzip.decompress(p.read_bytes()))["files"]["config.json"])


# --- a Hugging Face cache holding only config.json ----------------------------------------------


def test_config_only_hf_cache_asks_the_hub(server: FakeHub, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """What AutoConfig.from_pretrained leaves (config.json, no weights) is not the model: the
    Hub is asked for the rest, and a note says why; offline, one line says so."""
    folder = qwen_tiny(tmp_path / "t")
    sha = server.add_model("acme/tiny", folder)
    make_hf_cache(tmp_path / "hf-cache", "acme/tiny",
                  {"config.json": (folder / "config.json").read_bytes()}, commit=sha)

    src = resolve_model("acme/tiny")

    assert src.kind == "hub" and src.revision == sha
    assert list(src.tensors) == read_headers(shard_paths(folder))
    assert any("no model*.safetensors (only the config was downloaded)" in n for n in src.notes)
    assert len(server.requests()) > 1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MLXFIT_CACHE_DIR", str(tmp_path / "empty-cache"))
    server.clear()
    r = invoke("fit", "acme/tiny", *ON_M4PRO)
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "only the config was downloaded" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]
    assert server.requests() == []


# --- bounds: counts and depths read from names, numbers from headers, revisions ------------------


HUGE_OF = "model-00001-of-99999999999.safetensors"


def test_shard_name_claiming_billions_of_shards(server: FakeHub, tmp_path: Path) -> None:
    """Locally and on the Hub: refused in one line, before the missing ones are listed (or,
    on the Hub, before any shard is asked for)."""
    folder = qwen_tiny(tmp_path / "t", n_shards=1, index=False, kv_config=False)
    (folder / "model.safetensors").rename(folder / HUGE_OF)
    with pytest.raises(WeightsError) as e:
        resolve_model(str(folder))
    assert HUGE_OF in one_line(e) and "100,000" in one_line(e)

    server.add_model("acme/huge", folder)
    with pytest.raises(WeightsError) as e:
        resolve_model("acme/huge")
    assert one_line(e).startswith("acme/huge@") and HUGE_OF in one_line(e)
    assert [r.path for r in server.requests()] == ["/api/models/acme/huge"]


def test_sibling_names_hundreds_of_levels_deep(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/deep", qwen_tiny(tmp_path / "t"))
    info = json.dumps({"sha": "a" * 40, "siblings": [
        {"rfilename": "config.json", "size": 10},
        {"rfilename": "model.safetensors", "size": 100},
        *({"rfilename": "d/" * 400 + f"x{i}.safetensors", "size": 1} for i in range(50))]})
    server.fault("/api/models/acme/deep", status=200, body=info.encode())
    staged = sorted(Path(tempfile.gettempdir()).glob("mlxfit-hub-*"))
    with pytest.raises(WeightsError) as e:
        resolve_model("acme/deep")
    assert "more than 32 folders deep" in one_line(e)
    assert len(server.requests()) == 1
    assert sorted(Path(tempfile.gettempdir()).glob("mlxfit-hub-*")) == staged


def test_content_range_of_5000_digits(server: FakeHub, tmp_path: Path) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    server.fault("/cdn/", status=206, body=b"\0" * 8,
                 headers={"Content-Range": "bytes 0-7/" + "9" * 5000})
    with pytest.raises(WeightsError) as e:
        resolve_model("acme/tiny")
    msg = one_line(e)
    assert "unreadable Content-Range" in msg and "5,010 characters" in msg and len(msg) < 300


@pytest.mark.parametrize("rev", ["..", "../main", "refs/../main", "", "a b", "main\n",
                                 "@{1}", "x" * 300, "/main", "main/", ".hidden", "v1.lock",
                                 "a:b", "a\\b"])
def test_malformed_revision_is_refused_never_main(server: FakeHub, tmp_path: Path,
                                                  rev: str) -> None:
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"))
    r = invoke("fit", "acme/tiny", "--revision", rev, *ON_M4PRO)
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "--revision" in lines[0] and "is not a branch, tag or commit name" in lines[0]
    assert server.requests() == []


@pytest.mark.parametrize("rev", ["main", "v1.0", "refs/pr/1", "a" * 40, "release-2026.12"])
def test_wellformed_revisions_pass(server: FakeHub, tmp_path: Path, rev: str) -> None:
    sha = server.add_model("acme/tiny", qwen_tiny(tmp_path / "t"), revision=rev,
                           commit="a" * 40 if rev == "a" * 40 else None)
    assert resolve_model("acme/tiny", revision=rev).revision == sha
