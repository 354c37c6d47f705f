"""The Metal scheduler's held-back memory (estimate/command_buffers.py), the SKU table's GPU
classes, MLX's environment overrides, and the attention-kernel paths (estimate/kernels.py)."""

from __future__ import annotations

import json
import re

import pytest
from st_helpers import invoke, load_config

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.errors import MachineError, UsageError
from mlxfit.estimate import command_buffers as cb
from mlxfit.estimate import kernels
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.hardware.skus import load_sku_table
from mlxfit.model.caches import Full, Rotating
from mlxfit.model.config import Attn
from mlxfit.settings import mlx_scheduler_env

Q06 = "mlx-community/Qwen3-0.6B-4bit"  # in the built-in catalog: no network
L1B = "mlx-community/Llama-3.2-1B-Instruct-4bit"


def _activations(r) -> dict:
    return next(t for t in r.terms if t.name == "activations").inputs


# --------------------------------------------------------------------------- GPU class per SKU


def test_every_chip_has_an_architecture_and_the_class_mlx_reads_from_it():
    """Every shipped chip names its Metal architecture; the class is its last letter: base
    chips 'g', Pro and Max 's' (what M2/M3/M4/M5 Pro and M1/M3/M4/M5 Max report), Ultra 'd'."""
    chips = load_sku_table()["chips"]
    for name, chip in chips.items():
        arch = chip["gpu_arch"]
        assert re.fullmatch(r"applegpu_g1[3-7][gsd]", arch), name
        gen = int(name.split()[0][1:])
        assert kernels.arch_gen(arch) == 12 + gen, name  # M1 = g13 ... M5 = g17
        want = "d" if "Ultra" in name else ("s" if ("Pro" in name or "Max" in name) else "g")
        assert arch[-1] == want, name


@pytest.mark.parametrize("spec,cls", [("M4 24GB", "g"), ("M4 Pro 24GB", "s"),
                                      ("M3 Max 30-core 36GB", "s"), ("M2 Ultra 192GB", "d")])
def test_machine_carries_its_gpu_class(spec, cls):
    assert resolve_machine(spec).gpu_class == cls


def test_a_user_table_with_a_malformed_architecture_is_refused(tmp_path):
    bad = tmp_path / "skus.toml"
    bad.write_text('[chips."M4"]\ngpu_arch = "g16"\n')
    with pytest.raises(MachineError, match="gpu_arch"):
        load_sku_table(extra_path=bad, user_path=tmp_path / "none.toml")


# --------------------------------------------------------------------------- the commit rule


def test_commit_rule_by_class_and_overrides():
    """device.cpp: 'g' 40/40, 's' and 'd' 50/50, 'p' 20/40, unknown 40/40; the two variables win."""
    assert cb.commit_rule("g") == (40, 40)
    assert cb.commit_rule("s") == cb.commit_rule("d") == (50, 50)
    assert cb.commit_rule("p") == (20, 40)
    assert cb.commit_rule("x") == (40, 40)
    env = dict(cb.parse_mlx_env(["MLX_MAX_MB_PER_BUFFER=200", "MLX_MAX_OPS_PER_BUFFER = 7"]))
    assert cb.commit_rule("s", env) == (7, 200)


@pytest.mark.parametrize("bad", [["MLX_MAX_MB_PER_BUFFER"], ["MLX_MAX_MB_PER_BUFFER=0"],
                                 ["MLX_MAX_MB_PER_BUFFER=ten"], ["MLX_METAL_FAST=1"]])
def test_bad_mlx_env_is_named(bad):
    with pytest.raises(UsageError) as e:
        cb.parse_mlx_env(bad)
    assert e.value.param == "mlx_env"


def test_scheduler_env_is_read_from_the_environment():
    env = {"MLX_MAX_MB_PER_BUFFER": "120", "PATH": "/bin"}
    assert mlx_scheduler_env(env) == ["MLX_MAX_MB_PER_BUFFER=120"]
    assert mlx_scheduler_env({}) == []


# --------------------------------------------------------------------------- per-op sizes


