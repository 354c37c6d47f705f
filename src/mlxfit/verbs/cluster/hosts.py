"""The Macs and the wire between them, as ``mlxfit cluster`` reads them: the link table
(``data/links.toml`` merged with the user's, ``Link``, ``load_links``, ``resolve_link``), the
host descriptions (``HostSpec`` from ``--host`` strings or a ``[[hosts]]`` TOML file) and their
resolution to the machine figures the planner needs (``HostMachine``). Everything here reads
files or the SKU table and validates user input; nothing here plans, so it is kept apart from
the pure arithmetic in ``mlxfit.verbs.cluster.plan``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlxfit.errors import MlxfitError, UsageError
from mlxfit.estimate.compute import ChipCompute
from mlxfit.hardware.resolve import Machine, machine_with_budget, resolve_machine
from mlxfit.resources import data_path
from mlxfit.settings import (
    DEFAULT_MACOS,
    MACOS_MAJORS,
    Settings,
    deep_merge,
    from_environ,
    read_toml,
)
from mlxfit.verbs.edges import compute_for

# --------------------------------------------------------------------------- links


@dataclass(frozen=True)
class Link:
    name: str
    backend: str  # mlx.launch --backend
    latency_s: float  # one small message, one hop, software stack included
    bandwidth_gbs: float  # one transfer, one direction, decimal GB/s
    nominal_gbps: float | None = None
    description: str = ""
    unverified: bool = False
    source: str = "data/links.toml"

    def hop_seconds(self, nbytes: float) -> float:
        return self.latency_s + nbytes / (self.bandwidth_gbs * 1e9)


def _links_path() -> Path:
    try:
        return data_path("links.toml")
    except FileNotFoundError as e:
        raise MlxfitError(str(e)) from None


def load_links(extra: Path | None = None, user: Path | None = None, *,
               settings: Settings | None = None) -> dict[str, Link]:
    """The shipped link table, merged key by key with the user's (links.toml in the user config
    folder, ~/.config/mlxfit) and then ``extra``."""
    doc = read_toml(_links_path(), "the link table").get("links", {})
    for p in (user if user is not None else (settings or from_environ()).links_file, extra):
        if p is not None and Path(p).is_file():
            doc = deep_merge(doc, read_toml(Path(p), "the link table").get("links", {}))
    out = {}
    for name, t in doc.items():
        try:
            lat, bw = float(t["latency_us"]), float(t["bandwidth_gbs"])
            backend = str(t["backend"])
        except (KeyError, TypeError, ValueError):
            raise MlxfitError(f"links table: [links.{name}] needs backend, latency_us and "
                              "bandwidth_gbs") from None
        if lat < 0 or bw <= 0:
            raise MlxfitError(f"links table: [links.{name}] latency must be >= 0 and bandwidth > 0")
        out[name] = Link(name, backend, lat * 1e-6, bw, t.get("nominal_gbps"),
                         str(t.get("description", "")), bool(t.get("unverified", False)))
    return out


def resolve_link(name: str, latency_us: float | None = None, bandwidth_gbs: float | None = None,
                 table: dict[str, Link] | None = None) -> Link:
    links = table if table is not None else load_links()
    key = name.strip().lower()
    if key not in links:
        raise UsageError(f"link {name!r}: unknown (known: {', '.join(sorted(links))})",
                         param="link")
    link = links[key]
    if latency_us is not None:
        if not latency_us >= 0:
            raise UsageError(f"link_latency_us must be >= 0, got {latency_us}",
                             param="link_latency_us")
        link = replace(link, latency_s=latency_us * 1e-6, source="--link-latency-us",
                       unverified=False)
    if bandwidth_gbs is not None:
        if not bandwidth_gbs > 0:
            raise UsageError(f"link_gbs must be positive, got {bandwidth_gbs}", param="link_gbs")
        link = replace(link, bandwidth_gbs=bandwidth_gbs, source="command line", unverified=False)
    return link


# --------------------------------------------------------------------------- hosts


@dataclass(frozen=True)
class HostSpec:
    """One Mac of the cluster as the user described it (a --host string or a hosts-file entry)."""

    machine: str  # "M3 Ultra 512GB"
    name: str | None = None  # label in the report; default ssh, else host<rank>
    ssh: str | None = None  # for the hostfile; default the label
    ips: tuple[str, ...] = ()
    rdma: tuple[str | None, ...] | None = None  # one entry per rank (None for itself / no cable)
    memory_budget_gb: float | None = None
    macos: int | None = None


# A hosts file's memory_budget_gb past this is no Mac's (the budget is then checked against the
# host's RAM); an infinite one overflowed int() as bytes.
MAX_BUDGET_GB = 1_000_000

_REPEAT_RE = re.compile(r"^\s*(\d+)\s*[x×]\s+(.+)$", re.IGNORECASE)


def parse_host_args(hosts: Sequence[str | HostSpec]) -> list[HostSpec]:
    """``"M4 Max 128GB"``, ``"2x M3 Ultra 512GB"`` or HostSpec objects, in rank order."""
    out: list[HostSpec] = []
    for h in hosts:
        if isinstance(h, HostSpec):
            out.append(h)
            continue
        m = _REPEAT_RE.match(h)
        if m:
            n = int(m.group(1)) if len(m.group(1)) <= 3 else 0  # 5,000 digits: no int()
            if not 1 <= n <= 64:
                raise UsageError(f"hosts {h[:80]!r}: repeat count must be 1..64", param="hosts")
            out.extend(HostSpec(machine=m.group(2).strip()) for _ in range(n))
        else:
            out.append(HostSpec(machine=h.strip()))
    return out


def read_hosts_file(path: Path) -> tuple[list[HostSpec], dict[str, Any]]:
    """A TOML file: ``[[hosts]]`` entries (machine, optional name, ssh, ips, rdma,
    memory_budget_gb, macos, count) and optional top-level ``link`` / ``backend``.
    TOML has no null: write "" in ``rdma`` for the host itself and uncabled peers."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UsageError(f"hosts file {path} does not exist")
    doc = read_toml(path, "the hosts file")
    entries = doc.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path}: no [[hosts]] entries")
    out: list[HostSpec] = []
    for i, e in enumerate(entries):
        where = f"{path}: hosts[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("machine"), str):
            raise UsageError(f"{where} needs machine = \"<chip> <RAM>GB\"")
        ips = e.get("ips", [])
        if isinstance(ips, str):
            ips = [ips]
        if not isinstance(ips, list) or not all(isinstance(x, str) for x in ips):
            raise UsageError(f"{where}: ips must be a list of strings")
        rdma = e.get("rdma")
        if rdma is not None:
            # a device is a name, or "" / [] for none (TOML has no null)
            if not isinstance(rdma, list) or not all(
                    isinstance(x, str) or (isinstance(x, list) and not x) for x in rdma):
                raise UsageError(f"{where}: rdma must be a list (\"\" for itself / no cable)")
            rdma = tuple(None if x in ("", []) else x for x in rdma)
        # Every field of its type before it is used: a list as ssh, a string as macos or an
        # infinite budget were tracebacks.
        for key in ("name", "ssh"):
            v = e.get(key)
            if v is not None and (not isinstance(v, str) or not v or len(v) > 255):
                raise UsageError(f"{where}: {key} must be a non-empty string (at most 255 "
                                 "characters)")
        macos = e.get("macos")
        if macos is not None and (type(macos) is not int or macos not in MACOS_MAJORS):
            raise UsageError(f"{where}: macos must be one of "
                             f"{', '.join(str(m) for m in MACOS_MAJORS)}")
        budget = e.get("memory_budget_gb")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                   or not 0 < budget <= MAX_BUDGET_GB):
            raise UsageError(f"{where}: memory_budget_gb must be a positive number of GB "
                             f"(at most {MAX_BUDGET_GB:,})")
        count = e.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
            raise UsageError(f"{where}: count must be an integer 1..64")
        for k in range(count):
            name = e.get("name")
            if name is not None and count > 1:
                name = f"{name}-{k}"
            out.append(HostSpec(
                machine=e["machine"], name=name, ssh=e.get("ssh") if count == 1 else None,
                ips=tuple(ips) if count == 1 else (), rdma=rdma if count == 1 else None,
                memory_budget_gb=float(budget) if budget is not None else None,
                macos=macos))
    extra = {k: doc[k] for k in ("link", "backend") if k in doc}
    return out, extra


