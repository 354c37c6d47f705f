"""What ``mlxfit cluster`` writes out: the versioned JSON report (``cluster_to_json``, also
``plan.json``) and the files ``mlx.launch`` takes (``write_launch``: ``hostfile.json`` in the
format MLX's launcher reads, ``run.sh`` with the benchmark and server command lines, and, for a
pipeline split other than mlx-lm's even one, the launcher script that applies it). These only
format a finished ``ClusterResult``; they plan nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlxfit.errors import UsageError
from mlxfit.render import dumps
from mlxfit.render.cluster import cluster_to_json
from mlxfit.render.text import shell_arg, shell_comment
from mlxfit.verbs.cluster.results import ClusterResult
from mlxfit.writefile import check_target, write_file

# --------------------------------------------------------------------------- JSON


# --------------------------------------------------------------------------- launch files

SPLIT_SCRIPT = "mlxfit_pipeline_split.py"

_SPLIT_TEMPLATE = '''"""Written by `mlxfit cluster --write`: run an mlx-lm tool with the planned pipeline split.

mlx-lm's sharded_load calls model.model.pipeline(group) without a split, which splits the
layers evenly. This sets the split mlxfit planned (layers per rank, rank 0 first; rank 0 runs
the last layers) and then runs the tool named by the first argument, e.g.
    python3 {script} mlx_lm.server --model MODEL --pipeline
