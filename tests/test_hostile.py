"""Hostile and broken input: every parser ends in a result or one clean error line.

The contract (issue 8): bad input gives a result, or an MlxfitError whose message is one line
naming the file or flag (the CLI prints it and exits 2); never a traceback, a hang, unbounded
memory, or a silently wrong number. Property tests (hypothesis) explore each parser; the
regression tests pin the crashes found so far (docs/hardening.md has the inputs); the last
section runs the atheris targets in fuzz/ for a few seconds each when atheris is installed.

Budget: the whole file runs in well under 30 s on 2 cores (bounded examples, deadline=None).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import shutil
import stat
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from st_helpers import (
    CONFIGS,
    ON_M4PRO,
    header_for,
    invoke,
    make_folder,
    make_hf_cache,
    write_raw,
    write_sparse,
)

import mlxfit
from mlxfit.errors import ConfigError, MlxfitError, SourceError, WeightsError
from mlxfit.estimate.memory import Run, kv_term
from mlxfit.model.families import FAMILIES, FAMILY_ALIASES, MLX_LM_REMAPPING
from mlxfit.model.parse import parse_config
from mlxfit.model.tensors import DTYPE_BYTES
from mlxfit.model.weights import summarize_weights
from mlxfit.sources import catalog
from mlxfit.sources.folder import read_config
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.safetensors_header import (
    MAX_HEADER_BYTES,
    _read_open,
    read_header,
    read_headers,
)

REPO = Path(__file__).resolve().parent.parent
QWEN3_8B = json.loads((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
NEMOTRON = json.loads((CONFIGS / "nvidia__Nemotron-H-56B-Base-8K.json").read_text())
ALL_CONFIGS = [json.loads(p.read_text()) for p in sorted(CONFIGS.glob("*.json"))]
CATALOG_MODEL = "mlx-community/Qwen3-8B-4bit"

# Bounded, reproducible-on-failure, no .hypothesis/ directory written into the checkout.
# tmp_path is shared by a test's examples on purpose: each one overwrites the same files.
FAST = settings(max_examples=150, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
SLOW = settings(FAST, max_examples=40)


def one_line(e: BaseException, *fragments: str) -> str:
    msg = str(e)
    assert msg and "\n" not in msg and "\r" not in msg, f"not one line: {msg!r}"
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


def write_file(path: Path, raw: bytes) -> Path:
    path.write_bytes(raw)
    return path


def frame(header: bytes | dict, data_size: int = 0, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + b"\0" * data_size


def assert_exact(path: Path, tensors) -> None:
    """A header we accept describes the file exactly: sizes from dtype x shape, and together
    they tile the data region (so the total mlxfit reports is the file's, byte for byte)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    for t in tensors:
        assert t.nbytes == DTYPE_BYTES[t.dtype] * math.prod(t.shape), t
    assert sum(t.nbytes for t in tensors) == len(raw) - 8 - n


def read_or_clean_error(path: Path):
    try:
        tensors = read_header(path)
    except WeightsError as e:
        one_line(e, str(path))
        return None
    assert_exact(path, tensors)
    return tensors


def assert_clean_exit_2(r, *fragments: str) -> str:
    """The CLI contract: exit 2, one stderr line 'mlxfit: error: ...', no traceback."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlxfit: error: "), r.stderr
    for f in fragments:
        assert f in lines[0], f"{f!r} not in {lines[0]!r}"
    return lines[0]


# ============================================================================ safetensors header


@FAST
@given(data=st.binary(max_size=600))
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    read_or_clean_error(write_file(tmp_path / "model.safetensors", data))


@FAST
@given(n=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 300),
                   st.sampled_from([MAX_HEADER_BYTES, MAX_HEADER_BYTES + 1, 2**63, 2**64 - 1])),
       body=st.binary(max_size=300))
def test_any_declared_length(tmp_path: Path, n: int, body: bytes) -> None:
    p = write_file(tmp_path / "model.safetensors", struct.pack("<Q", n) + body)
    if read_or_clean_error(p) is not None:
        assert 0 < n <= len(body)


@pytest.mark.parametrize("n", [2**64 - 1, 2**63, MAX_HEADER_BYTES, MAX_HEADER_BYTES - 1])
def test_declared_length_allocates_nothing(tmp_path: Path, n: int) -> None:
    """A declared length is checked against the file size before anything is read into memory."""
    p = write_file(tmp_path / "model.safetensors", struct.pack("<Q", n) + b'{"a": 1}')
    tracemalloc.start()
    try:
        with pytest.raises(WeightsError) as info:
            read_header(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    one_line(info.value, str(p))
    assert peak < 256 * 1024, peak


DIMS = st.lists(st.integers(0, 9), max_size=3)
SPECS = st.dictionaries(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12).filter(
        lambda s: s != "__metadata__"),
    st.tuples(st.sampled_from(sorted(DTYPE_BYTES)), DIMS),
    max_size=8,
)


def spec_header(spec, order) -> tuple[dict, int]:
    """Header with offsets laid out in `order` (a permutation of the names): the file order of
    the tensor bytes need not follow the header's key order."""
    header = {}
    off = 0
    for name in order:
        dtype, shape = spec[name]
        n = DTYPE_BYTES[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    return {k: header[k] for k in spec}, off


@FAST
@given(spec=SPECS, data=st.data())
def test_valid_headers_read_exactly(tmp_path: Path, spec, data) -> None:
    order = data.draw(st.permutations(list(spec)))
    header, size = spec_header(spec, order)
    if data.draw(st.booleans()):
        header = {"__metadata__": {"format": "mlx"}, **header}
    p = write_file(tmp_path / "model.safetensors", frame(header, size))
    tensors = read_header(p)
    assert [t.name for t in tensors] == list(spec)
    assert [(t.dtype, list(t.shape)) for t in tensors] == [tuple(v) for v in spec.values()]
    assert_exact(p, tensors)


@FAST
@given(spec=SPECS.filter(lambda s: len(s) >= 1), data=st.data())
def test_mutated_offsets_are_rejected_or_exact(tmp_path: Path, spec, data) -> None:
    """Offsets out of order, overlapping, out of bounds, or negative: either the header still
    tiles the file exactly (then the answer is exact) or it is a clean error."""
    header, size = spec_header(spec, list(spec))
    name = data.draw(st.sampled_from(list(spec)))
    kind = data.draw(st.sampled_from(["shift", "swap", "wild", "extra_data", "short_data"]))
    offsets = header[name]["data_offsets"]
    if kind == "shift":
        d = data.draw(st.integers(-20, 20))
        d_end = data.draw(st.sampled_from([0, d]))
        header[name]["data_offsets"] = [offsets[0] + d, offsets[1] + d_end]
    elif kind == "swap":
        other = data.draw(st.sampled_from(list(spec)))
        header[name]["data_offsets"], header[other]["data_offsets"] = (
            header[other]["data_offsets"], header[name]["data_offsets"])
    elif kind == "wild":
        header[name]["data_offsets"] = data.draw(st.lists(
            st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.none(), st.text(max_size=2)),
            max_size=3))
    extra = {"extra_data": data.draw(st.integers(1, 9)),
             "short_data": -data.draw(st.integers(1, max(1, size)))}.get(kind, 0)
    raw = json.dumps(header).encode()
    p = write_file(tmp_path / "model.safetensors", frame(raw, max(size + extra, 0)))
    read_or_clean_error(p)


@pytest.mark.parametrize("case", [
    "gap", "overlap", "out_of_bounds", "beyond_eof", "end_before_begin", "negative"])
def test_bad_offsets_rejected(tmp_path: Path, case: str) -> None:
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}
    size = 16
    if case == "gap":
        header["b"]["data_offsets"] = [12, 20]
        size = 20
    elif case == "overlap":
        header["b"]["data_offsets"] = [4, 12]
        size = 12
    elif case == "out_of_bounds":
        header["b"]["data_offsets"] = [8, 16]
        size = 12
    elif case == "beyond_eof":
        header["b"]["data_offsets"] = [2**40, 2**40 + 8]
    elif case == "end_before_begin":
        header["b"]["data_offsets"] = [16, 8]
    else:
        header["a"]["data_offsets"] = [-8, 0]
    p = write_file(tmp_path / "model.safetensors", frame(header, size))
    with pytest.raises(WeightsError) as info:
        read_header(p)
    one_line(info.value, str(p))