def test_per_op_sizes_of_qwen3_0_6b_by_hand():
    """Qwen3-0.6B (hidden 1024, 16 heads x 128, 8 KV heads, MLP 3072), bf16, a 100-token
    chunk against 300 cached keys, one byte per parameter:
      norm       held 100 x 1024 x 2            = 204,800
      q_proj     counted 2048 x 1024 + 204,800  = 2,301,952   (q width 16 x 128)
      kv_proj    counted 8 x 256 x 1024         = 2,097,152   (K and V, 128 each)
      rope       held 100 x (2048 + 1024) x 2   = 614,400     (q and k)
      cache      held 100 x 2048 x 2 = 409,600; counted 300 x 2048 x 2 = 1,228,800
      sdpa       held 100 x 2048 x 2            = 409,600
      o_proj     held 409,600; counted 2048 x 1024 = 2,097,152
      act        held 2 x 100 x 3072 x 2        = 1,228,800
      down       held 614,400; counted 3072 x 1024 = 3,145,728"""
    cfg = load_config("Qwen__Qwen3-0.6B")
    ops = {o.name: o for o in cb.layer_ops(cfg, 0, 100, 300, 1.0)}
    assert ops["norm"].held == 204_800
    assert ops["q_proj"].counted == 2_301_952 and ops["q_proj"].held == 0
    assert ops["kv_proj"].counted == 2_097_152 and ops["kv_proj"].dispatches == 2
    assert ops["rope"].held == 614_400
    assert (ops["cache_update"].held, ops["cache_update"].counted) == (409_600, 1_228_800)
    assert ops["sdpa"].held == 409_600
    assert (ops["o_proj"].held, ops["o_proj"].counted) == (409_600, 2_097_152)
    assert ops["act"].held == 1_228_800
    assert (ops["down"].held, ops["down"].counted) == (614_400, 3_145_728)


def test_commits_follow_the_rule():
    """Fewer ops or fewer MiB per buffer: more, smaller buffers; the pass's held bytes are the
    same in total (every op's temporaries are held by exactly one buffer)."""
    cfg = load_config("Qwen__Qwen3-0.6B")
    w = 400_000_000
    loose = cb.buffer_sizes(cfg, w, 512, 0, 50, 50)
    tight_ops = cb.buffer_sizes(cfg, w, 512, 0, 10, 50)
    tight_mb = cb.buffer_sizes(cfg, w, 512, 0, 50, 5)
    assert len(tight_ops) > len(loose) and len(tight_mb) > len(loose)
    assert sum(loose) == sum(tight_ops) == sum(tight_mb)
    assert max(tight_mb) < max(loose)


def test_held_bytes_grow_with_the_buffers_in_flight_up_to_mlx_limit():
    sizes = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130)
    assert cb.held_bytes(sizes, 0) == 130  # the open buffer alone
    assert cb.held_bytes(sizes, 1) == 250
    assert cb.held_bytes(sizes, 1.5) == 250 + 55
    # MAX_ACTIVE_TASKS = 10: at most 11 committed buffers beside the open one
    assert cb.held_bytes(sizes, 40) == cb.held_bytes(sizes, cb.MAX_ACTIVE_TASKS + 1) == sum(
        sizes[1:])
    assert cb.held_bytes((), 5) == 0


# --------------------------------------------------------------------------- the prediction


def test_base_chip_and_env_overrides_move_the_floor_the_right_way():
    """The fitted floor is for 50 ops / 50 MB (Pro/Max/Ultra): a base chip's 40/40 holds less,
    a larger MLX_MAX_MB_PER_BUFFER more, and the same setting on a Pro changes it as well."""
    pro = mlxfit.fit(L1B, 2048, machine="M4 Pro 24GB")
    base = mlxfit.fit(L1B, 2048, machine="M4 24GB")
    big = mlxfit.fit(L1B, 2048, machine="M4 24GB", mlx_env=["MLX_MAX_MB_PER_BUFFER=400"])
    small = mlxfit.fit(L1B, 2048, machine="M4 Pro 24GB",
                       mlx_env={"MLX_MAX_MB_PER_BUFFER": 10, "MLX_MAX_OPS_PER_BUFFER": 10})
    f = {k: _activations(r) for k, r in
         {"pro": pro, "base": base, "big": big, "small": small}.items()}
    assert f["pro"]["floor_scale"] == 1.0 and f["pro"]["commit_rule_ops_mb"] == [50, 50]
    assert f["base"]["commit_rule_ops_mb"] == [40, 40]
    assert f["small"]["floor"] < f["base"]["floor"] < f["pro"]["floor"] < f["big"]["floor"]
    assert small.total_bytes < base.total_bytes < pro.total_bytes < big.total_bytes


