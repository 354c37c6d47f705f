"""One decode predictor: every verb that shows or fits a decode speed agrees with ``fit``.

``speed.predicted_decode_seconds`` applies the backend's fused decode head dims (from the
calibration) and the Ultra factor (from the machine name). Before it existed, ``measure`` and
``calibrate`` called the bare predictor without either factor: on an M3 Ultra 512GB,
Qwen2.5-7B-Instruct-4bit at 32K was 74.3 tok/s in ``fit`` and 103.3 tok/s in ``measure``, and
``calibrate`` fitted eta against the latter (counting the Ultra factor twice).

Hand check of that fit number (shipped calibration: eta 0.8989, kv_eta 0.8462, ultra_eta
0.9046, gqa_ultra 0.1167, per_layer_s 6.233e-5; 819 GB/s; no layer runs unfused attention):
  weights read   = 4,284,263,424 - 306,561,024 (untied input embedding) = 3,977,702,400 B
  KV read        = 28 layers x 2 (K, V) x 4 kv heads x 128 x 2 B x 32,768 = 1,879,048,192 B,
                   x (1 + 0.1167 x 7) for gqa 28/4 = 7 > 4 on an Ultra    = 3,414,042,660 B
  seconds/token  = (3,977,702,400 / 0.8989 + 3,414,042,660 / 0.8462) / (0.9046 x 819e9)
                   + 28 x 6.233e-5
                 = 0.0059728 + 0.0054457 + 0.0017452 = 0.0131638 s  -> 75.97 tok/s
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.batched import batched_step
from mlxfit.estimate.compute import decode_matmul_flops
from mlxfit.estimate.memory import Run
from mlxfit.estimate.speed import predicted_decode_seconds
from mlxfit.model.inputs import model_inputs
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.calibrate.twin import fit_decode
from mlxfit.verbs.edges import compute_for, machine_for
from mlxfit.verbs.measure.twin import predict

ULTRA = "M3 Ultra 512GB"
CTX = 32768
QWEN7 = "mlx-community/Qwen2.5-7B-Instruct-4bit"  # head dim 128 (fused), gqa 7: Ultra factors
GEMMA4 = "mlx-community/gemma-4-26b-a4b-it-4bit"  # head dims 512 (unfused) and 256, gqa 8


def _record(src, inputs, run: Run, machine) -> dict:
    """A Metal record with the keys ``measure --save`` writes that calibrate's decode fit reads
    (the measured speed is arbitrary: only the prediction for the record is compared)."""
    w = inputs.weights
    return {
        "config": src.config, "ctx": run.ctx, "gen_tokens": run.gen,
        "prefill_step_size": run.prefill_step_size, "kv_bits": run.kv_bits,
        "kv_group_size": run.kv_group_size, "quantized_kv_start": run.quantized_kv_start,
        "max_kv_size": run.max_kv_size, "backend": "metal", "decode_tok_s": 50.0,
        "act_bytes": inputs.cfg.act_bytes,
        "weights_read": {"total_bytes": w.total_bytes, "expert_bytes": w.expert_bytes,
                         "embedding_bytes": w.embedding_bytes,
                         "tied_embeddings": w.tied_embeddings, "lookup_bytes": w.lookup_bytes},
        "machine_info": {"name": machine.name, "bandwidth_gbs": machine.bandwidth_gbs,
                         "ram_bytes": machine.ram_bytes},
        "predicted": {"backend": "metal", "decode_tps": None},
    }


def _calibrate_tps(rec: dict, cal) -> float:
    d = fit_decode([rec], cal)
    assert d is not None and d.n_records == 1
    return d.rows[0].old_tps  # the record predicted with the calibration's own constants


def _every_verb(model: str, cal) -> dict[str, float]:
    """Decode tok/s of ``model`` at CTX on the Ultra, as each verb computes it."""
    r = mlxfit.fit(model, CTX, machine=ULTRA, calibration=cal, chart=True)
    src = resolve_model(model)
    inputs = model_inputs(src)
    m = machine_for(ULTRA)
    _, measure_tps = predict(inputs, r.run, cal, m)
    chart = {p.ctx: p.decode_tps for p in r.chart.points}
    cluster = mlxfit.cluster(model, [ULTRA], CTX, calibration=cal)
    assert cluster.chosen == "single"
    batched = batched_step(inputs.cfg, r.run, inputs.weights, m.bandwidth_gbs, cal, m.name, 1,
                           compute=compute_for(m))
    return {
        "fit": r.predicted_decode_tps,
        "measure": measure_tps,
        "calibrate": _calibrate_tps(_record(src, inputs, r.run, m), cal),
        "chart": chart[CTX],
        "cluster": cluster.plan.predicted_decode_tps,
        "batched_1": batched.per_sequence_tps,
    }


@pytest.mark.parametrize("model", [QWEN7, GEMMA4])
def test_every_verb_predicts_fits_decode_speed_on_an_ultra(model):
    cal = load_calibration()
    tps = _every_verb(model, cal)
    for verb, v in tps.items():
        assert v == pytest.approx(tps["fit"], rel=1e-9), (verb, tps)


def test_qwen7_on_the_ultra_is_the_hand_computed_figure():
    cal = load_calibration()
    d = cal.decode
    tps = _every_verb(QWEN7, cal)
    weights = 4_284_263_424 - 306_561_024
    kv = 28 * 2 * 4 * 128 * 2 * CTX * (1 + d.gqa_ultra * 7)
    secs = (weights / d.eta + kv / d.kv_eta) / (d.ultra_eta * 819e9) + 28 * d.per_layer_s
    for verb, v in tps.items():
        assert v == pytest.approx(1 / secs, rel=1e-6), verb
    assert tps["fit"] == pytest.approx(75.97, abs=0.01)  # the docstring's figure


def test_the_ultra_factor_and_the_fused_dims_change_the_prediction():
    """So the parity above can fail: a non-Ultra name at the same bandwidth, and a backend
    whose fused dims include Gemma 4's 512, give other speeds, in the predictor and in
    calibrate's record."""
    cal = load_calibration()
    src = resolve_model(GEMMA4)
    inputs = model_inputs(src)
    m = machine_for(ULTRA)
    run = Run(ctx=CTX, backend="metal")
    # the Ultra's matmul peak for Gemma 4's unfused layers' FLOPs, as fit and calibrate use it;
    # calibrate cannot name a bare "M3 Max" (no RAM size), so the plain record has no such term
    ultra = 1 / predicted_decode_seconds(inputs.cfg, run, inputs.weights, m.bandwidth_gbs, cal,
                                         m.name,
                                         matmul_flops=decode_matmul_flops(compute_for(m)))[0]
    plain = 1 / predicted_decode_seconds(inputs.cfg, run, inputs.weights, m.bandwidth_gbs, cal,
                                         "M3 Max")[0]
    assert plain > 1.05 * ultra
    rec = _record(src, inputs, run, m)
    assert _calibrate_tps(rec, cal) == pytest.approx(ultra, rel=1e-9)
    rec_plain = dict(rec, machine_info=dict(rec["machine_info"], name="M3 Max"))
    assert _calibrate_tps(rec_plain, cal) == pytest.approx(plain, rel=1e-9)

    metal = cal.backend("metal")
    assert 512 not in metal.fused_decode_head_dims
    wide = replace(cal, backends={**cal.backends, "metal": replace(
        metal, fused_decode_head_dims=metal.fused_decode_head_dims + (512,))})
    tps_wide = _every_verb(GEMMA4, wide)
    # fused at 512 the global layers read at kv_eta, but take the Ultra's GQA factor (gqa 8)
    assert tps_wide["fit"] > 1.005 * ultra
    for verb, v in tps_wide.items():
        assert v == pytest.approx(tps_wide["fit"], rel=1e-9), (verb, tps_wide)