@pytest.mark.parametrize("dim", [
    "NaN", "Infinity", "-Infinity", "-1", "1.0", "2.5", "1e3", "true", '"4"', "null", "[2]",
    "{}", str(2**70),
])
def test_bad_dims_rejected(tmp_path: Path, dim: str) -> None:
    # Bare NaN/Infinity tokens: Python's json accepts them, so they must be caught as dims.
    raw = ('{"w": {"dtype": "F32", "shape": [4, ' + dim + '], "data_offsets": [0, 16]}}').encode()
    p = write_file(tmp_path / "model.safetensors", frame(raw, 16))
    with pytest.raises(WeightsError) as info:
        read_header(p)
    one_line(info.value, str(p), "'w'")


@pytest.mark.parametrize("dtype", ['[]', '{}', '["F32"]', "null", "4", '"F4"', '"f32"'])
def test_bad_dtype_rejected(tmp_path: Path, dtype: str) -> None:
    # Regression ([] and {}): an unhashable dtype raised TypeError out of the dict lookup.
    raw = ('{"w": {"dtype": ' + dtype + ', "shape": [1], "data_offsets": [0, 4]}}').encode()
    p = write_file(tmp_path / "model.safetensors", frame(raw, 4))
    with pytest.raises(WeightsError) as info:
        read_header(p)
    one_line(info.value, str(p), "dtype")


@pytest.mark.parametrize("raw, fragment", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),  # regression: RecursionError
    (b'{"a":' * 50_000 + b"{}" + b"}" * 50_000, "nested too deeply"),
    (b'{"w": {"dtype": "U8", "shape": [' + b"7" * 5000 + b'], "data_offsets": [0, 1]}}',
     "too many digits"),  # regression: ValueError from the int-string digit limit
    (b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1' + b"0" * 4400 + b']}}',
     "too many digits"),
    (b'{"w\xff": {}}', "UTF-8"),
    (b'\xef\xbb\xbf{}', "JSON"),
    (b"{'a': 1}", "JSON"),
])
def test_hostile_header_json(tmp_path: Path, raw: bytes, fragment: str) -> None:
    p = write_file(tmp_path / "model.safetensors", frame(raw, 1))
    with pytest.raises(WeightsError) as info:
        read_header(p)
    one_line(info.value, str(p), fragment)


