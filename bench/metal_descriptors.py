"""Descriptors (config + exact tensor list) for the models of metal_published.jsonl.

Each descriptor is what `mlx_lm.convert --q-bits N --q-group-size G` would write, built with
scripts/gen_catalog.py's own machinery (mlx-lm's model classes and quantize_model, lazily on the
CPU): imported, not copied. Models already in the built-in catalog are read from there; the
others are written to bench/results/metal_descriptors/<org>__<name>.json.gz in the catalog's
schema. Base configs that are not in scripts/catalog_configs live in
bench/results/metal_descriptors/configs/ (sources in that folder's README.md).

Usage:  /work/devenv/bin/python bench/metal_descriptors.py [--force] [name ...]
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "metal_descriptors"
MY_CONFIGS = OUT / "configs"
CATALOG = ROOT / "scripts" / "catalog_configs"


def _gen_catalog():
    spec = importlib.util.spec_from_file_location("gen_catalog", ROOT / "scripts" / "gen_catalog.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_catalog"] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Spec:
    """One converted model: base config, quantization, and what the description says."""

    name: str  # descriptor id (org/name); used as the file name
    base: str  # file name in scripts/catalog_configs or bench/results/metal_descriptors/configs
    bits: int | None
    group: int = 64
    note: str = ""
    float32: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)

    def base_path(self) -> Path:
        p = MY_CONFIGS / self.base
        return p if p.exists() else CATALOG / self.base


def _q(stem: str, base: str, bits_list, note: str = "", **kw) -> list[Spec]:
    return [Spec(f"{stem}-Q{b}", base, b, note=note, **kw) for b in bits_list]


QWEN3_4B_2507 = {"max_position_embeddings": 262144, "rope_theta": 5000000, "tie_word_embeddings": True}
QWEN3_30B_2507 = {"max_position_embeddings": 262144, "rope_theta": 10000000}
A_LOG = ("A_log",)
QWEN3_1_7B = {"hidden_size": 2048, "intermediate_size": 6144}

SPECS: list[Spec] = [
    # guruswami-ai/mlx-benchmarks local conversions (mlx_lm.convert --q-bits N, group 64 assumed).
    *_q("local/DeepSeek-Coder-6.7B-Instruct", "deepseek-ai__deepseek-coder-6.7b-instruct.json",
        (2, 3, 4, 6, 8)),
    *_q("local/Gemma-2-9B-It", "google__gemma-2-9b-it.json", (2, 3, 4, 6, 8)),
    *_q("local/Llama-3.1-405B-Instruct", "meta-llama__Llama-3.1-405B-Instruct.json", (2, 3, 4, 5, 6)),
    *_q("local/Meta-Llama-3.1-8B-Instruct", "meta-llama__Meta-Llama-3.1-8B.json", (2, 3, 4, 5, 6, 8)),
    *_q("local/Mistral-7B-Instruct-v0.3", "mistralai__Mistral-7B-Instruct-v0.3__variant.json",
        (2, 3, 4, 6, 8)),
    *_q("local/Mixtral-8x7B-Instruct", "mistralai__Mixtral-8x7B-v0.1.json", (2, 3, 4, 6, 8)),
    *_q("local/Qwen2.5-14B-Instruct", "Qwen__Qwen2.5-14B-Instruct.json", (2, 3, 4, 6, 8)),
    *_q("local/Qwen2.5-32B", "Qwen__Qwen2.5-32B.json", (2, 3, 4, 6, 8)),
    *_q("local/DeepSeek-V3.2", "deepseek-ai__DeepSeek-V3.2.json", (4,)),
    # mlx-community repos not in the catalog.
    Spec("mlx-community/Qwen3-4B-Instruct-2507-6bit", "Qwen__Qwen3-4B__variant.json", 6,
         overrides=QWEN3_4B_2507),
    Spec("mlx-community/Qwen3-4B-Instruct-2507-5bit", "Qwen__Qwen3-4B__variant.json", 5,
         overrides=QWEN3_4B_2507),
    Spec("mlx-community/Qwen3-4B-Instruct-2507-5bit-g32", "Qwen__Qwen3-4B__variant.json", 5, 32,
         overrides=QWEN3_4B_2507),
    Spec("mlx-community/Qwen3-4B-Instruct-2507-4bit-g32", "Qwen__Qwen3-4B__variant.json", 4, 32,
         overrides=QWEN3_4B_2507),
    Spec("mlx-community/Qwen3-4B-4bit", "Qwen__Qwen3-4B__variant.json", 4),
    Spec("mlx-community/Qwen3-30B-A3B-Instruct-2507-6bit", "Qwen__Qwen3-30B-A3B.json", 6,
         overrides=QWEN3_30B_2507),
    Spec("mlx-community/Qwen3-30B-A3B-Instruct-2507-5bit", "Qwen__Qwen3-30B-A3B.json", 5,
         overrides=QWEN3_30B_2507),
    Spec("mlx-community/Qwen2.5-72B-Instruct-6bit", "Qwen__Qwen2.5-72B-Instruct.json", 6),
    *[Spec(f"mlx-community/Qwen3.6-27B-{b}bit", "Qwen__Qwen3.6-27B.json", b, float32=A_LOG)
      for b in (4, 5, 6, 8)],
    Spec("mlx-community/Qwen3.8-27B-4bit", "Qwen__Qwen3.6-27B.json", 4, float32=A_LOG,
         note="Qwen3.8-27B text model: the Qwen3.5/3.6-27B dimensions (public configs agree)"),
    *[Spec(f"mlx-community/Qwen3.6-35B-A3B-{b}bit", "Qwen__Qwen3.6-35B-A3B.json", b, float32=A_LOG)
      for b in (4, 5, 6, 8)],
    *[Spec(f"mlx-community/gemma-4-e2b-it-{b}bit", "google__gemma-4-E2B-it.json", b) for b in (4, 5, 6, 8)],
    *[Spec(f"mlx-community/gemma-4-e4b-it-{b}bit", "google__gemma-4-E4B-it.json", b) for b in (4, 6)],
    *[Spec(f"mlx-community/gemma-4-31b-it-{b}bit", "google__gemma-4-31B-it.json", b) for b in (4, 6)],
    Spec("mlx-community/gemma-4-26b-a4b-it-6bit", "google__gemma-4-26B-A4B.json", 6),
    Spec("mlx-community/GLM-4.7-Flash-4bit", "zai-org__GLM-4.7-Flash.json", 4),
    # prism-ml Ternary-Bonsai MLX 2-bit packs (PrismML-Eng/Bonsai-demo community benchmarks): stock
    # MLX affine 2-bit of the base architectures llama.cpp names for them (qwen35 27B, qwen3 8B /
    # 4B); group 128 as the packs' GGUF twins state, every tensor quantized as mlx_lm.convert does.
    # The group is the one the weights allow: at group 64 the 27B would weigh more than its
    # published peak (bench/results/metal_descriptors/README.md).
    *[Spec(f"prism-ml/Ternary-Bonsai-{n}-mlx-2bit", base, 2, 128, float32=f32, note=note,
           overrides=ov)
      for n, base, f32, ov, note in (
          ("27B", "Qwen__Qwen3.6-27B.json", A_LOG, {}, "qwen3_5 27B text model (llama.cpp: qwen35 27B)"),
          ("8B", "Qwen__Qwen3-8B.json", (), {}, "qwen3 8B (llama.cpp: qwen3 8B, 8.19 B params)"),
          ("4B", "Qwen__Qwen3-4B__variant.json", (), {}, "qwen3 4B (llama.cpp: qwen3 4B, 4.02 B params)"),
          ("1.7B", "Qwen__Qwen3-0.6B.json", (), QWEN3_1_7B,
           "qwen3 1.7B: the 0.6B config with the 1.7B dimensions, as for Qwen3-1.7B-bf16 below"))],
    # metal_heldout.jsonl (issue 25's held-out check: sources never fitted on). Same
    # architectures as the configs named; fine-tunes and QAT re-releases keep the shapes.
    *[Spec(f"mlx-community/Qwen3.5-27B-{t}", "Qwen__Qwen3.6-27B.json", b, float32=A_LOG,
           note="Qwen3.5-27B: the Qwen3.6-27B dimensions")
      for t, b in (("4bit", 4), ("8bit", 8), ("bf16", None))],
    *[Spec(f"mlx-community/Qwen3.5-27B-Claude-Opus-Distilled-{b}bit", "Qwen__Qwen3.6-27B.json", b,
           float32=A_LOG, note="a Qwen3.5-27B fine-tune: the Qwen3.6-27B dimensions")
      for b in (4, 8)],
    *[Spec(f"mlx-community/Qwen3.5-35B-A3B-{b}bit", "Qwen__Qwen3.6-35B-A3B.json", b,
           float32=A_LOG, note="Qwen3.5-35B-A3B: the Qwen3.6-35B-A3B dimensions")
      for b in (4, 8)],
    *[Spec(f"mlx-community/Qwen3.5-9B-{t}", "mlx-community__Qwen3.5-9B-MLX-8bit.json", b,
           float32=A_LOG) for t, b in (("8bit", 8), ("bf16", None))],
    *[Spec(f"mlx-community/gemma-4-{m}-it-8bit", base, 8) for m, base in (
        ("e4b", "google__gemma-4-E4B-it.json"), ("26b-a4b", "google__gemma-4-26B-A4B.json"),
        ("31b", "google__gemma-4-31B-it.json"))],
    Spec("mlx-community/gemma-4-26b-a4b-it-bf16", "google__gemma-4-26B-A4B.json", None),
    Spec("mlx-community/GLM-4.7-Flash-8bit", "zai-org__GLM-4.7-Flash.json", 8),
    Spec("mlx-community/Qwen3-Coder-30B-A3B-Instruct-8bit", "Qwen__Qwen3-30B-A3B.json", 8,
         overrides=QWEN3_30B_2507),
    Spec("mlx-community/phi-4-bf16", "microsoft__phi-4.json", None),
    *[Spec(f"mlx-community/DeepSeek-R1-0528-Qwen3-8B-{t}", "Qwen__Qwen3-8B.json", b,
           note="DeepSeek-R1-0528-Qwen3-8B: a Qwen3-8B fine-tune (same shapes)")
      for t, b in (("4bit", 4), ("8bit", 8), ("bf16", None))],
    # batched_published.jsonl (mudler/vllm.cpp's mlx_lm.benchmark -b N sweep on an M4 16GB).
    Spec("mlx-community/Qwen3-1.7B-bf16", "Qwen__Qwen3-0.6B.json", None, overrides=QWEN3_1_7B,
         note="Qwen3-1.7B: the 0.6B config with the 1.7B dimensions (2048 hidden, 6144 MLP; "
              "28 layers, 16 / 8 heads x 128, tied embeddings: Qwen3 technical report table 1)"),
]


def _path(name: str) -> Path:
    return OUT / (name.replace("/", "__") + ".json.gz")


def build_spec(gc, s: Spec) -> Path:
    entry = gc.Entry(
        repo_id=s.name,
        base=str(s.base_path()),  # absolute: CONFIGS / abs == abs
        description=(f"{s.name}: "
                     + (f"mlx_lm.convert affine {s.bits}-bit group {s.group}" if s.bits
                        else "unquantized bfloat16")
                     + f" (built by bench/metal_descriptors.py from {s.base}). {s.note}").strip(),
        bits=s.bits,
        group_size=s.group if s.bits else None,
        float32_in_checkpoint=s.float32,
        checkpoint_lacks=s.lacks,
        overrides=dict(s.overrides),
    )
    config, tensors, total = gc.build(entry)
    import mlx.core as mx
    import mlx_lm

    doc = {"schema": 1, "repo_id": s.name, "description": entry.description,
           "generated_by": {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__},
           "config": config, "tensors": tensors, "total_bytes": total}
    p = _path(s.name)
    with open(p, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(json.dumps(doc, separators=(",", ":")).encode())
    return p


def load_descriptor(name: str) -> dict[str, Any]:
    """A descriptor by id: ours first, else the built-in catalog's."""
    p = _path(name)
    if not p.exists():
        p = ROOT / "src" / "mlxfit" / "catalog_data" / (name.replace("/", "__") + ".json.gz")
    return json.loads(gzip.decompress(p.read_bytes()))


def main(argv: list[str]) -> int:
    force = "--force" in argv
    wanted = {a for a in argv if not a.startswith("--")}
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    gc = _gen_catalog()
    OUT.mkdir(parents=True, exist_ok=True)
    for s in SPECS:
        if wanted and s.name not in wanted:
            continue
        if _path(s.name).exists() and not force:
            continue
        p = build_spec(gc, s)
        doc = load_descriptor(s.name)
        print(f"{s.name:55s} {len(doc['tensors']):6d} tensors {doc['total_bytes']:>16,d} B  {p.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