def test_cli_mlx_env_flag():
    args = ("fit", Q06, "--ctx", "2048", "--machine", "M4 24GB", "--json")
    plain = invoke(*args)
    more = invoke(*args, "--mlx-env", "MLX_MAX_MB_PER_BUFFER=400")
    assert plain.exit_code == more.exit_code == 0

    def rule(out: str) -> list[int]:
        terms = json.loads(out)["terms"]
        return next(t for t in terms if t["name"] == "activations")["inputs"][
            "commit_rule_ops_mb"]

    assert rule(plain.output) == [40, 40] and rule(more.output) == [40, 400]
    bad = invoke(*args, "--mlx-env", "MLX_MAX_MB_PER_BUFFER=-3")
    assert bad.exit_code == 2 and "--mlx-env" in bad.output and "Traceback" not in bad.output


# --------------------------------------------------------------------------- kernel paths


def _attn(hd: int, q: int = 16, kv: int = 8) -> Attn:
    return Attn(Full(), q, kv, hd, hd, hd)


def test_prefill_paths_by_version_and_chip():
    m4, m5 = kernels.arch_gen("applegpu_g16s"), kernels.arch_gen("applegpu_g17s")
    assert (m4, m5) == (16, 17)
    assert kernels.prefill_path(_attn(96), 2048, m4, 26, "0.32.0") == "unfused"
    assert kernels.prefill_path(_attn(96), 2048, m4, 26, "0.32.4") == "fused"
    assert kernels.prefill_path(_attn(256), 2048, m4, 26, "0.32.4") == "unfused"
    assert kernels.prefill_path(_attn(256), 2048, m5, 26, "0.32.4").startswith("fused")
    assert kernels.prefill_path(_attn(256), 512, m5, 26, "0.32.4") == "unfused"  # < 1024 queries
    assert kernels.prefill_path(_attn(256), 2048, m5, 15, "0.32.4") == "unfused"  # no NAX
    assert kernels.prefill_path(_attn(256), 2048, m5, 26, "0.32.1") == "unfused"
    assert kernels.prefill_path(_attn(192), 2048, m5, 26, "0.32.4") == "unfused"
    sliding = Attn(Rotating(1024), 16, 8, 256, 256, 256)
    assert kernels.prefill_path(sliding, 1024, m5, 26).startswith("fused")  # mask="causal"
    assert kernels.prefill_path(sliding, 2048, m5, 26) == "unfused"  # array mask past the window


def test_m5_head_dim_256_flips_at_1024_queries_in_memory_and_compute():
    """A head-dim-256 full-attention layer of 16 query heads, bf16, in a 2-layer model (prefill
    computes the first layer only). One chunk of 1023 queries on M5 (gen 17, macOS 26): the
    scores are materialized, 16 x 1023 x 1023 x 2 B + 1023 x 1023 mask = 34,535,457 B, and
    the compute model moves the same 16 x 1023 x 1023 x 2 B of scores (the whole rectangle).
    At 1024 queries MLX takes the NAX kernel (the kernel path flips); the estimate follows it
    only when kernels.NAX_IN_ESTIMATE, and then both models say fused: no score term, no score
    traffic, causal FLOPs 2 x 16 x (1024 x 1025 / 2) x 512. On M4 (gen 16) nothing flips."""
    from mlxfit.estimate.compute import chunk_flops
    from mlxfit.estimate.memory import Run, attn_unfused, scores_term
    from mlxfit.model.inputs import MatmulParams

    a = _attn(256, 16, 2)
    be = load_calibration().backend("metal")
    cases = ((17, 1023, False, False), (17, 1024, True, kernels.NAX_IN_ESTIMATE),
             (16, 1024, False, False))
    for gen, q, nax_path, fused in cases:
        assert kernels.prefill_path(a, q, gen, 26).startswith("fused") is nax_path
        cfg = _two_layer_cfg(a)
        run = Run(ctx=q + 1, prefill_step_size=q, gpu_gen=gen, macos_major=26)
        assert attn_unfused(a, run, cfg, False, q) is not fused
        assert kernels.prefill_fused(a, cfg, q, False, backend="metal", gpu_gen=gen,
                                     macos_major=26) is fused
        s = scores_term(cfg, run, 1, be, False)
        f = chunk_flops(cfg, MatmulParams(total=1), run, 1)
        if fused:
            assert s.bytes == 0 and f.score_bytes == 0 and f.attn_unfused == 0
            assert f.attn_fused == 2 * 16 * (q * (q + 1) / 2) * 512
        else:
            assert s.bytes == int(be.score_arrays * 16 * q * q * 2 + q * q)
            assert f.score_bytes == 16 * q * q * 2 and f.attn_fused == 0