@FAST
@given(prefix=st.binary(max_size=20), bad=st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"]))
def test_non_utf8_header(tmp_path: Path, prefix: bytes, bad: bytes) -> None:
    raw = b'{"' + prefix.replace(b'"', b"").replace(b"\\", b"") + bad + b'": 1}'
    p = write_file(tmp_path / "model.safetensors", frame(raw))
    with pytest.raises(WeightsError) as info:
        read_header(p)
    one_line(info.value, str(p))


@FAST
@given(a=SPECS, b=SPECS)
def test_two_shards_never_double_count(tmp_path: Path, a, b) -> None:
    pa = write_sparse(tmp_path / "model-00001-of-00002.safetensors", a)
    pb = write_sparse(tmp_path / "model-00002-of-00002.safetensors", b)
    try:
        tensors = read_headers([pa, pb])
    except WeightsError as e:
        if not a or not b:  # a model's shard without tensors is refused (issue 29)
            one_line(e, str(pa if not a else pb), "holds no tensors")
            return
        one_line(e, str(pb), "also in")
        assert set(a) & set(b)
        return
    assert not set(a) & set(b)
    assert len(tensors) == len(a) + len(b)


# --- a shard that changes while it is read (the fstat seen, then the file cut under us) -----


class _ShrinksOnFirstRead(io.FileIO):
    """The shard opened for reading, truncated by "another process" just after it was sized
    (opened and fstat-ed, before the first read): the window a real truncation can hit."""

    def __init__(self, path: Path, new_size: int):
        super().__init__(path, "rb")
        self.new_size: int | None = new_size

    def read(self, size: int = -1) -> bytes:
        if self.new_size is not None:
            os.truncate(self.name, self.new_size)
            self.new_size = None
        return super().read(size)


@pytest.mark.parametrize("where", ["prefix", "header", "data"])
def test_shard_shrinks_while_read(tmp_path: Path, where: str) -> None:
    spec = {"w": ("BF16", [64, 64])}
    header, size = header_for(spec)
    p = write_raw(tmp_path / "model.safetensors", header, size)
    n = len(json.dumps(header).encode())
    new_size = {"prefix": 3, "header": 8 + n // 2, "data": 8 + n + size // 2}[where]
    with _ShrinksOnFirstRead(p, new_size) as f, pytest.raises(WeightsError) as info:
        _read_open(f, p)
    assert p.stat().st_size == new_size
    msg = one_line(info.value, str(p))
    assert "while being read" in msg or "cut short" in msg


# ============================================================================ config.json

JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 300), st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from(sorted(FAMILIES) + ["full_attention", "sliding_attention", "M*-E"]),
)
JSON_VALUE = st.recursive(
    JSON_LEAF, lambda c: st.one_of(st.lists(c, max_size=6), st.dictionaries(st.text(max_size=4), c,
                                                                            max_size=3)),
    max_leaves=12)
CONFIG_KEYS = sorted({k for c in ALL_CONFIGS for k in c}
                     | {k for c in ALL_CONFIGS if isinstance(c.get("text_config"), dict)
                        for k in c["text_config"]})


def check_model_config(cfg) -> None:
    assert 1 <= cfg.num_layers == len(cfg.layers) <= 100_000
    for a in cfg.attention_layers:
        assert a.kv_heads >= 1 and a.head_dim >= 1 and a.q_heads >= 1, a


@FAST
@given(base=st.sampled_from(ALL_CONFIGS),
       edits=st.dictionaries(st.sampled_from(CONFIG_KEYS), JSON_VALUE, max_size=4),
       nested=st.booleans(),
       model_type=st.one_of(st.none(), st.sampled_from(sorted(FAMILIES) + sorted(FAMILY_ALIASES)
                                                     + sorted(MLX_LM_REMAPPING))))
def test_parse_config_with_hostile_fields(base, edits, nested, model_type) -> None:
    config = json.loads(json.dumps(base))
    target = config.get("text_config") if nested else config
    (target if isinstance(target, dict) else config).update(edits)
    if model_type:
        config["model_type"] = model_type
    try:
        cfg = parse_config(config)
    except ConfigError as e:
        one_line(e, "config.json")
        return
    check_model_config(cfg)


@FAST
@given(data=st.one_of(st.binary(max_size=300),
                      JSON_VALUE.map(lambda v: json.dumps(v).encode())))
def test_read_config_random_bytes(tmp_path: Path, data: bytes) -> None:
    p = write_file(tmp_path / "config.json", data)
    try:
        config = read_config(p)
    except ConfigError as e:
        one_line(e, str(p))
        return
    assert isinstance(config, dict)
    try:
        check_model_config(parse_config(config))
    except ConfigError as e:
        one_line(e)


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # regression: RecursionError
    ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested too deeply"),
    ('{"num_hidden_layers": ' + "9" * 5000 + "}", "too many digits"),  # regression: ValueError
    ("\ufeff{}", "BOM"),
    ("", "invalid JSON"),
])
def test_hostile_config_json(tmp_path: Path, text: str, fragment: str) -> None:
    p = write_file(tmp_path / "config.json", text.encode())
    with pytest.raises(ConfigError) as info:
        read_config(p)
    one_line(info.value, str(p), fragment)


BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1, 1.5, 1e300, 10**10, "4096", True, [], {}]


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "max_position_embeddings",
                                 "vocab_size", "intermediate_size"])
@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_bad_numeric_fields(key: str, value) -> None:
    config = dict(QWEN3_8B, **{key: value})
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    one_line(info.value, key)


@pytest.mark.parametrize("key", ["model_type", "num_hidden_layers", "hidden_size",
                                 "num_attention_heads"])
def test_missing_required_field_is_named(key: str) -> None:
    # Regression: a config without hidden_size was reported as missing 'd_model'.
    config = {k: v for k, v in QWEN3_8B.items() if k != key}
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    one_line(info.value, key)


@pytest.mark.parametrize("tc", [5, "qwen3", [], [{"hidden_size": 1}], True, 1.5])
def test_text_config_not_an_object(tc) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(dict(QWEN3_8B, text_config=tc))
    one_line(info.value, "text_config")


@pytest.mark.parametrize("top", [[], "x", 1, None])
def test_config_not_an_object(top) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(top)
    one_line(info.value)


def test_a_million_layers_is_refused() -> None:
    # Refused before any per-layer work (speed is bench/'s business, not a timed assert here)
    with pytest.raises(ConfigError) as info:
        parse_config(dict(QWEN3_8B, num_hidden_layers=10**6))
    one_line(info.value, "num_hidden_layers")


@pytest.mark.parametrize("pattern", ["", "M" * 150_000], ids=["empty", "150k"])
def test_block_pattern_defines_an_implausible_depth(pattern: str) -> None:
    # Regression: nemotron_h takes its depth from the pattern, past the num_hidden_layers check:
    # "" gave a 0-layer model (0 bytes of cache, silently); 10^6 characters gave 10^6 layers.
    with pytest.raises(ConfigError) as info:
        parse_config(dict(NEMOTRON, hybrid_override_pattern=pattern))
    one_line(info.value, "layers")


def test_head_dim_that_floors_to_zero() -> None:
    # Regression: hidden_size < num_attention_heads without head_dim made head_dim 0, and every
    # KV cache 0 bytes: a silently wrong number.
    # llama: mlx-lm's ModelArgs has head_dim optional (qwen3 requires it)
    config = {k: v for k, v in QWEN3_8B.items() if k != "head_dim"}
    with pytest.raises(ConfigError) as info:
        parse_config(dict(config, hidden_size=16, model_type="llama"))
    one_line(info.value, "hidden_size", "num_attention_heads")


def test_unknown_model_type_with_newline_stays_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"model_type": "evil\nmodel"})
    one_line(info.value, "evil\\nmodel")


def test_the_layer_cap_is_sized_exactly() -> None:
    """100,000 layers (the most accepted) is sized exactly: the KV cache of a uniform model is
    linear in its depth."""
    run = Run(ctx=32768)
    small = kv_term(parse_config(QWEN3_8B), run).bytes
    big = kv_term(parse_config(dict(QWEN3_8B, num_hidden_layers=100_000)), run).bytes
    assert big * QWEN3_8B["num_hidden_layers"] == small * 100_000


# ============================================================================ quantization block

QBLOCK = st.one_of(JSON_VALUE, st.fixed_dictionaries({}, optional={
    "mode": st.one_of(st.sampled_from(["affine", "mxfp4", "nvfp4", "mxfp8"]), JSON_VALUE),
    "bits": st.one_of(st.integers(-1, 9), JSON_VALUE),
    "group_size": st.one_of(st.sampled_from([0, 32, 64]), JSON_VALUE),
    "model.layers.0.mlp.down_proj": JSON_VALUE,
}))
QUANTIZED = [
    ("model.layers.0.mlp.down_proj.weight", "U32", [64, 8]),
    ("model.layers.0.mlp.down_proj.scales", "BF16", [64, 1]),
    ("model.layers.0.mlp.down_proj.biases", "BF16", [64, 1]),
    ("model.embed_tokens.weight", "BF16", [32, 64]),
]


@FAST
@given(block=QBLOCK, where=st.sampled_from(["quantization", "quantization_config", "text_config"]))
def test_hostile_quantization_block(block, where) -> None:
    from mlxfit.model.tensors import TensorInfo

    config = {where: {"quantization": block} if where == "text_config" else block}
    tensors = [TensorInfo.of(n, d, s) for n, d, s in QUANTIZED]
    try:
        w = summarize_weights(tensors, config)
    except ConfigError as e:
        one_line(e, "config.json")
        return
    assert w.total_bytes == sum(t.nbytes for t in tensors)


@pytest.mark.parametrize("mode", [[], {}, ["affine"], None, 4])
def test_quantization_mode_of_the_wrong_type(mode) -> None:
    # Regression: a list or dict mode raised TypeError (unhashable) from the lookup.
    with pytest.raises(ConfigError) as info:
        summarize_weights([], {"quantization": {"mode": mode, "bits": 4}})
    one_line(info.value, "mode")


