"""What every model source returns (ModelSource) and the names shared by all sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxfit.model.tensors import TensorInfo

INDEX_NAME = "model.safetensors.index.json"


CATALOG_NOTE = "catalog descriptor: sizes from a header-only manifest, not a downloaded model"


@dataclass(frozen=True)
class ModelSource:
    name: str
    kind: str  # "folder" | "hf-cache" | "catalog" | "hub"
    location: str  # folder / snapshot path, "built-in catalog", or the Hub URL of the commit
    config: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    files: tuple[str, ...]  # shard paths / Hub resolve URLs, in reading order (catalog: empty)
    revision: str | None = None  # commit sha of an hf-cache snapshot or of the Hub model read
    notes: tuple[str, ...] = ()
    transfer: HubTransfer | None = None  # hub only: requests and bytes it took (for --verbose)
    # The safetensors shards' size on disk (what a download of the weights takes, vision or
    # audio towers included even where mlx-lm drops them); None where unknown. The catalog's is
    # a lower bound: its tensors' bytes, without the headers or a tower the repo may also hold.
    download_bytes: int | None = None
    download_at_least: bool = False
    # The tensors are already as mlx-lm's load holds them (a predicted conversion's output),
    # so its sanitize is not replayed on them again.
    as_loaded: bool = False


@dataclass(frozen=True)
class HubTransfer:
    """What reading a Hub model cost: for ``--verbose``."""

    requests: int  # HTTP requests made by this call (redirect hops and retries included)
    bytes: int  # response body bytes received by this call
    from_cache: bool  # metadata came from mlxfit's cache (requests is then 0, or 1 to check a ref)
    commit: str
    fetched_at: str  # when the metadata was read from the Hub (ISO 8601, UTC)
    header_bytes: int = 0  # of those bytes: 8 + N per shard, when fetched now
    shards: int = 0
    # of those bytes: sent by a server past the ranges asked (it ignored Range or sent more),
    # dropped unread; up to that much may have been tensor data
    unasked_bytes: int = 0
    # of those bytes: asked for past a shard's header (the first read covers 100 KB, as
    # huggingface_hub's does, to learn the length and the header in one request), never kept
    tail_bytes: int = 0

    def describe(self) -> str:
        if self.from_cache:
            net = "no network" if self.requests == 0 else (
                f"{self.requests} request{'s' * (self.requests != 1)}, {self.bytes:,} bytes "
                "to check the commit")
            return (f"Hub metadata from mlxfit's cache (commit {self.commit[:12]}, read "
                    f"{self.fetched_at}; {net})")
        if self.unasked_bytes:
            data = (f"{self.unasked_bytes:,} bytes past the ranges asked, which the server sent "
                    "anyway, dropped unread")
        elif self.tail_bytes:
            data = (f"{self.tail_bytes:,} bytes past the headers came with the first read of "
                    "each shard (its first 100 KB, one request) and were dropped")
        else:
            data = "no tensor data"
        return (f"read from the Hub: {self.requests} requests, {self.bytes:,} bytes "
                f"({self.shards} safetensors headers = {self.header_bytes:,} bytes, plus JSON); "
                f"{data}")
