"""A differential campaign: generated configs of every family, mlxfit against mlx-lm's caches.

For each family fixture (tests/fixtures/families/MANIFEST.json), ``--n`` variants that mlx-lm
accepts are drawn with ``--seed`` (mlxfit.model.config_gen), and each is run at every
(S, n) of ``--steps`` x ``--ns`` under the plain flags, one ``--kv-bits`` set and one
``--max-kv-size`` (config_gen.flag_sets), compared exactly by mlxfit.verbs.diffcheck. With
``--findings`` the regression cases of tests/data/difffuzz/ are run instead. Prints the
verdicts per family and the findings; ``--out`` writes one JSON line per comparison;
``--save DIR`` writes each (variant, flags) with a finding as a regression case there
(tests/data/difffuzz/'s format: the config, the flags and every disagreeing (S, n) run).

    PYTHONPATH=src .venv/bin/python bench/difffuzz.py --seed 7 --n 4
    PYTHONPATH=src .venv/bin/python bench/difffuzz.py --findings
    PYTHONPATH=src .venv/bin/python bench/difffuzz.py --configs tests/fixtures/configs

``--configs PATH,...`` runs published config.json files (folders searched recursively) as
they are, with the same grid and flag sets (seed ``--seed``): the real-config check.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from mlxfit.model import config_gen
from mlxfit.verbs.diffcheck import FINDINGS, Flags, accepted_by_mlx_lm, compare

REPO = Path(__file__).resolve().parent.parent
FAMILY_DIR = REPO / "tests" / "fixtures" / "families"
FINDINGS_DIR = REPO / "tests" / "data" / "difffuzz"
# Families the oracle cannot run here (tests/test_oracle_families.py says why for each).
SKIP = {"olmo", "prism_hadamard_qwen35"}


def _fixtures(only: set[str] | None) -> dict[str, dict]:
    manifest = json.loads((FAMILY_DIR / "MANIFEST.json").read_text())
    return {name: json.loads((FAMILY_DIR / m["file"]).read_text())
            for name, m in sorted(manifest.items())
            if name not in SKIP and (only is None or name in only)}


def _grid(ns: list[int], steps: list[int]) -> list[tuple[int, int]]:
    return [(s, n) for s in steps for n in ns]


def run_findings(out) -> collections.Counter:
    verdicts: collections.Counter = collections.Counter()
    for path in sorted(FINDINGS_DIR.glob("*.json")):
        case = json.loads(path.read_text())
        for step, n in case["runs"]:
            o = compare(case["config"], n, step, Flags(**case["flags"]))
            verdicts[o.verdict] += 1
            row = {"case": case["finding"], **o.__dict__}
            out.write(json.dumps(row) + "\n")
            if o.verdict in FINDINGS:
                print(f"{case['finding']}: {o.verdict} S={step} n={n} mlxfit={o.mlxfit} "
                      f"mlx-lm={o.mlx_lm} {o.why[:120]}")
    return verdicts


def _published(paths: list[str]) -> list[tuple[str, dict]]:
    found = []
    for root in paths:
        files = [Path(root)] if root.endswith(".json") else sorted(Path(root).rglob("*.json"))
        for f in files:
            try:
                config = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(config, dict) and isinstance(config.get("model_type"), str):
                found.append((str(f), config))
    return found


def run_configs(args, out) -> collections.Counter:
    """Each published config as it is, at the grid under the flag sets of ``--seed``."""
    verdicts: collections.Counter = collections.Counter()
    families: dict[str, collections.Counter] = {}
    grid = _grid(args.ns, args.steps)
    for index, (path, config) in enumerate(_published(args.configs.split(","))):
        fam = families.setdefault(config["model_type"], collections.Counter())
        fam["configs"] += 1
        for flags in config_gen.flag_sets(args.seed, index):
            for step, n in grid:
                o = compare(config, n, step, Flags(**flags))
                fam[o.verdict] += 1
                verdicts[o.verdict] += 1
                out.write(json.dumps({"config": path, "flags": flags, **o.__dict__}) + "\n")
                if o.verdict in FINDINGS:
                    print(f"{path} {flags}: {o.verdict} S={step} n={n} mlxfit={o.mlxfit} "
                          f"mlx-lm={o.mlx_lm} {o.why[:100]}", flush=True)
    for name, fam in sorted(families.items()):
        print(f"# {name}: {dict(fam)}")
    print(f"# {len(families)} model_types, {sum(f['configs'] for f in families.values())} "
          "configs")
    return verdicts


def case_name(variant: str, flags: dict) -> str:
    """The regression case's name: the variant, then -kvb<B>q<start> / -mkv<M> for the flags."""
    if flags.get("kv_bits") is not None:
        return f"{variant}-kvb{flags['kv_bits']}q{flags['quantized_kv_start']}"
    if flags.get("max_kv_size") is not None:
        return f"{variant}-mkv{flags['max_kv_size']}"
    return variant