def test_served_batched_estimate_takes_the_ultra_factors():
    """fit_served's batched estimate (parallel 2) is batched_step with the machine's name
    (and its compute: the second sequence's matmul FLOPs add to the step)."""
    cal = load_calibration()
    r = mlxfit.fit(QWEN7, CTX, machine=ULTRA, parallel=2, prompt_cache=0, calibration=cal)
    inputs = model_inputs(resolve_model(QWEN7))
    chip = compute_for(machine_for(ULTRA))
    two = batched_step(inputs.cfg, r.run, inputs.weights, r.bandwidth_gbs, cal, ULTRA, 2,
                            compute=chip)
    plain = batched_step(inputs.cfg, r.run, inputs.weights, r.bandwidth_gbs, cal, "M3 Max",
                              2, compute=chip)
    got = r.serving.batched_decode.aggregate_tps
    assert got == pytest.approx(two.aggregate_tps, rel=1e-12)
    assert got < plain.aggregate_tps


# --------------------------------------------------------------------------- weights read


def _gemma4_with_lookup_tables(folder):
    """The catalog's Gemma 4 26B-A4B as a real folder (sparse safetensors from its headers) plus
    a Gemma 3n/4-style per-layer lookup table of 262,144 rows x 30 layers x 256 (bf16, 4 GB)."""
    from st_helpers import make_folder

    from mlxfit.sources.catalog import load_entry

    entry = load_entry(GEMMA4)
    spec = {t.name: (t.dtype, list(t.shape)) for t in entry.tensors}
    lookup = "language_model.model.embed_tokens_per_layer.weight"
    assert lookup not in spec
    spec[lookup] = ("BF16", [262144, 30 * 256])
    half = len(spec) // 2
    names = list(spec)
    shards = {"model-00001-of-00002.safetensors": {n: spec[n] for n in names[:half]},
              "model-00002-of-00002.safetensors": {n: spec[n] for n in names[half:]}}
    return make_folder(folder, entry.config, shards, index=True), 262144 * 30 * 256 * 2


