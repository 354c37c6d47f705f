"""The machine: which Mac it is (or that it is not one), how much memory MLX may use, how fast memory is.

Plain data at the edge. Everything factual lives in data/apple_skus.toml (chips, GPU bins,
bandwidth, RAM options, working-set fractions); this module only reads it, resolves a
`--machine` string or probes the running machine, and returns a frozen `Machine`.

Two rules shape it:
- Never silently assume a chip. A chip the table does not know, or a VM, gets bandwidth None and
  a note saying so; the caller decides what to do without a speed.
- Probing never crashes: every command goes through an injected runner, and a failing command
  becomes a note. Only a machine whose RAM cannot be read at all raises MachineError.

RAM sizes: Apple sells unified memory in "GB" that are binary. A "24GB" Mac reports
hw.memsize = 25769803776 = 24 * 2**30, so "24GB" here means 24 GiB.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from mlxfit.errors import MachineError
from mlxfit.hardware.skus import SkuTable, chip_compute_figures, sku_table_or_default
from mlxfit.json_result import JsonResult
from mlxfit.settings import DEFAULT_MACOS

GIB = 2**30
MIB = 2**20

Runner = Callable[[list[str]], str]


MACHINE_HINT = "pass --machine (e.g. --machine 'M4 Pro 24GB')"


@dataclass(frozen=True)
class Machine(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.machine:machine_doc"
    name: str  # "M4 Pro 24GB", "M3 Max 30-core 36GB" when the RAM size alone does not tell the bin
    chip: str | None  # a key of the SKU table ("M4 Pro"), None when not known for certain
    gpu_cores: int | None
    ram_bytes: int
    bandwidth_gbs: float | None  # None when unknown: never guessed
    usable_bytes: int  # what MLX may wire on the GPU (or use at all, off Apple Silicon)
    usable_source: str  # where usable_bytes came from, in words a user can check
    is_apple_silicon: bool
    macos_major: int | None
    unverified: bool  # some figure rests on a weak source (see notes)
    notes: tuple[str, ...] = ()
    max_buffer_bytes: int | None = None  # Metal maxBufferLength: the largest single array
    # figure -> where it came from ("chip": "sysctl -n machdep.cpu.brand_string = 'Apple M4
    # Pro'", "bandwidth_gbs": "apple_skus.toml, M4 Pro 16-core", ...): what `mlxfit machine`
    # shows as "probed from". Provenance, not identity: left out of ==, and of the hash.
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # The GPU architecture name Metal reports (apple_skus.toml gpu_arch): MLX picks its
    # command-buffer limits from its last letter (mlxfit.estimate.command_buffers).
    gpu_arch: str | None = None
    # The chip's compute figures from the SKU table the machine was resolved against
    # (hardware.skus.COMPUTE_KEYS): carried so prefill's compute uses a user's --sku-table
    # too, and no verb reloads the table per machine.
    compute_figures: tuple[tuple[str, float], ...] = ()

    @property
    def ram_gb(self) -> float:
        return self.ram_bytes / GIB

    @property
    def gpu_class(self) -> str:
        """The architecture name's last letter ('g' base, 's' Pro/Max, 'd' Ultra); '' unknown."""
        return self.gpu_arch[-1] if self.gpu_arch else ""

    @property
    def gpu_tier(self) -> str:
        """'big' (Max, Ultra), 'small' (base, Pro) or '' (chip unknown): the drain classes of the
        Metal transient (mlxfit.estimate.command_buffers.drain_class)."""
        if not self.chip:
            return ""
        return "big" if ("Max" in self.chip or "Ultra" in self.chip) else "small"


# ---------------------------------------------------------------------------------------------
# Usable memory
# ---------------------------------------------------------------------------------------------


def fmt_gib(n_bytes: int) -> str:
    g = n_bytes / GIB
    return f"{g:.0f}" if abs(g - round(g)) < 0.05 else f"{g:.1f}"