"""

import runpy
import sys

SPLIT = {split!r}

from mlx_lm.models import pipeline as _pipeline  # noqa: E402

_plain = _pipeline.PipelineMixin.pipeline


def _planned(self, group, split=None):
    if split is None:
        if group.size() != len(SPLIT):
            raise SystemExit(
                f"mlxfit planned {{len(SPLIT)}} ranks, the launch has {{group.size()}}"
            )
        split = SPLIT
    return _plain(self, group, split=split)


_pipeline.PipelineMixin.pipeline = _planned

if len(sys.argv) < 2:
    raise SystemExit("usage: python3 {script} mlx_lm.<tool> [its arguments]")
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
'''


def hostfile_json(r: ClusterResult) -> dict[str, Any]:
    """The hostfile mlx.launch reads (mlx/_distributed_utils/common.py Hostfile.from_file):
    {"backend", "envs", "hosts": [{"ssh", "ips", "rdma"}]}, one entry per rank in rank order."""
    n = len(r.hosts)
    backend = r.link.backend
    hosts = []
    for h in r.hosts:
        s = h.spec
        rdma: list[Any] = []
        if backend.startswith("jaccl"):
            rdma = list(s.rdma) if s.rdma is not None else [None] * n
        hosts.append({"ssh": s.ssh or h.label, "ips": list(s.ips), "rdma": rdma})
    # MLX's own hostfile example for jaccl sets MLX_METAL_FAST_SYNCH=1 (common.py docstring).
    envs = ["MLX_METAL_FAST_SYNCH=1"] if backend.startswith("jaccl") else []
    return {"backend": backend, "envs": envs, "hosts": hosts}


def launch_commands(r: ClusterResult) -> dict[str, str]:
    """The command lines to run the chosen plan (benchmark to check, server to serve)."""
    p = r.plan
    model = shell_arg(r.model_path or r.model)  # one word, one line, whatever the folder's name
    strat = p.strategy if p else "pipeline"
    flag = " --pipeline" if strat == "pipeline" else ""
    use_script = bool(p and strat == "pipeline" and p.split != p.even_split)
    py = f"python3 {SPLIT_SCRIPT} " if use_script else "python3 -m "
    prompt = r.run.ctx - r.run.gen
    gen = max(r.run.gen, 1)
    launch = "mlx.launch --hostfile hostfile.json --"
    if strat == "single":
        launch = ""
    bench = (f"{launch} {py}mlx_lm.benchmark --model {model}{flag} -p {prompt} -g {gen} "
             f"--prefill-step-size {r.run.prefill_step_size} -n 1").strip()
    serve = f"{launch} {py}mlx_lm.server --model {model}{flag}".strip()
    return {"benchmark": bench, "server": serve}


def write_launch(r: ClusterResult, directory: str | Path) -> list[Path]:
    """hostfile.json, run.sh (the command lines), plan.json (this report) and, for a pipeline
    split other than mlx-lm's even one, the launcher script that applies it."""
    d = Path(directory).expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--write {d}: cannot create the directory ({e.strerror or e})") \
            from None
    p = r.plan
    files: list[tuple[str, str, int | None]] = []

    def put(name: str, text: str, mode: int | None = None) -> None:
        files.append((name, text, mode))  # written together below, once all are made

    put("hostfile.json", json.dumps(hostfile_json(r), indent=4) + "\n")
    put("plan.json", dumps(cluster_to_json(r)) + "\n")
    if p and p.strategy == "pipeline" and p.split != p.even_split:
        put(SPLIT_SCRIPT, _SPLIT_TEMPLATE.format(split=list(p.split), script=SPLIT_SCRIPT))
    cmds = launch_commands(r)
    names = shell_arg(",".join(h.spec.ssh or h.label for h in r.hosts))
    over = "thunderbolt" if r.link.name.startswith("tb") else "ethernet"
    # distributed_config takes --backend (ring, jaccl, jaccl-ring) and --auto-setup only for
    # Thunderbolt; over ethernet it reads each host's en0/en1 address.
    config_backend = f" --backend {r.link.backend}" if over == "thunderbolt" else ""
    auto = " --auto-setup" if over == "thunderbolt" else ""
    # Every comment line goes through shell_comment: a model folder, host name or ssh target
    # with a newline in it must not end the comment and become a command the user runs.
    lines = ["#!/bin/sh",
             f"# Written by mlxfit cluster for {r.model} at {r.context_tokens:,} tokens."]
    if p is None or not p.supported:
        lines.append(f"# NO PLAN CAN RUN: {r.why}")
    else:
        verdict = "FITS" if p.fits else "DOES NOT FIT"
        tps = (f", predicted decode {p.predicted_decode_tps:.1f} tok/s"
               if p.predicted_decode_tps else "")
        lines.append(f"# Plan: {p.strategy} over {len(r.hosts)} host(s), link {r.link.name} "
                     f"(backend {r.link.backend}): {verdict}, largest safe context "
                     f"{p.max_safe_context:,}{tps}.")
        for hp in p.hosts:
            lines.append(f"#   rank {hp.rank}: {hp.label} ({hp.machine_name}) layers "
                         f"{hp.layers[0]}-{hp.layers[1] - 1}, {hp.total_bytes / 1e9:.2f} of "
                         f"{hp.usable_bytes / 1e9:.2f} GB")
    lines += [
        "#",
        "# Before the first run: hostfile.json lists the hosts in rank order; fill in their",
        "# \"ips\" (and \"rdma\" devices for jaccl), or let MLX find them (keep this host order:",
        "# each rank's layers were planned for that Mac):",
        (f"#   mlx.distributed_config --over {over}{config_backend} --hosts {names} "
         f"--output-hostfile hostfile.json{auto}"),
        "# This directory must exist at the same path on every host (mlx.launch changes into",
        "# it), and python3 there must have mlx-lm.",
        'cd "$(dirname "$0")"',
        "",
        "# Check the prediction (peak memory and tok/s are printed by rank 0):",
        cmds["benchmark"],
        "",
        "# Serve it (OpenAI-compatible API on rank 0):",
        "# " + cmds["server"],
        "",
    ]
    lines = [ln if not ln.startswith("#") else shell_comment(ln) for ln in lines]
    put("run.sh", "\n".join(lines), 0o755)
    # Every target is checked before any is written: a refused run.sh must not leave a
    # hostfile.json and plan.json behind that no longer match anything.
    for name, _, _ in files:
        try:
            check_target(d / name)
        except OSError as e:
            raise UsageError(f"--write: nothing written: cannot write {d / name} "
                             f"({e.strerror or e})") from None
    written: list[Path] = []
    for name, text, mode in files:
        f = d / name
        try:
            # the JSON files are read back before they replace anything
            write_file(f, text, mode=mode, validate=json.loads if name.endswith(".json") else None)
        except OSError as e:
            raise UsageError(f"--write: cannot write {f} ({e.strerror or e})") from None
        written.append(f)
    return written