# ============================================================================ built-in catalog


@pytest.fixture
def scratch_catalog(tmp_path: Path):
    d = tmp_path / "catalog"
    d.mkdir()
    catalog._index.cache_clear()
    yield d
    catalog._index.cache_clear()


def _write_manifest(d: Path, doc_bytes: bytes) -> None:
    (d / "org__m.json.gz").write_bytes(gzip.compress(doc_bytes, mtime=0))


GOOD_DOC = {"schema": 1, "repo_id": "org/m", "description": "d", "config": {"model_type": "x"},
            "tensors": [["w", "F32", [2, 2]]], "total_bytes": 16,
            "generated_by": {"mlx": "0", "mlx_lm": "0"}}


@FAST
@given(edits=st.dictionaries(st.sampled_from(sorted(GOOD_DOC)), JSON_VALUE, max_size=3))
def test_corrupt_catalog_manifest(scratch_catalog: Path, edits) -> None:
    _write_manifest(scratch_catalog, json.dumps({**GOOD_DOC, **edits}).encode())
    try:
        entry = catalog.load_entry("org/m", scratch_catalog)
    except SourceError as e:
        one_line(e, "org__m.json.gz")
        return
    assert entry.total_bytes == sum(t.nbytes for t in entry.tensors)


@pytest.mark.parametrize("doc", [
    b"[" * 100_000,  # regression: RecursionError escaped load_entry
    json.dumps({**GOOD_DOC, "tensors": [["w", "F32", [True, 16]]]}).encode(),  # bool dims
    b"\xff\xfe",
])
def test_corrupt_catalog_regressions(scratch_catalog: Path, doc: bytes) -> None:
    _write_manifest(scratch_catalog, doc)
    with pytest.raises(SourceError) as info:
        catalog.load_entry("org/m", scratch_catalog)
    one_line(info.value, "corrupt")


def test_catalog_file_that_is_not_gzip(scratch_catalog: Path) -> None:
    (scratch_catalog / "org__m.json.gz").write_bytes(b"not gzip at all")
    with pytest.raises(SourceError) as info:
        catalog.load_entry("org/m", scratch_catalog)
    one_line(info.value, "corrupt")


# ============================================================================ files and folders

TINY = {"model.embed_tokens.weight": ("BF16", [64, 32]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 64])}
TINY_CONFIG = {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
               "intermediate_size": 64, "max_position_embeddings": 4096,
               # the rest of what mlx-lm's qwen3 ModelArgs requires
               "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
               "rope_theta": 1e6}


def tiny_folder(root: Path, name: str = "tiny") -> Path:
    return make_folder(root / name, TINY_CONFIG, {"model.safetensors": TINY})


def loop(p: Path) -> None:
    """Replace p by a symlink that points at itself."""
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        shutil.rmtree(p)
    p.symlink_to(p.name)


@pytest.mark.parametrize("which", ["model.safetensors", "config.json",
                                   "model.safetensors.index.json"])
def test_symlink_loop_in_a_folder(tmp_path: Path, which: str) -> None:
    folder = tiny_folder(tmp_path)
    loop(folder / which)
    with pytest.raises(MlxfitError) as info:
        resolve_model(str(folder))
    one_line(info.value, which)


def test_folder_that_is_a_symlink_loop(tmp_path: Path) -> None:
    loop(tmp_path / "m")
    with pytest.raises(SourceError) as info:
        resolve_model(str(tmp_path / "m"))
    one_line(info.value, "does not exist")


SHA = "c" * 40


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch) -> Path:
    cache = tmp_path / "hf" / "hub"
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    make_hf_cache(cache, "org/tiny", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                      "model.safetensors": TINY}, commit=SHA)
    return cache


@pytest.mark.parametrize("which", ["refs/main", "refs", f"snapshots/{SHA}", "snapshots",
                                   "blobs", f"snapshots/{SHA}/config.json",
                                   f"snapshots/{SHA}/model.safetensors", "."])
def test_symlink_loops_in_the_hf_cache(hf_cache: Path, which: str) -> None:
    repo = hf_cache / "models--org--tiny"
    loop(repo / which if which != "." else repo)
    with pytest.raises(MlxfitError) as info:
        resolve_model("org/tiny")
    one_line(info.value)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00", b"\x80" * 40])
def test_cached_ref_that_is_not_text(hf_cache: Path, content: bytes) -> None:
    # Regression: huggingface_hub's try_to_load_from_cache raised UnicodeDecodeError.
    (hf_cache / "models--org--tiny" / "refs" / "main").write_bytes(content)
    with pytest.raises(SourceError) as info:
        resolve_model("org/tiny")
    one_line(info.value, "org/tiny", "refs")


def test_hf_cache_still_works(hf_cache: Path) -> None:
    src = resolve_model("org/tiny")
    assert src.kind == "hf-cache" and sum(t.nbytes for t in src.tensors) == 2 * 64 * 32 * 2