def _interp_log2(points: list[dict[str, Any]], ram_gb: float) -> float:
    """Linear in log2(RAM) between listed sizes (RAM sizes double); the nearest end outside them."""
    pts = sorted((float(p["ram_gb"]), float(p["fraction"])) for p in points)
    if ram_gb <= pts[0][0]:
        return pts[0][1]
    if ram_gb >= pts[-1][0]:
        return pts[-1][1]
    for (r0, f0), (r1, f1) in itertools.pairwise(pts):
        if r0 <= ram_gb <= r1:
            t = (math.log2(ram_gb) - math.log2(r0)) / (math.log2(r1) - math.log2(r0))
            return f0 + t * (f1 - f0)
    return pts[-1][1]  # unreachable: the loop covers the range


def working_set_fraction(
    ram_bytes: int, macos_major: int | None, table: SkuTable | None = None
) -> float:
    """Metal's recommendedMaxWorkingSetSize / RAM. An unknown macOS version gets the pre-26 curve,
    the smaller one, so a prediction errs toward "does not fit"."""
    ws = sku_table_or_default(table)["working_set"]
    key = "from_26" if macos_major is not None and macos_major >= 26 else "before_26"
    return _interp_log2(ws[key], ram_bytes / GIB)


def usable_bytes_for(
    ram_bytes: int,
    macos_major: int | None,
    wired_limit_mb: int | None,
    table: SkuTable | None = None,
) -> tuple[int, str]:
    """What the GPU may wire on a Mac, and a phrase saying where the figure came from.

    A non-zero iogpu.wired_limit_mb replaces the working-set fraction (0 means macOS's default).
    """
    if ram_bytes <= 0:
        raise MachineError(f"RAM size must be positive, got {ram_bytes} bytes")
    if wired_limit_mb is not None and wired_limit_mb < 0:
        raise MachineError(f"iogpu.wired_limit_mb must be >= 0, got {wired_limit_mb}")
    if wired_limit_mb:
        wired = wired_limit_mb * MIB
        if wired > ram_bytes:
            # macOS accepts the sysctl, but nothing can wire more than the RAM there is.
            return ram_bytes, f"iogpu.wired_limit_mb={wired_limit_mb} (capped at the RAM size)"
        return wired, f"iogpu.wired_limit_mb={wired_limit_mb}"
    frac = working_set_fraction(ram_bytes, macos_major, table)
    if macos_major is None:
        gen = "macOS version unknown: the pre-26 fraction"
    elif macos_major >= 26:
        gen = "macOS 26+"
    else:
        gen = "before macOS 26"
    # Three decimals and the RAM in GB too: the product can be checked by eye (ux-3 F19:
    # "0.80 of 48 GiB" read as 38.4 where 0.795 x 51.54 GB = 41.00 GB).
    return int(
        ram_bytes * frac
    ), (f"working-set fraction {frac:.3f} of {fmt_gib(ram_bytes)} GiB = "
        f"{ram_bytes / 1e9:,.2f} GB ({gen})")


def max_buffer_bytes_for(ram_bytes: int, table: SkuTable | None = None) -> int | None:
    """Metal maxBufferLength: the entry of the largest listed RAM size at or below this one (a
    step, which errs low between measured sizes)."""
    pts = sku_table_or_default(table).get("max_buffer", {}).get("points")
    if not pts:
        return None
    ram_gb = ram_bytes / GIB
    pts = sorted((float(p["ram_gb"]), float(p["fraction"])) for p in pts)
    frac = pts[0][1]
    for r, f in pts:
        if r <= ram_gb + 1e-9:
            frac = f
    return int(ram_bytes * frac)


# ---------------------------------------------------------------------------------------------
# Resolving a chip name and a GPU bin
# ---------------------------------------------------------------------------------------------


def _norm_chip(text: str) -> str:
    """'Apple M4Pro' / 'm4  pro' / 'M4 Pro' -> 'm4 pro'."""
    s = re.sub(r"\s+", " ", text.strip().lower())
    s = re.sub(r"^apple\s*", "", s)
    return re.sub(r"^(m\d+)\s*(pro|max|ultra)\b", r"\1 \2", s)


