"""`mlxfit cluster`: per-host shares that sum to the model exactly, proportional pipeline splits,
tensor-parallel refusals that name the divisibility, one host == `fit --machine`, and launch
files the MLX launcher itself accepts."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from st_helpers import invoke, make_folder

import mlxfit
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.render.cluster import cluster_to_json
from mlxfit.render.cluster_launch import SPLIT_SCRIPT, hostfile_json, write_launch
from mlxfit.verbs.cluster.hosts import HostSpec, load_links, read_hosts_file, resolve_link
from mlxfit.verbs.cluster.plan import proportional_split
from mlxfit.verbs.cluster.sharding import even_split, rank_ranges
from mlxfit.verbs.cluster.twin import cluster

QWEN30 = "mlx-community/Qwen3-30B-A3B-4bit"
NEXT80 = "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit"
GPTOSS = "mlx-community/gpt-oss-20b-MXFP4-Q8"


# --------------------------------------------------------------------------- fixtures


def qwen2_folder(root: Path, layers: int = 6) -> tuple[Path, dict[str, int]]:
    """A small dense qwen2 (mlx-lm has pipeline() and shard() for it) in bf16, sparse shards.
    hidden 64, 4 heads x 16, 2 KV heads, MLP 128, vocab 100, untied."""
    cfg = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": layers,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "vocab_size": 100, "max_position_embeddings": 4096, "tie_word_embeddings": False,
           "rms_norm_eps": 1e-6}
    spec: dict[str, tuple[str, list[int]]] = {
        "model.embed_tokens.weight": ("BF16", [100, 64]),
        "lm_head.weight": ("BF16", [100, 64]),
        "model.norm.weight": ("BF16", [64]),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        spec.update({
            p + "self_attn.q_proj.weight": ("BF16", [64, 64]),
            p + "self_attn.q_proj.bias": ("BF16", [64]),
            p + "self_attn.k_proj.weight": ("BF16", [32, 64]),
            p + "self_attn.k_proj.bias": ("BF16", [32]),
            p + "self_attn.v_proj.weight": ("BF16", [32, 64]),
            p + "self_attn.v_proj.bias": ("BF16", [32]),
            p + "self_attn.o_proj.weight": ("BF16", [64, 64]),
            p + "mlp.gate_proj.weight": ("BF16", [128, 64]),
            p + "mlp.up_proj.weight": ("BF16", [128, 64]),
            p + "mlp.down_proj.weight": ("BF16", [64, 128]),
            p + "input_layernorm.weight": ("BF16", [64]),
            p + "post_attention_layernorm.weight": ("BF16", [64]),
        })
    names = list(spec)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": {n: spec[n] for n in names[:half]},
              "model-00002-of-00002.safetensors": {n: spec[n] for n in names[half:]}}
    per_layer = 2 * (64 * 64 + 64 + 2 * (32 * 64 + 32) + 64 * 64 + 3 * 128 * 64 + 2 * 64)
    replicated = 2 * (2 * 100 * 64 + 64)
    return make_folder(root / "tiny-qwen2", cfg, shards, index=True), {
        "per_layer": per_layer, "replicated": replicated,
        "total": layers * per_layer + replicated}


def qwen3_moe_folder(root: Path, moe_intermediate: int = 8) -> Path:
    """A small qwen3_moe (bf16, sparse): 8 heads x 16, 4 KV heads, 4 experts of
    ``moe_intermediate``, 4 layers, tied embeddings."""
    cfg = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 16,
           "intermediate_size": 128, "moe_intermediate_size": moe_intermediate,
           "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
           "mlp_only_layers": [], "vocab_size": 100, "max_position_embeddings": 4096,
           "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
           "norm_topk_prob": True}
    m = moe_intermediate
    spec: dict[str, tuple[str, list[int]]] = {
        "model.embed_tokens.weight": ("BF16", [100, 64]),
        "model.norm.weight": ("BF16", [64]),
    }
    for i in range(4):
        p = f"model.layers.{i}."
        spec.update({
            p + "self_attn.q_proj.weight": ("BF16", [128, 64]),
            p + "self_attn.k_proj.weight": ("BF16", [64, 64]),
            p + "self_attn.v_proj.weight": ("BF16", [64, 64]),
            p + "self_attn.o_proj.weight": ("BF16", [64, 128]),
            p + "self_attn.q_norm.weight": ("BF16", [16]),
            p + "self_attn.k_norm.weight": ("BF16", [16]),
            p + "mlp.gate.weight": ("BF16", [4, 64]),
            p + "mlp.switch_mlp.gate_proj.weight": ("BF16", [4, m, 64]),
            p + "mlp.switch_mlp.up_proj.weight": ("BF16", [4, m, 64]),
            p + "mlp.switch_mlp.down_proj.weight": ("BF16", [4, 64, m]),
            p + "input_layernorm.weight": ("BF16", [64]),
            p + "post_attention_layernorm.weight": ("BF16", [64]),
        })
    return make_folder(root / f"tiny-moe-{m}", cfg, {"model.safetensors": spec})


# --------------------------------------------------------------------------- one host == fit


@pytest.mark.parametrize("model, machine, ctx", [
    (QWEN30, "M4 Max 128GB", 32768),
    (NEXT80, "M3 Ultra 96GB", 100_000),
    (GPTOSS, "M4 Pro 24GB", 65536),
    ("mlx-community/Qwen3-8B-4bit", "M4 Pro 24GB", 40960),
    # head dim 256 on an M5: the kernel paths come from the host's GPU, as in fit
    ("mlx-community/gemma-3-12b-it-4bit", "M5 Max 128GB", 32768),
    ("mlx-community/Qwen3-0.6B-4bit", "M4 24GB", 4096),  # a base GPU: its commit rule and floor
])
def test_single_host_gives_the_numbers_of_fit(model, machine, ctx):
    r = cluster(model, [machine], ctx)
    f = mlxfit.fit(model, ctx, machine=machine)
    assert r.chosen == "single"
    h = r.plan.hosts[0]
    assert (h.weights_bytes, h.kv_bytes, h.state_bytes, h.transient_bytes, h.total_bytes) == (
        f.weights_bytes, f.kv_bytes, f.state_bytes, f.transient_bytes, f.total_bytes)
    assert h.usable_bytes == f.usable_bytes and h.fits == f.fits
    assert r.plan.max_safe_context == f.max_safe_context
    assert r.plan.split == (h.n_layers,) and h.layers == (0, h.n_layers)
    if f.predicted_decode_tps is None:
        assert r.plan.predicted_decode_tps is None
    else:
        assert r.plan.predicted_decode_tps == pytest.approx(f.predicted_decode_tps, rel=1e-9)


def test_single_host_cli_json_matches_fit_json():
    c = invoke("cluster", QWEN30, "--host", "M4 Max 64GB", "--ctx", "16384", "--json")
    f = invoke("fit", QWEN30, "--machine", "M4 Max 64GB", "--ctx", "16384", "--json")
    assert c.exit_code == f.exit_code == 0, c.output
    cd, fd = json.loads(c.output), json.loads(f.output)
    h = cd["plans"][0]["hosts"][0]
    for key in ("weights_bytes", "kv_bytes", "state_bytes", "transient_bytes", "total_bytes",
                "usable_bytes"):
        assert h[key] == fd[key], key
    assert cd["plans"][0]["max_safe_context"] == fd["max_safe_context"]
    assert cd["plans"][0]["predicted_decode_tps"] == fd["predicted_decode_tps"]


# --------------------------------------------------------------------------- exact sums


@pytest.mark.parametrize("hosts", [
    ["M3 Ultra 512GB", "M4 Max 128GB"],
    ["M4 Max 64GB", "M4 Pro 48GB", "M4 Max 36GB"],
])
def test_pipeline_shares_sum_to_the_model_exactly(hosts):
    ctx = 32768
    r = cluster(NEXT80, hosts, ctx, strategy="pipeline")
    f = mlxfit.fit(NEXT80, ctx, machine="M3 Ultra 512GB")
    p = r.plan
    assert p.strategy == "pipeline" and p.supported
    own = sum(h.sharded_weights_bytes for h in p.hosts)
    repl = {h.replicated_weights_bytes for h in p.hosts}
    assert len(repl) == 1  # every rank keeps the same non-layer weights
    assert own + repl.pop() == f.weights_bytes == r.weights_bytes
    assert sum(h.kv_bytes for h in p.hosts) == f.kv_bytes
    assert sum(h.state_bytes for h in p.hosts) == f.state_bytes
    assert sum(h.n_layers for h in p.hosts) == 48 == sum(p.split)
    # contiguous, covering, rank 0 runs the last layers (mlx-lm's PipelineMixin)
    ranges = sorted(h.layers for h in p.hosts)
    assert ranges[0][0] == 0 and ranges[-1][1] == 48
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert p.hosts[0].layers[1] == 48 and p.hosts[-1].layers[0] == 0


def test_pipeline_folder_model_attributes_each_tensor(tmp_path):
    folder, size = qwen2_folder(tmp_path, layers=6)
    r = cluster(str(folder), ["2x M4 Pro 24GB"], 1024, strategy="pipeline")
    p = r.plan
    assert p.split == (3, 3) == p.even_split and p.even_split_fits
    for h in p.hosts:
        assert h.sharded_weights_bytes == 3 * size["per_layer"]
        assert h.replicated_weights_bytes == size["replicated"]
    assert r.weights_bytes == size["total"]


def test_tensor_shares_sum_to_the_model_exactly(tmp_path):
    folder = qwen3_moe_folder(tmp_path, moe_intermediate=8)
    r = cluster(str(folder), ["2x M4 Pro 24GB"], 2048, strategy="tensor")
    f = mlxfit.fit(str(folder), 2048, machine="M4 Pro 24GB")
    p = r.plan
    assert p.supported, p.refusal
    h = p.hosts[0]
    # sharded: q,k,v,o and the experts' gate/up/down, split in two; the rest on both hosts
    per_layer_sharded = 2 * (128 * 64 + 2 * 64 * 64 + 64 * 128 + 3 * 4 * 8 * 64)
    per_layer_repl = 2 * (2 * 16 + 4 * 64 + 2 * 64)
    assert h.sharded_weights_bytes == 4 * per_layer_sharded // 2
    assert h.replicated_weights_bytes == 4 * per_layer_repl + 2 * (100 * 64 + 64)
    assert 2 * h.sharded_weights_bytes + h.replicated_weights_bytes == f.weights_bytes
    assert sum(x.kv_bytes for x in p.hosts) == f.kv_bytes  # 4 KV heads -> 2 per host


def test_tensor_catalog_sums():
    r = cluster(QWEN30, ["2x M4 Max 64GB"], 8192, strategy="tensor")
    f = mlxfit.fit(QWEN30, 8192, machine="M4 Max 64GB")
    p = r.plan
    assert p.sums["weights_sharded"] + p.sums["weights_replicated"] == f.weights_bytes
    assert p.sums["kv"] == f.kv_bytes
    assert {h.total_bytes for h in p.hosts} == {p.hosts[0].total_bytes}
    assert p.hosts[0].total_bytes < f.total_bytes


# --------------------------------------------------------------------------- splits


def test_proportional_split_by_hand():
    assert proportional_split([1.0] * 10, [1, 1]) == (5, 5)
    # rank 0 (the last layers) can hold three times what rank 1 can: 8/3 beats 7/3 vs 3/1
    assert proportional_split([1.0] * 10, [3, 1]) == (8, 2)
    assert proportional_split([1.0] * 10, [1, 3]) == (2, 8)
    # a heavy last layer: rank 0 takes it with fewer layers
    assert proportional_split([1, 1, 1, 1, 1, 1, 1, 1, 1, 5], [1, 1]) == (3, 7)
    # a host that cannot hold anything still gets the one layer mlx-lm requires
    starved = proportional_split([1.0] * 6, [-5, 10, 10])
    assert starved[0] == 1 and sum(starved) == 6 and abs(starved[1] - starved[2]) <= 1
    with pytest.raises(UsageError, match="at least one layer"):
        proportional_split([1.0] * 2, [1, 1, 1])


def test_even_split_and_ranges_follow_mlx_lm():
    assert even_split(10, 3) == (4, 3, 3)  # the low ranks get the extra layers
    assert rank_ranges((4, 3, 3)) == [(6, 10), (3, 6), (0, 3)]


def test_heterogeneous_hosts_get_proportional_shares():
    r = cluster(NEXT80, ["M3 Ultra 512GB", "M4 Max 128GB"], 32768, strategy="pipeline")
    p = r.plan
    big, small = p.hosts
    assert big.n_layers > 2 * small.n_layers
    fixed = big.replicated_weights_bytes  # same on both
    cap_big = big.usable_bytes - (big.total_bytes - big.sharded_weights_bytes - big.kv_bytes
                                  - big.state_bytes)
    cap_small = small.usable_bytes - (small.total_bytes - small.sharded_weights_bytes
                                      - small.kv_bytes - small.state_bytes)
    assert fixed > 0 and cap_big > cap_small > 0
    share = big.n_layers / 48
    want = cap_big / (cap_big + cap_small)
    assert abs(share - want) <= 1 / 48 + 1e-9  # within one layer of the exact proportion
    assert p.split != p.even_split
    assert any("even" in n for n in r.notes)


def test_identical_hosts_keep_mlx_lms_even_split():
    r = cluster(QWEN30, ["2x M4 Max 64GB"], 8192, strategy="pipeline")
    assert r.plan.split == r.plan.even_split == (24, 24)


def test_host_that_cannot_hold_its_share_is_named(tmp_path):
    hf = tmp_path / "hosts.toml"
    hf.write_text('[[hosts]]\nmachine = "M4 Max 128GB"\nname = "studio"\n'
                  '[[hosts]]\nmachine = "M4 Pro 24GB"\nname = "tiny"\nmemory_budget_gb = 1\n')
    r = cluster(NEXT80, [], 8192, hosts_file=hf, strategy="pipeline")
    p = r.plan
    assert not p.fits and p.failing_hosts == ("tiny",)
    tiny = p.hosts[1]
    assert tiny.n_layers == 1 and tiny.usable_bytes == 1_000_000_000
    out = invoke("cluster", NEXT80, "--hosts-file", str(hf), "--strategy", "pipeline")
    assert out.exit_code == 1
    assert "cannot hold its share: tiny" in " ".join(out.output.split())


def test_max_safe_context_is_the_whole_plans_boundary():
    # Three identical hosts keep one split at every context, so re-planning at n and n+1
    # checks the bisection with the split it held fixed (unequal hosts may re-split).
    hosts = ["3x M4 Pro 24GB"]
    r = cluster(NEXT80, hosts, 8192, strategy="pipeline")
    p = r.plan
    n = p.max_safe_context
    assert 8192 < n < r.context_limit
    at = cluster(NEXT80, hosts, n, strategy="pipeline").plan
    assert at.split == p.split and at.verdict == "fits"
    over = cluster(NEXT80, hosts, n + 1, strategy="pipeline").plan
    # the boundary is where the upper peak bound fits (issue 27): past it, tight or over
    assert over.split == p.split and over.verdict != "fits"


# --------------------------------------------------------------------------- refusals


def test_tensor_refusal_names_kv_heads():
    r = cluster(QWEN30, ["3x M4 Max 128GB"], 8192, strategy="tensor")
    p = r.plan
    assert not p.supported and not r.fits
    assert "num_key_value_heads 4" in p.refusal and "not divisible by 3" in p.refusal
    out = invoke("cluster", QWEN30, "--host", "3x M4 Max 128GB", "--strategy", "tensor")
    assert out.exit_code == 1
    assert "num_key_value_heads 4" in " ".join(out.output.split())


def test_tensor_refusal_names_expert_width(tmp_path):
    folder = qwen3_moe_folder(tmp_path, moe_intermediate=6)
    r = cluster(str(folder), ["4x M4 Pro 24GB"], 2048, strategy="tensor")
    assert "moe_intermediate_size 6 not divisible by 4" in r.plan.refusal
    assert "num_key_value_heads" not in r.plan.refusal  # 4 KV heads divide by 4


def test_tensor_refusal_names_the_tensor_that_cannot_split():
    # gpt-oss: 64 heads, 8 KV heads, 2880-wide experts all divide by 4, but mxfp4 scales of
    # down_proj have 2880/32 = 90 groups, and mx.split(.., 4) refuses 90.
    r = cluster(GPTOSS, ["4x M4 Pro 24GB"], 4096, strategy="tensor")
    assert "mlp.experts.down_proj.scales" in r.plan.refusal and "90" in r.plan.refusal
    assert cluster(GPTOSS, ["2x M4 Pro 24GB"], 4096, strategy="tensor").plan.supported


def test_unsupported_families_are_refused_by_name():
    nxt = cluster(NEXT80, ["2x M4 Max 128GB"], 8192, strategy="tensor").plan
    assert not nxt.supported and "qwen3_next has no shard()" in nxt.refusal
    oss = cluster(GPTOSS, ["2x M4 Max 128GB"], 8192, strategy="pipeline").plan
    assert not oss.supported and "gpt_oss has no pipeline()" in oss.refusal


# --------------------------------------------------------------------------- auto


def test_auto_picks_the_faster_plan_that_fits_and_says_why():
    r = cluster(QWEN30, ["2x M4 Max 128GB"], 8192, strategy="auto")
    assert {p.strategy for p in r.plans} == {"pipeline", "tensor"}
    fitting = [p for p in r.plans if p.fits]
    best = max(fitting, key=lambda p: p.predicted_decode_tps)
    assert r.chosen == best.strategy and "faster" in r.why and "tok/s" in r.why
    # over TCP the two all-reduces per layer cost more than they save
    slow = cluster(QWEN30, ["2x M4 Max 128GB"], 8192, link="10gbe")
    assert slow.chosen == "pipeline"
    assert not any("ring backend" in w for w in slow.warnings)  # TP not chosen: no warning
    forced = cluster(QWEN30, ["2x M4 Max 128GB"], 8192, link="10gbe", strategy="tensor")
    assert any("ring backend" in w for w in forced.warnings)


def test_auto_falls_back_when_one_strategy_cannot_run():
    r = cluster(NEXT80, ["2x M4 Max 128GB"], 8192)
    assert r.chosen == "pipeline" and "tensor cannot run" in r.why


def test_link_latency_slows_tensor_parallel_more():
    fast = cluster(QWEN30, ["2x M4 Max 128GB"], 8192, strategy="tensor", link="tb5").plan
    slow = cluster(QWEN30, ["2x M4 Max 128GB"], 8192, strategy="tensor", link="10gbe").plan
    assert slow.predicted_decode_tps < fast.predicted_decode_tps
    # 48 layers x 2 all-reduces x 2(N-1) steps of 300 us each
    assert slow.comm_seconds == pytest.approx(48 * 2 * 2 * (300e-6 + 2048 * 2 / 2 / 1.18e9))


# --------------------------------------------------------------------------- links, hosts


def test_links_table_has_the_three_links_with_backends():
    links = load_links()
    assert {"tb5", "tb4", "10gbe"} <= set(links)
    assert links["tb5"].backend == "jaccl" and links["tb4"].backend == "ring"
    for lk in links.values():
        assert lk.latency_s > 0 and lk.bandwidth_gbs > 0
    with pytest.raises(UsageError, match="known: 10gbe, tb4, tb5"):
        resolve_link("infiniband", table=links)
    mine = resolve_link("tb4", latency_us=80, bandwidth_gbs=3.0, table=links)
    assert mine.latency_s == pytest.approx(80e-6) and mine.bandwidth_gbs == 3.0


def test_hosts_file(tmp_path):
    hf = tmp_path / "h.toml"
    hf.write_text('link = "tb4"\n[[hosts]]\nmachine = "M3 Ultra 512GB"\nssh = "s1"\n'
                  'ips = ["10.0.0.1"]\nrdma = ["", "rdma_en3", "rdma_en4"]\n'
                  '[[hosts]]\nmachine = "M4 Max 128GB"\ncount = 1\nname = "mbp"\n')
    specs, extra = read_hosts_file(hf)
    assert extra == {"link": "tb4"}
    assert specs[0] == HostSpec(machine="M3 Ultra 512GB", ssh="s1", ips=("10.0.0.1",),
                                rdma=(None, "rdma_en3", "rdma_en4"))
    assert specs[1].name == "mbp"
    r = cluster(QWEN30, ["M4 Pro 24GB"], 4096, hosts_file=hf)
    assert [h.label for h in r.hosts] == ["s1", "mbp", "host2"]
    assert r.link.name == "tb4"
    bad = tmp_path / "bad.toml"
    bad.write_text("[[hosts]]\nram = 12\n")
    with pytest.raises(UsageError, match="needs machine"):
        read_hosts_file(bad)


@pytest.mark.parametrize("args, needle", [
    (["--host", "M9 Ultra 24GB"], "M9"),
    (["--host", "M4 Max 128GB", "--link", "wifi"], "--link"),
    (["--host", "M4 Max 128GB", "--strategy", "data"], "--strategy"),
    (["--host", "M4 Max 128GB", "--ctx", "0"], "--ctx"),
    ([], "--host"),
    (["--hosts-file", "/nonexistent/h.toml"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    r = invoke("cluster", QWEN30, *args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0]


# --------------------------------------------------------------------------- launch files


def test_cli_json_and_write(tmp_path):
    out = tmp_path / "launch"
    r = invoke("cluster", NEXT80, "--host", "M4 Max 48GB", "--host", "M4 Pro 24GB",
               "--link", "tb4", "--json", "--write", str(out))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["schema_version"] == 2 and d["chosen"] == "pipeline" and d["fits"] is True
    assert {p["strategy"] for p in d["plans"]} == {"pipeline", "tensor"}
    names = {Path(p).name for p in d["written"]}
    assert names == {"hostfile.json", "plan.json", "run.sh", SPLIT_SCRIPT}
    plan = json.loads((out / "plan.json").read_text())
    assert plan["plans"] == d["plans"]
    script = (out / SPLIT_SCRIPT).read_text()
    compile(script, SPLIT_SCRIPT, "exec")
    assert f"SPLIT = {d['plans'][0]['split']!r}" in script
    run_sh = (out / "run.sh").read_text()
    assert f"mlx.launch --hostfile hostfile.json -- python3 {SPLIT_SCRIPT} mlx_lm.benchmark" \
        in run_sh and "--pipeline" in run_sh


def test_even_split_uses_the_stock_command(tmp_path):
    r = cluster(QWEN30, ["2x M4 Max 64GB"], 8192, strategy="pipeline")
    files = {p.name for p in write_launch(r, tmp_path)}
    assert SPLIT_SCRIPT not in files
    assert "python3 -m mlx_lm.benchmark --model" in (tmp_path / "run.sh").read_text()


def test_hostfile_has_the_documented_shape_without_mlx(tmp_path):
    """The format Hostfile.from_file documents (checked here without importing mlx): an object
    with backend, envs and hosts, each host {ssh, ips, rdma}; for jaccl one rdma entry per
    rank, null for the host itself (what launch_jaccl checks)."""
    for link in ("tb4", "tb5"):
        r = cluster(QWEN30, ["3x M4 Max 128GB"], 4096, link=link)
        files = write_launch(r, tmp_path / link)
        doc = json.loads((tmp_path / link / "hostfile.json").read_text())
        assert set(doc) == {"backend", "envs", "hosts"} and len(doc["hosts"]) == 3
        for i, h in enumerate(doc["hosts"]):
            assert set(h) == {"ssh", "ips", "rdma"} and isinstance(h["ssh"], str)
            assert isinstance(h["ips"], list)
            if doc["backend"] == "jaccl":
                assert len(h["rdma"]) == 3 and h["rdma"][i] is None
            else:
                assert h["rdma"] == []
        assert [h["ssh"] for h in doc["hosts"]] == ["host0", "host1", "host2"]
        assert (tmp_path / link / "run.sh") in files


@pytest.mark.parametrize("link, backend", [("tb4", "ring"), ("10gbe", "ring"),
                                           ("tb5", "jaccl")])
def test_hostfile_parses_with_the_mlx_launcher(tmp_path, link, backend):
    launcher = pytest.importorskip("mlx._distributed_utils.common",
                                   reason="mlx is not installed: no launcher to parse with")
    hf = tmp_path / "h.toml"
    hf.write_text('[[hosts]]\nmachine = "M3 Ultra 512GB"\nssh = "studio.local"\n'
                  'ips = ["10.0.0.1"]\nrdma = ["", "rdma_en3", "rdma_en4"]\n'
                  '[[hosts]]\nmachine = "M4 Max 128GB"\nssh = "mbp.local"\nips = ["10.0.0.2"]\n'
                  'rdma = ["rdma_en2", "", "rdma_en4"]\n'
                  '[[hosts]]\nmachine = "M4 Max 128GB"\nssh = "mbp2.local"\n'
                  'ips = ["10.0.0.3"]\n')
    r = cluster(NEXT80, [], 8192, hosts_file=hf, link=link)
    write_launch(r, tmp_path / "out")
    parsed = launcher.Hostfile.from_file(str(tmp_path / "out" / "hostfile.json"))
    assert parsed.backend == backend
    assert [h.ssh_hostname for h in parsed.hosts] == ["studio.local", "mbp.local", "mbp2.local"]
    assert [h.rank for h in parsed.hosts] == [0, 1, 2]
    assert [h.ips for h in parsed.hosts] == [["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"]]
    if backend == "jaccl":
        # mlx.launch's jaccl checks: one entry per rank, null for the host itself
        assert all(len(h.rdma) == 3 for h in parsed.hosts)
        assert all(h.rdma[i] is None for i, h in enumerate(parsed.hosts))
        assert parsed.hosts[0].rdma == [None, "rdma_en3", "rdma_en4"]
        assert parsed.envs == ["MLX_METAL_FAST_SYNCH=1"]
    else:
        assert all(h.rdma == [] for h in parsed.hosts)
    assert hostfile_json(r) == json.loads((tmp_path / "out" / "hostfile.json").read_text())


def test_the_mlx_launcher_runs_the_planned_split(tmp_path):
    """End to end on this machine: mlx.launch reads our hostfile (two ranks on 127.0.0.1 over
    the ring backend), our launcher script sets the split, and mlx-lm's own PipelineMixin
    gives each rank the layers the plan lists."""
    pytest.importorskip("mlx._distributed_utils.launch", reason="mlx is not installed")
    pytest.importorskip("mlx_lm.models.qwen3_moe", reason="mlx-lm is not installed")
    if shutil.which("bash") is None:
        pytest.skip("mlx.launch needs bash")
    hf = tmp_path / "h.toml"
    hf.write_text('[[hosts]]\nmachine = "M4 Max 36GB"\nssh = "127.0.0.1"\nname = "a"\n'
                  'ips = ["127.0.0.1"]\n'
                  '[[hosts]]\nmachine = "M4 Pro 24GB"\nssh = "127.0.0.1"\nname = "b"\n'
                  'ips = ["127.0.0.1"]\n')
    r = cluster(NEXT80, [], 8192, hosts_file=hf, link="tb4")
    p = r.plan
    assert p.split != p.even_split
    out = tmp_path / "out"
    write_launch(r, out)
    (out / "probe_split.py").write_text(
        "import mlx.core as mx\n"
        "from mlx_lm.models import qwen3_moe\n"
        "a = qwen3_moe.ModelArgs(model_type='qwen3_moe', hidden_size=16, num_hidden_layers=48,"
        " intermediate_size=32, num_attention_heads=2, num_experts=2, num_experts_per_tok=1,"
        " decoder_sparse_step=1, mlp_only_layers=[], moe_intermediate_size=8,"
        " rms_norm_eps=1e-6, vocab_size=32, num_key_value_heads=1, head_dim=8,"
        " rope_theta=1e4, tie_word_embeddings=True, max_position_embeddings=64,"
        " norm_topk_prob=True)\n"
        "m = qwen3_moe.Model(a)\n"
        "g = mx.distributed.init()\n"
        "m.model.pipeline(g)\n"
        "print('RANK', g.rank(), g.size(), m.model.start_idx, m.model.end_idx, flush=True)\n")
    got: dict[int, tuple[int, int]] = {}
    for _attempt in range(2):  # a second port if the first happens to be taken
        port = str(random.randint(20000, 60000))
        cmd = [sys.executable, "-c",
               "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())",
               "--hostfile", "hostfile.json", "--python", sys.executable, "--starting-port",
               port, "--", SPLIT_SCRIPT, "probe_split"]
        done = subprocess.run(cmd, check=False, cwd=out, capture_output=True, text=True,
                              timeout=180)
        got = {}
        for line in done.stdout.splitlines():
            if line.startswith("RANK"):
                _, rank, size, start, end = line.split()
                got[int(rank)] = (int(start), int(end))
                assert int(size) == 2
        if len(got) == 2:
            break
    assert got == {h.rank: h.layers for h in p.hosts}, done.stdout + done.stderr


def test_text_report_states_hosts_verdict_and_assumptions():
    r = invoke("cluster", QWEN30, "--host", "M3 Ultra 512GB", "--host", "M4 Max 128GB",
               "--ctx", "32768", "--strategy", "pipeline")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    for needle in ("FITS", "M3 Ultra", "M4 Max 128GB", "largest safe context",
                   "predicted decode", "assumptions", "tb5", "rank 0 runs the last layers"):
        assert needle in text, needle


def test_json_round_trips_and_carries_assumptions():
    r = cluster(QWEN30, ["2x M4 Max 128GB"], 8192)
    d = json.loads(json.dumps(cluster_to_json(r)))
    for p in d["plans"]:
        assert p["assumptions"] and p["hosts"]
        for h in p["hosts"]:
            assert h["total_bytes"] == (h["weights_bytes"] + h["kv_bytes"] + h["state_bytes"]
                                        + h["transient_bytes"])
    assert d["link"]["name"] == "tb5" and d["link"]["backend"] == "jaccl"


def test_errors_are_mlxfit_errors():
    with pytest.raises(MlxfitError):
        cluster(QWEN30, ["M4 Max 128GB"], 8192, strategy="data")
    with pytest.raises(MlxfitError, match="host 1"):
        cluster(QWEN30, ["M4 Max 128GB", "M4 Max 7GB"], 8192)
    with pytest.raises(UsageError, match="rdma"):
        cluster(QWEN30, [HostSpec("M4 Max 128GB", rdma=(None,)), "M4 Max 128GB"], 8192)


def test_replace_keeps_plans_frozen():
    r = cluster(QWEN30, ["M4 Max 128GB"], 8192)
    with pytest.raises(FrozenInstanceError):
        r.plan.fits = False  # type: ignore[misc]
    assert replace(r, why="x").why == "x"


def test_twin_is_reachable_from_the_api_module():
    import mlxfit

    r = mlxfit.cluster(QWEN30, ["M4 Max 128GB"], 4096)
    assert r.chosen == "single" and r.fits


def test_nothing_fits_says_so_without_a_zero_context_or_a_launcher_note():
    # ux-3 F19: with the weights too large for every host there is no "largest context (0
    # tokens)" and no split that "needs the launcher script"
    from st_helpers import invoke

    r = invoke("cluster", "mlx-community/Qwen3-235B-A22B-8bit", "--host", "M4 Pro 24GB",
               "--host", "M4 Pro 24GB", "--json")
    assert r.exit_code == 1, r.output
    import json as _json

    d = _json.loads(r.stdout)
    assert "(0 tokens)" not in d["why"] and "weights alone" in d["why"]
    assert not any("launcher script" in n for n in d["notes"])
