"""atheris fuzz target: mlxfit's Hub metadata cache entries read back as untrusted input.

    python fuzz/fuzz_cache.py [libFuzzer flags] CORPUS_DIR      (see fuzz/README.md)

Per input: an entry file is written, read with ``cache.read_entry`` (a 4 MB inflate cap) and,
when accepted, staged and validated by ``snapshot.to_source`` exactly as a cached model is.
Contract: a ModelSource, ``None``, a ValueError (the caller's "corrupt entry") or an
MlxfitError, each of one line; and nothing is left in or written to the private temporary
directory the staging folders are made in (a name that escaped the staging folder would land
there, or beside it). Anything else is a finding.

The first input byte picks the mode:
  even  the rest is the entry file as-is (gzip or not)
  odd   structure-aware: a real entry (a two-shard model) with fields replaced by
        fuzzer-chosen JSON values, names from a list of traversal and control-character
        spellings, then gzipped
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["mlxfit"]):
    from mlxfit.errors import MlxfitError
    from mlxfit.sources.hub.cache import read_entry
    from mlxfit.sources.hub.snapshot import to_source
    from mlxfit.sources.source import HubTransfer

from _common import check_one_line, scratch_dir, seed_cache_entry

_DIR = Path(scratch_dir("cache"))
_TMP = _DIR / f"{os.getpid()}-tmp"  # the staging folders' parent, checked empty after each run
_ENTRY = _DIR / f"{os.getpid()}-entry.json.gz"
REPO, COMMIT, ENDPOINT = "acme/tiny", "0" * 40, "https://huggingface.co"
_SEED = json.loads(gzip.decompress(seed_cache_entry(REPO, COMMIT, ENDPOINT)))
_NAMES = ["model.safetensors", "../model.safetensors", "/tmp/model.safetensors",
          "model/../../x.safetensors", "model\x00.safetensors", "model\x1b]0;t\x07.safetensors",
          "config.json", "model.safetensors.index.json", "kv_config.json", "..", "", ".",
          "model-00001-of-00002.safetensors", "model\\..\\x.safetensors", "a" * 300]


def _value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeIntInRange(-2, 2**70) if fdp.ConsumeBool() else fdp.PickValueInList(
            [0, 1, 2**53, 2**53 + 1, 2**64, -1, 10**30])
    if kind == 3:
        return fdp.PickValueInList(_NAMES)
    if kind == 4:
        return fdp.ConsumeUnicodeNoSurrogates(12)
    if kind == 5 and depth < 3:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    if kind == 6 and depth < 3:
        return {fdp.PickValueInList(_NAMES): _value(fdp, depth + 1)
                for _ in range(fdp.ConsumeIntInRange(0, 3))}
    if kind == 7:
        return fdp.ConsumeFloat()
    return "eyJ4IjoxfQ=="  # base64 of a small JSON object


def _mutated(data: bytes) -> bytes:
    fdp = atheris.FuzzedDataProvider(data)
    doc = json.loads(json.dumps(_SEED))
    for _ in range(fdp.ConsumeIntInRange(1, 5)):
        where = fdp.ConsumeIntInRange(0, 3)
        if where == 0:
            doc[fdp.PickValueInList(sorted(doc))] = _value(fdp)
        elif where == 1 and isinstance(doc.get("shards"), list) and doc["shards"]:
            shard = doc["shards"][fdp.ConsumeIntInRange(0, len(doc["shards"]) - 1)]
            if isinstance(shard, list) and shard:
                shard[fdp.ConsumeIntInRange(0, len(shard) - 1)] = _value(fdp)
        elif where == 2 and isinstance(doc.get("files"), dict):
            doc["files"][fdp.PickValueInList(_NAMES)] = _value(fdp)
        elif isinstance(doc.get("siblings"), list):
            doc["siblings"].append([fdp.PickValueInList(_NAMES), _value(fdp)])
    return gzip.compress(json.dumps(doc).encode(), compresslevel=1)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    _ENTRY.write_bytes(data[1:] if data[0] % 2 == 0 else _mutated(data[1:]))
    try:
        snap = read_entry(_ENTRY, REPO, COMMIT, ENDPOINT, limit=4_000_000)
        if snap is not None:
            to_source(snap, HubTransfer(0, 0, True, COMMIT, "now"))
    except ValueError as e:
        check_one_line(str(e))
    except MlxfitError as e:
        check_one_line(str(e))
    left = os.listdir(_TMP)
    assert not left, f"left behind or written outside the staging folder: {left}"
    assert not (_DIR / "model.safetensors").exists() and not (_DIR / "x.safetensors").exists()


def main() -> None:
    _TMP.mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = str(_TMP)
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