def find_chip(table: SkuTable, text: str) -> str:
    chips = table["chips"]
    by_norm = {_norm_chip(name): name for name in chips}
    hit = by_norm.get(_norm_chip(text))
    if hit is not None:
        return hit
    names = list(chips)
    gen = re.search(r"(?i)\bm\d+", text)
    same = [n for n in names if gen and n.lower().split()[0] == gen.group(0).lower()]
    near = (difflib.get_close_matches(text.strip(), same, n=3, cutoff=0.0) if same
            else difflib.get_close_matches(text.strip(), names, n=3, cutoff=0.5))
    if not near:
        near = difflib.get_close_matches(_norm_chip(text), list(by_norm), n=3, cutoff=0.3)
        near = [by_norm[n] for n in near]
    hint = f"nearest: {', '.join(near)}" if near else f"known: {', '.join(names)}"
    raise MachineError(f"unknown chip {text.strip()!r}; {hint}")


def _gb_list(sizes: list[int]) -> str:
    return ", ".join(str(s) for s in sorted(set(sizes))) + " GB"


def ram_unverified(variant: dict[str, Any], ram_gb: int) -> bool:
    return bool(variant.get("unverified")) or ram_gb in variant.get("unverified_ram_gb", [])


def bin_name(
    chip: str, variants: list[dict[str, Any]], cores: int, ram_gb: int, cores_known: bool
) -> str:
    """'M4 Pro 24GB'; 'M1 Max 24-core 32GB' when several bins ship that RAM size and the cores
    were given or probed (a guessed bin stays out of the name: the notes say it was guessed)."""
    sharing = [v for v in variants if ram_gb in v["ram_gb"]]
    if cores_known and len(sharing) > 1:
        return f"{chip} {cores}-core {ram_gb}GB"
    return f"{chip} {ram_gb}GB"


def pick_by_ram(
    chip: str, variants: list[dict[str, Any]], ram_gb: int
) -> tuple[dict[str, Any] | None, list[str]]:
    """GPU cores unknown: the RAM size tells the bin (M3 Max 36/96 GB -> 30-core, 48/64/128 -> 40)."""
    cands = [v for v in variants if ram_gb in v["ram_gb"]]
    if not cands:
        return None, []
    if len(cands) == 1:
        return cands[0], []
    if len({v["bandwidth_gbs"] for v in cands}) == 1:
        # Same memory system in every bin: decode speed is the same; take the smaller GPU (of the
        # well-sourced bins first) so nothing compute-bound (prefill) is overstated.
        v = min(cands, key=lambda v: (ram_unverified(v, ram_gb), v["gpu_cores"]))
        others = "/".join(str(c["gpu_cores"]) for c in cands)
        note = (
            f"GPU cores not given: {ram_gb}GB {chip} ships with {others}-core GPUs; "
            f"assumed {v['gpu_cores']}-core (bandwidth is the same for each)"
        )
        return v, [note]
    # Bins that differ in bandwidth and share a RAM size: take the slower, say so.
    v = min(cands, key=lambda v: (v["bandwidth_gbs"], v["gpu_cores"]))
    note = (
        f"GPU cores not given and {ram_gb}GB {chip} comes in bins of different bandwidth; "
        f"assumed the slower {v['gpu_cores']}-core bin ({v['bandwidth_gbs']:g} GB/s)"
    )
    return v, [note]


def apple_machine(
    *,
    name: str,
    chip: str | None,
    variant: dict[str, Any] | None,
    gpu_cores: int | None,
    ram_bytes: int,
    macos_major: int | None,
    wired_limit_mb: int | None,
    unverified: bool,
    notes: list[str],
    table: SkuTable,
    sources: dict[str, str] | None = None,
) -> Machine:
    usable, source = usable_bytes_for(ram_bytes, macos_major, wired_limit_mb, table)
    src = dict(sources or {})
    src["bandwidth_gbs"] = (f"apple_skus.toml, {chip} {variant['gpu_cores']}-core"
                            if variant is not None else "unknown (no SKU table entry)")
    src["usable_bytes"] = source
    return Machine(
        name=name,
        chip=chip,
        gpu_cores=gpu_cores,
        ram_bytes=ram_bytes,
        bandwidth_gbs=float(variant["bandwidth_gbs"]) if variant is not None else None,
        usable_bytes=usable,
        usable_source=source,
        is_apple_silicon=True,
        macos_major=macos_major,
        unverified=unverified,
        notes=tuple(notes),
        max_buffer_bytes=max_buffer_bytes_for(ram_bytes, table),
        sources=src,
        gpu_arch=chip_arch(table, chip),
        compute_figures=tuple(chip_compute_figures(chip, table).items()),
    )