def _two_layer_cfg(a):
    from mlxfit.model.config import Layer, ModelConfig

    return ModelConfig(model_type="llama", family="llama", hidden=4096, num_layers=2,
                       vocab=1000, intermediate=8192, moe_intermediate=0, num_experts=0,
                       top_k=0, shared_intermediate=0, tie_embeddings=False, max_position=None,
                       layers=(Layer(a), Layer(a)), own_cache=False, scores_always=False,
                       act_bytes=2)


def test_decode_paths():
    fused = load_calibration().backend("metal").fused_decode_head_dims  # speed.py's list
    assert kernels.decode_path(_attn(128), "0.32.4", fused) == "fused"
    assert kernels.decode_path(_attn(80), "0.32.4", fused) == "unfused"
    assert kernels.decode_path(_attn(80), "0.32.4", fused + (80,)) == "fused"  # the one list
    # queries x GQA > 32: 64 query heads on 1 KV head
    assert kernels.decode_path(_attn(128, 64, 1), "0.32.4", fused).startswith("unfused")
    assert kernels.decode_path(_attn(128, 64, 1), "0.30.3", fused) == "fused"


def test_fit_says_which_kernel_each_layer_takes():
    r = mlxfit.fit(Q06, 2048, machine="M4 Pro 24GB")
    note = next(n for n in r.notes if n.startswith("attention kernels"))
    assert "28 x head dim 128: prefill fused, decode fused" in note


def test_a_tighter_rule_never_raises_the_floor():
    """Qwen3-0.6B at 2K chunks: the modelled held bytes under 40/40 land within 1 % of 50/50
    either way (where commits fall); a rule tighter in both limits is held to at most the
    fitted floor, a looser one to at least it."""
    tight = _activations(mlxfit.fit(Q06, 2048, machine="M4 24GB"))
    loose = _activations(mlxfit.fit(Q06, 2048, machine="M4 Pro 24GB",
                                    mlx_env=["MLX_MAX_MB_PER_BUFFER=51"]))
    assert tight["floor_scale"] <= 1.0 <= loose["floor_scale"]


# --------------------------------------------------------------------------- drain classes


def test_each_chip_takes_its_drain_class():
    """Max and Ultra GPUs drain as one class, base and Pro as another, M5 as a third (issue 18);
    the class is read from the SKU, so two Pro chips of different generations share it."""
    want = {"M4 Max 64GB": "big", "M3 Ultra 80c 512GB": "big", "M4 Pro 24GB": "small",
            "M1 Pro 16-core 32GB": "small", "M3 10-core 16GB": "small", "M5 Max 128GB": "m5"}
    got = {m: _activations(mlxfit.fit(Q06, 2048, machine=m))["drain_class"] for m in want}
    assert got == want
    assert cb.drain_class("g") == "small" and cb.drain_class("s") == cb.drain_class("d") == "big"
    assert cb.drain_class("s", gpu_gen=17) == "m5"


def test_a_class_floor_moves_only_its_own_class(tmp_path):
    """Raising the base/Pro floor in a user calibration file raises the Pro and base peaks of a
    floor-bound run (a 0.6B model at 2K chunks) and leaves the Max's and the M5's unchanged."""
    user = tmp_path / "calibration.toml"
    user.write_text("[backend.metal]\nact_floor_small = 9.0e8\n")
    shipped, raised = load_calibration(), load_calibration(user)
    for machine, moves in (("M4 Pro 24GB", True), ("M4 24GB", True), ("M4 Max 64GB", False),
                           ("M5 Max 128GB", False)):
        a = mlxfit.fit(Q06, 2048, machine=machine, calibration=shipped).total_bytes
        b = mlxfit.fit(Q06, 2048, machine=machine, calibration=raised).total_bytes
        assert (b > a) if moves else (b == a), machine