def test_only_a_directory_named_safetensors(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    (folder / "model.safetensors").mkdir()
    with pytest.raises(WeightsError) as info:
        resolve_model(str(folder))
    one_line(info.value, "no model*.safetensors")


def test_directories_named_safetensors_beside_a_shard(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path)
    (folder / "model-extra.safetensors").mkdir()
    (folder / "consolidated.safetensors").mkdir()
    src = resolve_model(str(folder))
    assert src.files == (str(folder / "model.safetensors"),)
    assert sum(t.nbytes for t in src.tensors) == 2 * 64 * 32 * 2


def test_index_naming_a_directory(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path)
    (folder / "model-00002-of-00002.safetensors").mkdir()
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(WeightsError) as info:
        resolve_model(str(folder))
    one_line(info.value, "model-00002-of-00002.safetensors")


def test_read_header_on_a_directory(tmp_path: Path) -> None:
    (tmp_path / "x.safetensors").mkdir()
    with pytest.raises(WeightsError) as info:
        read_header(tmp_path / "x.safetensors")
    one_line(info.value, "directory")


def test_hostile_index_json(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path)
    (folder / "model.safetensors.index.json").write_text("[" * 100_000)
    with pytest.raises(WeightsError) as info:
        resolve_model(str(folder))
    one_line(info.value, "model.safetensors.index.json")


@pytest.mark.parametrize("spec, fragment", [
    ("", "empty"),  # regression: Path("") is ".", so the current folder was sized
    ("   ", "empty"),
    ("~no-such-user-mlxfit/model", "does not exist"),  # regression: RuntimeError
])
def test_model_specs_that_are_not_models(spec: str, fragment: str) -> None:
    with pytest.raises(SourceError) as info:
        resolve_model(spec)
    one_line(info.value, fragment)


# --- unreadable files: chmod 000 does not stop root, so root drops CAP_DAC_OVERRIDE ----------

_UNREADABLE_DRIVER = r"""
import json, sys
from typer.testing import CliRunner
from mlxfit.cli.app import app
out = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(app, args)
    out.append([r.exit_code, r.stderr, type(r.exception).__name__])
print(json.dumps(out))
"""


def _unprivileged_prefix(probe: Path) -> list[str]:
    """How to run a child that chmod 000 stops; skip (with the reason) when there is none."""
    probe.write_text("x")
    probe.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, where chmod 000 does not stop reads, and setpriv "
                        "(util-linux) is not there to drop CAP_DAC_OVERRIDE")
        prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]
    r = subprocess.run(prefix + [sys.executable, "-c", f"open({str(probe)!r}).read()"],
                       check=False, capture_output=True)
    if r.returncode == 0:
        pytest.skip("this process cannot be made to respect chmod 000 (root in a container "
                    "that keeps CAP_DAC_OVERRIDE)")
    return prefix