def chip_arch(table: SkuTable, chip: str | None) -> str | None:
    """The chip's GPU architecture name from the SKU table (None when not known)."""
    entry = table.get("chips", {}).get(chip) if chip else None
    arch = entry.get("gpu_arch") if isinstance(entry, dict) else None
    return arch if isinstance(arch, str) else None


# "M4 Max 40c", "30-core", "40 core GPU", "38-core gpu"
# compiled on first use (re caches it): start-up
_CORES_RE = r"(?i)\b(\d+)\s*(?:-\s*)?(?:cores?|c)\b(?:\s*gpu\b)?"
# "128GB", "128 GB", "24gib", "24g"
_RAM_RE = r"(?i)\b(\d+)\s*(?:gb|gib|g)\b"  # compiled on first use (re caches it): start-up


# Words around the chip in the names owners and shops use ("MacBook Air M3 16GB", "Mac Studio
# M2 Ultra 192GB", 'MacBook Pro 14" (2024)'): the product says nothing the chip and RAM do not.
_PRODUCT_RE = (r"(?i)\b(?:macbook\s*(?:air|pro)?|mac\s*(?:mini|studio|pro)|imac)\b"
               r"|\(?\b(?:19|20)\d\d\)?|\b\d+(?:\.\d+)?\s*(?:-?\s*inch\b|\"|'')")
# "12-core CPU" (Apple's spec-sheet wording): the CPU cores do not choose the GPU bin.
_CPU_RE = r"(?i)\b\d+\s*-?\s*cores?\s*cpu\b"
_TB_RE = r"(?i)\b(\d+(?:\.\d+)?)\s*tb\b"  # "M3 Ultra 0.5TB" = 512GB


def _owner_words(spec: str) -> str:
    """A machine name as an owner writes it, down to chip, cores and RAM: product words and the
    CPU core count dropped, "M4Max64GB" spaced out, terabytes in GB."""
    text = re.sub(_PRODUCT_RE, " ", spec)
    text = re.sub(_CPU_RE, " ", text)
    text = re.sub(r"(?i)\b(m\d+)\s*(pro|max|ultra)(?=\d|\b)", r"\1 \2 ", text)
    text = re.sub(r"(?i)\b(m\d+)(?=\d+\s*(?:gb|gib|g|tb)\b)", r"\1 ", text)
    text = re.sub(_TB_RE, lambda m: f"{round(float(m.group(1)) * 1024)}GB", text)
    return re.sub(r"\s+", " ", text).strip(" ,-")


def _parse_spec(spec: str, table: SkuTable | None = None) -> tuple[str, int | None, int]:
    text = _owner_words(spec)
    shown = repr(spec if len(spec) <= 80 else spec[:77] + "...")  # one readable line
    if not text:
        raise MachineError("machine is empty; write it like 'M4 Pro 24GB'", param="machine")
    rams = re.findall(_RAM_RE, text)
    rest = re.sub(_RAM_RE, " ", text)
    if not rams:
        # Accept a bare trailing number as the RAM size ("M4 Pro 24").
        m = re.search(r"\s(\d+)\s*$", rest)
        if not m:
            raise MachineError(f"machine {shown} has no RAM size; {_sizes_hint(rest, table)}",
                               param="machine")
        rams = [m.group(1)]
        rest = rest[: m.start()]
    if len(rams) > 1:
        raise MachineError(f"machine {shown} names more than one RAM size", param="machine")
    cores_found = re.findall(_CORES_RE, rest)
    if len(cores_found) > 1:
        raise MachineError(f"machine {shown} names more than one GPU core count",
                           param="machine")
    rest = re.sub(_CORES_RE, " ", rest)
    chip_text = re.sub(r"\s+", " ", rest).strip(" ,-")
    if not chip_text:
        raise MachineError(f"machine {shown} names no chip; write it like 'M4 Pro 24GB'",
                           param="machine")
    # Bounded before int(): 5,000 digits would not even convert; no Mac has 10^6 GB or cores.
    if len(rams[0]) > 6 or (cores_found and len(cores_found[0]) > 6):
        raise MachineError(f"machine {shown}: a RAM size or core count beyond any Mac",
                           param="machine")
    cores = int(cores_found[0]) if cores_found else None
    return chip_text, cores, int(rams[0])