def save_case(folder: Path, v: config_gen.Variant, family: str, flags: dict,
              runs: list[tuple[int, int]], kind: str) -> None:
    name = case_name(v.name, flags)
    case = {"config": v.config, "family": family, "finding": name,
            "flags": Flags(**flags).__dict__, "kind": kind, "runs": [list(r) for r in runs]}
    (folder / f"{name}.json").write_text(json.dumps(case, indent=1, sort_keys=True) + "\n")


def run_campaign(args, out) -> collections.Counter:
    verdicts: collections.Counter = collections.Counter()
    per_family: dict[str, collections.Counter] = {}
    grid = _grid(args.ns, args.steps)
    for family, fixture in _fixtures(set(args.families.split(",")) if args.families else None
                                     ).items():
        t0 = time.perf_counter()
        fam = per_family.setdefault(family, collections.Counter())
        kept = 0
        for index in range(args.n * args.attempts):
            if kept >= args.n:
                break
            v = config_gen.variant(family, fixture, args.seed, index)
            if not accepted_by_mlx_lm(v.config):
                fam["rejected-by-mlx-lm"] += 1
                continue
            kept += 1
            for flags in config_gen.flag_sets(args.seed, index):
                found: list[tuple[int, int]] = []
                kind = ""
                for step, n in grid:
                    o = compare(v.config, n, step, Flags(**flags))
                    fam[o.verdict] += 1
                    verdicts[o.verdict] += 1
                    out.write(json.dumps({"variant": v.name, "flags": flags, "tweaks": v.tweaks,
                                          **o.__dict__}) + "\n")
                    if o.verdict in FINDINGS:
                        found.append((step, n))
                        kind = kind or (o.verdict + (f": {o.why[:120]}" if o.why else ""))
                        print(f"{v.name} {flags}: {o.verdict} S={step} n={n} "
                              f"mlxfit={o.mlxfit} mlx-lm={o.mlx_lm} {o.why[:100]}")
                if found and args.save:
                    save_case(Path(args.save), v, family, flags, found, kind)
        fam["variants"] = kept
        print(f"# {family}: {dict(fam)} in {time.perf_counter() - t0:.1f} s", flush=True)
    return verdicts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--n", type=int, default=4, help="accepted variants per family")
    p.add_argument("--attempts", type=int, default=4, help="draws per wanted variant")
    p.add_argument("--families", default="", help="comma-separated; default every family")
    p.add_argument("--ns", default="1,2,37,39,300,1100")
    p.add_argument("--steps", default="37,512")
    p.add_argument("--findings", action="store_true", help="run tests/data/difffuzz instead")
    p.add_argument("--out", default="/dev/null", help="one JSON line per comparison")
    p.add_argument("--save", default="", help="write each finding as a regression case here")
    p.add_argument("--configs", default="", help="comma-separated published configs / folders")
    args = p.parse_args()
    args.ns = [int(x) for x in args.ns.split(",")]
    args.steps = [int(x) for x in args.steps.split(",")]
    t0 = time.perf_counter()
    with open(args.out, "w") as out:
        if args.findings:
            verdicts = run_findings(out)
        elif args.configs:
            verdicts = run_configs(args, out)
        else:
            verdicts = run_campaign(args, out)
    found = sum(verdicts[v] for v in FINDINGS)
    print(f"verdicts: {dict(verdicts)}; findings {found}; {time.perf_counter() - t0:.0f} s")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