def test_unreadable_files_and_folders(tmp_path: Path) -> None:
    prefix = _unprivileged_prefix(tmp_path / "probe")
    cases = {}
    for name in ["config", "shard", "index", "folder_no_x", "folder_no_r"]:
        cases[name] = tiny_folder(tmp_path, name)
    idx = cases["index"] / "model.safetensors.index.json"
    idx.write_text(json.dumps({"weight_map": {n: "model.safetensors" for n in TINY}}))
    (cases["config"] / "config.json").chmod(0)
    (cases["shard"] / "model.safetensors").chmod(0)
    idx.chmod(0)
    cases["folder_no_x"].chmod(stat.S_IRUSR | stat.S_IWUSR)  # listable, not searchable
    cases["folder_no_r"].chmod(stat.S_IWUSR | stat.S_IXUSR)  # searchable, not listable
    cache = tmp_path / "hf-unreadable"
    (cache / "hub").mkdir(parents=True)
    cache.chmod(0)
    try:
        argv = [["fit", str(p), *ON_M4PRO] for p in cases.values()]
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(cache))
        env.pop("HF_HUB_CACHE", None)
        argv.append(["fit", CATALOG_MODEL, *ON_M4PRO])  # with an HF cache we may not search
        r = subprocess.run(prefix + [sys.executable, "-c", _UNREADABLE_DRIVER, json.dumps(argv)],
                           check=False, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        results = json.loads(r.stdout)
    finally:
        for p in cases.values():
            p.chmod(0o755)
        cache.chmod(0o755)
    for (code, err, exc), args in zip(results, argv):
        assert code == 2 and exc == "SystemExit", (args, code, err, exc)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "cannot read" in lines[0], (args, err)
        assert "Permission denied" in lines[0], (args, err)


# ============================================================================ the CLI


@pytest.mark.parametrize("args, fragment", [
    (["--ctx", str(10**12), "--memory-budget", "10"], "--ctx"),
    (["--ctx", str(10**30), "--memory-budget", "10"], "--ctx"),
    (["--ctx", "0", "--memory-budget", "10"], "--ctx"),
    (["--ctx", "-5", "--memory-budget", "10"], "--ctx"),
    (["--ctx", "4096", "--memory-budget", "nan"], "--memory-budget"),
    (["--ctx", "4096", "--memory-budget", "inf"], "--memory-budget"),
    (["--ctx", "4096", "--memory-budget", "-1"], "--memory-budget"),
    (["--ctx", "4096", "--memory-budget", "1e300"], "--memory-budget"),
    (["--ctx", "4096", "--gen", "4096", *ON_M4PRO], "--gen"),
    (["--ctx", "4096", "--prefill-step-size", "0", *ON_M4PRO], "--prefill-step-size"),
    (["--ctx", "4096", "--kv-bits", "7", *ON_M4PRO], "--kv-bits"),
    (["--ctx", "4096", "--max-kv-size", "-1", *ON_M4PRO], "--max-kv-size"),
])
def test_absurd_flags_on_a_folder(tmp_path: Path, args, fragment: str) -> None:
    folder = tiny_folder(tmp_path)
    assert_clean_exit_2(invoke("fit", str(folder), *args), fragment)


def test_absurd_context_on_a_catalog_model() -> None:
    assert_clean_exit_2(invoke("fit", CATALOG_MODEL, "--ctx", str(10**12), "--memory-budget", "10"),
                        "--ctx")


@pytest.mark.parametrize("case", ["deep_config", "bigint_config", "nan_layers", "text_config",
                                  "deep_header", "unhashable_dtype", "empty_pattern"])
def test_hostile_folders_through_the_cli(tmp_path: Path, case: str) -> None:
    folder = tiny_folder(tmp_path)
    cfg = folder / "config.json"
    shard = folder / "model.safetensors"
    if case == "deep_config":
        cfg.write_text("[" * 100_000)
    elif case == "bigint_config":
        cfg.write_text('{"model_type": "qwen3", "hidden_size": ' + "1" * 5000 + "}")
    elif case == "nan_layers":
        cfg.write_text(json.dumps(dict(TINY_CONFIG, num_hidden_layers=math.nan)))
    elif case == "text_config":
        cfg.write_text(json.dumps(dict(TINY_CONFIG, text_config="qwen3")))
    elif case == "deep_header":
        shard.write_bytes(frame(b"[" * 100_000))
    elif case == "unhashable_dtype":
        shard.write_bytes(frame(b'{"w": {"dtype": [], "shape": [1], "data_offsets": [0, 1]}}', 1))
    else:
        cfg.write_text(json.dumps(dict(NEMOTRON, hybrid_override_pattern="")))
    line = assert_clean_exit_2(invoke("fit", str(folder), *ON_M4PRO))
    assert str(folder) in line or "config.json" in line


@SLOW
@given(ctx=st.one_of(st.integers(-10, 2 * 10**9), st.integers(1, 200_000)),
       gen=st.integers(0, 5000),
       step=st.sampled_from([1, 7, 255, 256, 512, 2048, 4096, 10**6]),
       budget=st.floats(0.01, 500))
@example(ctx=51683, gen=0, step=1, budget=13.0)  # past the context limit, the memory fits
def test_fit_never_gives_an_inconsistent_number(ctx, gen, step, budget) -> None:
    """Any context/flag combination: a clean error, or a result whose parts add up and whose
    verdict and max context agree with its own totals."""
    if step < 256 and ctx > 10**6:
        return  # known: cache_sim is O(ctx / step) for such steps (test_tiny_prefill_step_...)
    try:
        r = mlxfit.fit(CATALOG_MODEL, ctx, machine="M4 Pro 24GB", gen=gen, prefill_step_size=step,
                    memory_budget_gb=budget)
    except MlxfitError as e:
        one_line(e)
        return
    extra = sum(t.bytes for t in getattr(r, "extra_terms", ()))
    assert r.total_bytes == (r.weights_bytes + r.kv_bytes + r.state_bytes + r.transient_bytes
                             + extra)
    # a verdict never contradicts itself: past the context limit it does not fit (issue 13)
    assert r.fits == (r.total_bytes <= r.usable_bytes and ctx <= r.context_limit)
    assert r.beyond_context == (ctx > r.context_limit)
    assert 0 <= r.max_safe_context <= r.context_limit
    if r.fits:
        assert r.max_safe_context >= ctx
    # a speed wherever the memory fits: past the trained context it is shown beside its
    # warning (issue 28), so not only where the verdict is "fits"
    assert (r.predicted_decode_tps is not None) == (r.total_bytes <= r.usable_bytes)


# ============================================================================ nothing written


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            out[p] = (s.st_mode, s.st_size, s.st_mtime_ns)
        s = os.lstat(dirpath)
        out[dirpath] = (s.st_mode, s.st_size, s.st_mtime_ns)
    return out


def test_read_only_home_and_cache_write_nothing(tmp_path: Path) -> None:
    """HOME and the HF cache read-only (chmod 555, which root ignores, so the check is the
    listing): fit on a catalog model, a folder and an HF-cache model works and leaves every
    directory it could touch exactly as it was. The folder also carries model code, with
    auto_map and trust_remote_code set, that would leave a mark if anything imported it."""
    home, work, tmp = tmp_path / "home", tmp_path / "cwd", tmp_path / "tmp"
    for d in (home, work, tmp):
        d.mkdir()
    hf_home = home / ".cache" / "huggingface"
    make_hf_cache(hf_home / "hub", "org/tiny", {"config.json": json.dumps(TINY_CONFIG).encode(),
                                                "model.safetensors": TINY}, commit=SHA)
    folder = tiny_folder(tmp_path, "with-code")
    mark = tmp_path / "model-code-ran"
    code = f"open({str(mark)!r}, 'w').write('ran')\n"
    for name in ("modeling_evil.py", "configuration_evil.py", "__init__.py", "model.py"):
        (folder / name).write_text(code)
    cfg = dict(TINY_CONFIG, auto_map={"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"},
               trust_remote_code=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    readonly = [home, hf_home, hf_home / "hub", folder]
    for d in readonly:
        d.chmod(0o555)
    watched = [home, work, tmp, folder]
    before = {str(d): _tree(d) for d in watched}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "MLXFIT_"))}
    env.update(HOME=str(home), HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TMPDIR=str(tmp),
               PYTHONDONTWRITEBYTECODE="1")
    try:
        for model in (CATALOG_MODEL, str(folder), "org/tiny"):
            r = subprocess.run([sys.executable, "-m", "mlxfit", "fit", model, "--ctx", "4096",
                                *ON_M4PRO, "--json"], cwd=work, env=env, capture_output=True,
                               text=True, timeout=60, check=False)
            assert r.returncode in (0, 1), (model, r.stderr)
            assert json.loads(r.stdout)["weights_bytes"] > 0
            assert "Traceback" not in r.stderr
        after = {str(d): _tree(d) for d in watched}
    finally:
        for d in readonly:
            d.chmod(0o755)
    for d, listing in before.items():
        changed = sorted(set(after[d].items()) ^ set(listing.items()))
        assert not changed, f"{d} changed: {changed[:5]}"
    assert not mark.exists(), "model code was executed"