def _sizes_hint(chip_text: str, table: SkuTable | None) -> str:
    """For a bare chip ("M4"): the RAM sizes it ships in, as names to copy."""
    t = sku_table_or_default(table)
    try:
        chip = find_chip(t, re.sub(_CORES_RE, " ", chip_text).strip())
    except MachineError:
        return "write it like 'M4 Pro 24GB'"
    sizes = sorted({r for v in t["chips"][chip]["variants"] for r in v["ram_gb"]})
    return (f"{chip} ships with {_gb_list(sizes)}: write it like '{chip} {sizes[0]}GB'")


def resolve_machine(spec: str, macos_major: int = DEFAULT_MACOS, table: SkuTable | None = None) -> Machine:
    """A Mac described by a string: "M4 Pro 24GB", "Apple M4 Max 128GB", "M3 Max 30-core 96GB",
    "M4 Max 40c 128 GB". RAM is GB as Apple sells it (binary: 24GB = 24 * 2**30 bytes). Without GPU
    cores the RAM size chooses the bin. The usable figure is the working-set fraction for
    `macos_major` (26 by default: what a Mac bought today runs)."""
    t = sku_table_or_default(table)
    chip_text, cores, ram_gb = _parse_spec(spec, t)
    chip = find_chip(t, chip_text)
    variants = t["chips"][chip]["variants"]
    all_sizes = [r for v in variants for r in v["ram_gb"]]
    notes: list[str] = []
    if cores is not None:
        match = [v for v in variants if v["gpu_cores"] == cores]
        if not match:
            bins = ", ".join(str(v["gpu_cores"]) for v in variants)
            raise MachineError(f"{chip} has no {cores}-core GPU; its bins are {bins}-core")
        variant = match[0]
        if ram_gb not in variant["ram_gb"]:
            raise MachineError(
                f"{chip} {cores}-core ships with {_gb_list(variant['ram_gb'])}, not {ram_gb}GB"
                + (
                    f" ({chip} as a whole: {_gb_list(all_sizes)})"
                    if set(all_sizes) != set(variant["ram_gb"])
                    else ""
                )
            )
    else:
        picked, notes = pick_by_ram(chip, variants, ram_gb)
        if picked is None:
            raise MachineError(f"{chip} ships with {_gb_list(all_sizes)}, not {ram_gb}GB")
        variant = picked
    unverified = ram_unverified(variant, ram_gb)
    if unverified:
        notes.append(
            f"{chip} {variant['gpu_cores']}-core {ram_gb}GB rests on a weak source (see apple_skus.toml)"
        )
    given = f"--machine {spec.strip()!r}"
    return apple_machine(
        name=bin_name(chip, variants, variant["gpu_cores"], ram_gb, cores is not None),
        chip=chip,
        variant=variant,
        gpu_cores=variant["gpu_cores"],
        ram_bytes=ram_gb * GIB,
        macos_major=macos_major,
        wired_limit_mb=None,
        unverified=unverified,
        notes=notes,
        table=t,
        sources={
            "chip": given,
            "ram_bytes": f"{given} ({ram_gb} GiB)",
            "gpu_cores": given if cores is not None
            else f"apple_skus.toml: the {chip} bin sold with {ram_gb}GB",
            "macos_major": f"macOS {macos_major} (--macos, default 26)",
        },
    )