def test_single_host_cluster_reads_the_weights_fit_reads(tmp_path):
    """The cluster planner reads weights by fit's rule (speed.weights_read_term): the per-layer
    lookup tables are gathered, not streamed, so one host's plan is fit's tok/s; counting the
    4 GB table as read (the old cluster rule) would be much slower."""
    folder, lookup_bytes = _gemma4_with_lookup_tables(tmp_path / "g4")
    cal = load_calibration()
    r = mlxfit.fit(str(folder), CTX, machine=ULTRA, calibration=cal)
    inputs = model_inputs(resolve_model(str(folder)))
    assert inputs.weights.lookup_bytes == lookup_bytes
    read = {t.name: t for t in r.speed_terms}["weights_read_per_token"]
    assert read.inputs["lookup_skipped"] == lookup_bytes
    c = mlxfit.cluster(str(folder), [ULTRA], CTX, calibration=cal)
    assert c.chosen == "single"
    assert c.plan.predicted_decode_tps == pytest.approx(r.predicted_decode_tps, rel=1e-9)

    # The lookup bytes matter: streamed, they would cost lookup / (eta x ultra_eta x bw) more.
    streamed = replace(inputs.weights, lookup_bytes=0)
    mf = decode_matmul_flops(compute_for(machine_for(ULTRA)))
    slower = 1 / predicted_decode_seconds(inputs.cfg, r.run, streamed, r.bandwidth_gbs, cal,
                                          ULTRA, matmul_flops=mf)[0]
    d = cal.decode
    assert 1 / slower - 1 / r.predicted_decode_tps == pytest.approx(
        lookup_bytes / (d.eta * d.ultra_eta * r.bandwidth_gbs * 1e9), rel=1e-6)
    assert c.plan.predicted_decode_tps > 1.2 * slower