@dataclass(frozen=True)
class HostMachine:
    """A resolved host: the figures the plan needs (from mlxfit.hardware.resolve.Machine)."""

    rank: int
    label: str
    machine_name: str
    ram_bytes: int
    bandwidth_gbs: float | None
    usable_bytes: int
    usable_source: str
    spec: HostSpec = field(default_factory=lambda: HostSpec(machine=""))
    notes: tuple[str, ...] = ()
    unverified: bool = False
    machine: Machine | None = None  # the resolved Machine (the JSON's machine object)
    compute: ChipCompute | None = None  # peak FLOP/s (verbs.edges.compute_for): prefill


def resolve_hosts(specs: Sequence[HostSpec], macos: int | None = None) -> list[HostMachine]:
    out = []
    for r, s in enumerate(specs):
        try:
            m = resolve_machine(s.machine, macos_major=s.macos or macos or DEFAULT_MACOS)
        except MlxfitError as e:
            raise type(e)(f"host {r} ({s.machine[:80]!r}): {e}") from None
        if s.memory_budget_gb is not None:
            m = machine_with_budget(m, int(s.memory_budget_gb * 1e9))
        label = s.name or s.ssh or f"host{r}"
        out.append(HostMachine(r, label, m.name, m.ram_bytes, m.bandwidth_gbs, m.usable_bytes,
                               m.usable_source, s, tuple(m.notes), m.unverified, m,
                               compute_for(m)))
    for h in out:
        if h.spec.rdma is not None and len(h.spec.rdma) != len(out):
            raise UsageError(f"{h.label}: rdma lists {len(h.spec.rdma)} devices for "
                             f"{len(out)} hosts (one per rank, \"\" for itself)")
    labels = [h.label for h in out]
    if len(set(labels)) != len(labels):
        raise UsageError(f"host names must be unique, got {', '.join(labels)}")
    return out