def machine_with_budget(m: Machine, budget_bytes: int) -> Machine:
    """`--memory-budget` replaces the usable figure outright, whatever the machine said; a
    budget above the machine's RAM cannot be right and is refused."""
    if budget_bytes <= 0:
        raise MachineError(f"memory_budget_gb must be positive, got {budget_bytes} bytes",
                           param="memory_budget_gb")
    if budget_bytes > m.ram_bytes:
        raise MachineError(f"memory_budget_gb {budget_bytes / 1e9:,.2f} GB is more than the "
                           f"{m.ram_bytes / 1e9:,.2f} GB ({fmt_gib(m.ram_bytes)} GiB) of RAM "
                           f"of {m.name}", param="memory_budget_gb")
    # In GB = 10^9 B, as every usable figure is printed, and in GiB too when it is a whole
    # number of them (--memory-budget 16GiB reads back as 16 GiB, not only 17.18 GB).
    gib = budget_bytes / GIB
    source = f"--memory-budget {budget_bytes / 1e9:,.2f} GB" + (
        f" ({gib:g} GiB)" if abs(gib - round(gib)) < 1e-9 and budget_bytes % 10**9 else "")
    return replace(
        m,
        usable_bytes=budget_bytes,
        usable_source=source,
        sources={**m.sources, "usable_bytes": source},
    )


def all_skus(macos_major: int = DEFAULT_MACOS, table: SkuTable | None = None) -> list[Machine]:
    """Every (chip, GPU bin, RAM size) Apple sells, in table order."""
    t = sku_table_or_default(table)
    out: list[Machine] = []
    for chip, entry in t["chips"].items():
        variants = entry["variants"]
        for v in variants:
            for ram_gb in v["ram_gb"]:
                unverified = ram_unverified(v, ram_gb)
                out.append(
                    apple_machine(
                        name=bin_name(chip, variants, v["gpu_cores"], ram_gb, True),
                        chip=chip,
                        variant=v,
                        gpu_cores=v["gpu_cores"],
                        ram_bytes=ram_gb * GIB,
                        macos_major=macos_major,
                        wired_limit_mb=None,
                        unverified=unverified,
                        notes=["rests on a weak source (see apple_skus.toml)"]
                        if unverified
                        else [],
                        table=t,
                        sources={k: "apple_skus.toml" for k in ("chip", "ram_bytes",
                                                                 "gpu_cores")}
                        | {"macos_major": f"macOS {macos_major}"},
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------
# Probing the running machine
# ---------------------------------------------------------------------------------------------


def non_apple_machine(
    what: str,
    ram_bytes: int,
    macos_major: int | None,
    notes: list[str],
    table: SkuTable,
    sources: dict[str, str] | None = None,
) -> Machine:
    frac = float(table["non_apple"]["usable_fraction"])
    notes = [f"not Apple Silicon: figures are for an unknown GPU; {MACHINE_HINT}"] + notes
    usable_source = (
        f"not Apple Silicon: assumed {frac:g} of {fmt_gib(ram_bytes)} GiB RAM (an assumption)"
    )
    src = dict(sources or {})
    src.update(bandwidth_gbs="unknown (not Apple Silicon)", usable_bytes=usable_source)
    return Machine(
        name=f"{what}, {fmt_gib(ram_bytes)} GiB RAM",
        chip=None,
        gpu_cores=None,
        ram_bytes=ram_bytes,
        bandwidth_gbs=None,
        usable_bytes=int(ram_bytes * frac),
        usable_source=usable_source,
        is_apple_silicon=False,
        macos_major=macos_major,
        unverified=True,
        notes=tuple(notes),
        max_buffer_bytes=None,
        sources=src,
    )


def bare_machine(name: str, ram_bytes: int, usable_bytes: int, usable_source: str,
                 bandwidth_gbs: float | None = None) -> Machine:
    """A Machine from the figures a result carries, for a result made without one (the pure
    core called directly): what it does not know (chip, GPU cores, macOS) is None."""
    return Machine(name=name, chip=None, gpu_cores=None, ram_bytes=ram_bytes,
                   bandwidth_gbs=bandwidth_gbs, usable_bytes=usable_bytes,
                   usable_source=usable_source, is_apple_silicon=False, macos_major=None,
                   unverified=False)