# ============================================================================ found and fixed
# Bugs first reported from other modules (docs/hardening.md): regression tests now.


def test_tiny_prefill_step_with_a_huge_context_is_bounded(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
            "from mlxfit.cli import main; sys.argv[1:] = sys.argv[2:]; main()")
    try:
        r = subprocess.run([sys.executable, "-c", code, "--", "fit", str(folder), "--ctx",
                            str(10**8), "--prefill-step-size", "1", "--memory-budget", "10"],
                           capture_output=True, text=True, timeout=2.5, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("still running after 2.5 s")
    assert r.returncode in (0, 1), r.stderr[-500:]


def test_no_home_directory_at_all(monkeypatch) -> None:
    import pwd

    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    r = invoke("fit", CATALOG_MODEL, *ON_M4PRO)
    assert r.exit_code in (0, 1) and isinstance(r.exception, (SystemExit, type(None))), repr(
        r.exception)


@pytest.mark.parametrize("content", [
    b"[decode]\neta = \"x\"\n", b"[decode]\neta = nan\n", b"[decode]\neta = -1.0\n",
    b"[decode]\neta = 0.0\n", b"\xff\xfe", b"decode = 5\n",
])
def test_hostile_user_calibration_file(tmp_path: Path, monkeypatch, content: bytes) -> None:
    home = tmp_path / "home"
    (home / ".config" / "mlxfit").mkdir(parents=True)
    (home / ".config" / "mlxfit" / "calibration.toml").write_bytes(content)
    monkeypatch.setenv("HOME", str(home))
    assert_clean_exit_2(invoke("fit", CATALOG_MODEL, *ON_M4PRO, "--json"), "calibration")


# ============================================================================ fuzz campaign

FUZZ = REPO / "fuzz"


@pytest.mark.parametrize("target, kind, min_runs", [
    ("fuzz_header.py", "header", 100), ("fuzz_config.py", "config", 100),
    ("fuzz_cache.py", "cache", 100),
    ("fuzz_render.py", "render", 10),  # four Rich reports per input: ~20 inputs a second
])
def test_bounded_fuzz_campaign(tmp_path: Path, target: str, kind: str, min_runs: int) -> None:
    """A few seconds of each atheris target from the seed corpus (a longer campaign by hand:
    fuzz/README.md). Any crash fails with the input that triggered it."""
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris; "
                        "wheels for Linux x86-64 only): bounded fuzz campaign not run")
    if not (FUZZ / target).is_file():
        pytest.skip(f"{FUZZ / target} is not in this tree (an sdist without fuzz/)")
    sys.path.insert(0, str(FUZZ))
    try:
        from seeds import write_seeds
    finally:
        sys.path.remove(str(FUZZ))
    corpus = tmp_path / "corpus"
    write_seeds(kind, corpus)
    env = dict(os.environ, MLXFIT_FUZZ_SCRATCH=str(tmp_path / "scratch"), HF_HUB_OFFLINE="1")
    # the mlxfit under test, whatever a relative PYTHONPATH meant in the caller's directory
    env["PYTHONPATH"] = os.pathsep.join([str(Path(mlxfit.__file__).resolve().parent.parent),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    r = subprocess.run(
        [sys.executable, str(FUZZ / target), "-max_total_time=2", "-timeout=10",
         "-rss_limit_mb=1536", "-print_final_stats=1", f"-artifact_prefix={tmp_path}/",
         str(corpus)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    crashes = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*")) + sorted(
        tmp_path.glob("oom-*"))
    detail = "\n".join(f"{c.name}: {c.read_bytes()[:300]!r}" for c in crashes)
    assert r.returncode == 0 and not crashes, f"{detail}\n{r.stderr[-3000:]}"
    runs = [ln for ln in r.stderr.splitlines() if ln.startswith("stat::number_of_executed_units")]
    assert runs and int(runs[0].split(":")[-1]) > min_runs, r.stderr[-2000:]
