"""The one helpers module of the tests (no test module imports another): the fixture configs,
the CLI runner and the machine most tests name, recorded `sysctl` runners for probing, the tiny
configs of the MLX CPU checks, and builders for safetensors files, model folders and a fake
Hugging Face cache (no network).

Run by hand for the header-scan timing check (not a timed test: CI machines vary):
    /work/devenv/bin/python tests/st_helpers.py [n_shards] [tensors_per_shard]
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from mlxfit.model.tensors import DTYPE_BYTES
from mlxfit.sources.catalog import load_entry

Spec = dict[str, tuple[str, list[int]]]  # tensor name -> (dtype, shape)

FIXTURES = Path(__file__).parent / "fixtures"
CONFIGS = FIXTURES / "configs"  # real published config.json files, named org__repo.json
PROBE_FIXTURES = FIXTURES / "probe"  # recorded sysctl / system_profiler outputs
# The shipped SKU table alone: a developer's own ~/.config/mlxfit/apple_skus.toml must not leak in.
NO_USER_TABLE = Path("/nonexistent/mlxfit/apple_skus.toml")

M4PRO = "M4 Pro 24GB"  # usable 0.76 x 24 GiB = 19.59 GB; coexist 0.6 x 24 GiB = 15.46 GB
ON_M4PRO = ("--machine", M4PRO)  # for a CLI case that is not about probing this host


# --------------------------------------------------------------------------- tiny configs
# Random-weight models of each family mlx-lm has, for the MLX CPU checks (test_measure_cpu.py,
# run there by mlx-lm) and the synthetic records of test_calibrate.py.
# Field names as in config.json. Each has >= 2 layers with a cache after the first attention
# layer (prefill evaluates only the caches: the last layer's attention/MLP never run).

LLAMA64 = {
    "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
    "intermediate_size": 768, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "rms_norm_eps": 1e-5, "vocab_size": 2000, "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
LLAMA128 = dict(LLAMA64, hidden_size=512, intermediate_size=1024, head_dim=128)
QWEN3 = {
    "model_type": "qwen3", "hidden_size": 256, "num_hidden_layers": 3,
    "intermediate_size": 768, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "rms_norm_eps": 1e-6, "vocab_size": 3000,
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "tie_word_embeddings": True,
}
GEMMA3 = {
    "model_type": "gemma3_text", "hidden_size": 256, "num_hidden_layers": 4,
    "intermediate_size": 768, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 64, "query_pre_attn_scalar": 64, "rms_norm_eps": 1e-6, "vocab_size": 4000,
    "sliding_window": 128, "sliding_window_pattern": 2, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
}
GPT_OSS = {
    "model_type": "gpt_oss", "num_hidden_layers": 4, "num_local_experts": 4,
    "num_experts_per_tok": 2, "vocab_size": 2000, "rms_norm_eps": 1e-5, "hidden_size": 256,
    "intermediate_size": 256, "head_dim": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "sliding_window": 128, "rope_theta": 150000,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
}
QWEN3_MOE = {
    "model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 3,
    "intermediate_size": 768, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "moe_intermediate_size": 256, "rms_norm_eps": 1e-6,
    "vocab_size": 2000, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "max_position_embeddings": 40960, "norm_topk_prob": True,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "vocab_size": 2000, "hidden_size": 256,
    "intermediate_size": 768, "moe_intermediate_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
    "n_routed_experts": 8, "routed_scaling_factor": 2.5, "kv_lora_rank": 128,
    "q_lora_rank": 192, "qk_rope_head_dim": 64, "v_head_dim": 64, "qk_nope_head_dim": 64,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "n_group": 1, "topk_group": 1, "num_experts_per_tok": 2, "moe_layer_freq": 1,
    "first_k_dense_replace": 1, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
}
QWEN3_NEXT = {
    "model_type": "qwen3_next", "hidden_size": 256, "num_hidden_layers": 4,
    "intermediate_size": 512, "num_attention_heads": 4, "linear_num_value_heads": 4,
    "linear_num_key_heads": 2, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "decoder_sparse_step": 1, "shared_expert_intermediate_size": 256, "mlp_only_layers": [],
    "moe_intermediate_size": 128, "rms_norm_eps": 1e-6, "vocab_size": 2000,
    "num_key_value_heads": 2, "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
    "max_position_embeddings": 8192, "head_dim": 64, "full_attention_interval": 2,
    "tie_word_embeddings": False,
}
NEMOTRON_H = {
    "model_type": "nemotron_h", "vocab_size": 2000, "hidden_size": 256,
    "intermediate_size": 512, "max_position_embeddings": 8192, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "attention_bias": False, "mamba_num_heads": 8,
    "mamba_head_dim": 32, "mamba_proj_bias": False, "ssm_state_size": 64, "conv_kernel": 4,
    "n_groups": 2, "mlp_bias": False, "layer_norm_epsilon": 1e-5, "use_bias": False,
    "use_conv_bias": True, "hybrid_override_pattern": ["M", "*", "M", "-"],
    "num_hidden_layers": 4, "rope_theta": 10000.0,
}
GRANITE_HYBRID = {
    "model_type": "granitemoehybrid", "vocab_size": 2000, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 4, "max_position_embeddings": 8192,
    "num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": False,
    "embedding_multiplier": 12.0, "attention_multiplier": 0.015625, "logits_scaling": 4.0,
    "residual_multiplier": 0.22, "layer_types": ["mamba", "attention", "mamba", "mamba"],
    "rms_norm_eps": 1e-5, "num_local_experts": 4, "num_experts_per_tok": 2,
    "shared_intermediate_size": 512, "mamba_n_heads": 8, "mamba_d_head": 32,
    "mamba_proj_bias": False, "mamba_d_state": 64, "mamba_d_conv": 4, "mamba_n_groups": 1,
    "mamba_conv_bias": True, "position_embedding_type": "rope", "tie_word_embeddings": True,
}

# Issue 12's mixers (bench/measure_cpu.py --mixers measures the same configs more widely).
RWKV7 = {
    "model_type": "rwkv7", "vocab_size": 2000, "hidden_size": 256, "intermediate_size": 512,
    "norm_eps": 1e-5, "head_dim": 64, "num_hidden_layers": 3, "a_low_rank_dim": 32,
    "v_low_rank_dim": 32, "gate_low_rank_dim": 32, "decay_low_rank_dim": 32,
}
RECURRENT_GEMMA = {
    "model_type": "recurrent_gemma", "attention_bias": False, "conv1d_width": 4,
    "hidden_size": 256, "intermediate_size": 768, "logits_soft_cap": 30.0,
    "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 1,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "attention_window_size": 512,
    "vocab_size": 2000, "block_types": ["recurrent", "recurrent", "attention"],
}
BAILING_LINEAR = {
    "model_type": "bailing_moe_linear", "hidden_size": 256, "intermediate_size": 512,
    "max_position_embeddings": 8192, "moe_intermediate_size": 128, "num_experts": 4,
    "num_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 4,
    "num_experts_per_tok": 2, "num_hidden_layers": 4, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": 2000,
    "first_k_dense_replace": 0, "layer_group_size": 2, "group_norm_size": 1,
}
KIMI_LINEAR = {
    "model_type": "kimi_linear", "vocab_size": 2000, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 64, "kv_lora_rank": 64,
    "q_lora_rank": None, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 32,
    "mla_use_nope": False, "num_experts": 4, "num_experts_per_token": 2,
    "num_shared_experts": 1, "moe_layer_freq": 1, "first_k_dense_replace": 0,
    "moe_router_activation_func": "sigmoid", "moe_renormalize": True,
    "routed_scaling_factor": 1.0, "use_grouped_topk": True, "num_expert_group": 1,
    "topk_group": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
    "model_max_length": 8192, "tie_word_embeddings": False,
    "linear_attn_config": {"num_heads": 4, "head_dim": 64, "kda_layers": [1, 3],
                           "short_conv_kernel_size": 4},
}


def config_dict(name: str) -> dict[str, Any]:
    """A fixture config.json as a dict (`name` with or without ".json")."""
    return json.loads((CONFIGS / (name if name.endswith(".json") else name + ".json")).read_text())


def load_config(name: str, act_bytes: int = 2):
    """A fixture config parsed as mlxfit parses it (activations bf16 unless told)."""
    from mlxfit.model.parse import parse_config

    return parse_config(config_dict(name), act_bytes=act_bytes)


runner = CliRunner()  # one for every test: typer's CliRunner keeps no state between calls


def invoke(*args: str, **kw: Any):
    """The mlxfit CLI in this process: invoke("fit", model, "--ctx", "4096", *ON_M4PRO)."""
    from mlxfit.cli.app import app

    return runner.invoke(app, list(args), **kw)


def recorded_runner(name: str):
    """A runner answering from tests/fixtures/probe/<name>.txt; any other command fails."""
    outputs: dict[str, str | None] = {}
    cmd: str | None = None
    lines: list[str] = []
    for line in (PROBE_FIXTURES / f"{name}.txt").read_text().splitlines():
        if line.startswith("$ "):
            if cmd is not None:
                outputs[cmd] = "\n".join(lines) + "\n" if lines else ""
            cmd, lines = line[2:].strip(), []
        elif cmd is not None:
            if line.startswith("!fail"):
                outputs[cmd] = None
                cmd = None
            else:
                lines.append(line)
    if cmd is not None:
        outputs[cmd] = "\n".join(lines) + "\n" if lines else ""
    calls: list[str] = []

    def run(argv: list[str]) -> str:
        key = " ".join(argv)
        calls.append(key)
        if key not in outputs:
            raise FileNotFoundError(f"no recorded output for {key!r}")
        out = outputs[key]
        if out is None:
            raise subprocess.CalledProcessError(1, argv)
        return out

    run.calls = calls  # type: ignore[attr-defined]
    return run


def write_real(path: Path, arrays: dict[str, Any], metadata: dict[str, str] | None = None) -> Path:
    """A small genuine file written by the safetensors library itself (numpy arrays)."""
    from safetensors.numpy import save_file

    save_file(arrays, str(path), metadata=metadata)
    return path


def header_for(spec: Spec, metadata: dict[str, str] | None = None) -> tuple[dict, int]:
    """Header dict with contiguous offsets in the given order, and the data-region size."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, (dtype, shape) in spec.items():
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    return header, off


def write_raw(path: Path, header: Any, data_size: int, *, length: int | None = None) -> Path:
    """8-byte length + header (dict/list → JSON, bytes as-is), then a sparse data hole.

    `length` overrides the declared header length, for the hostile-length cases.
    """
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length))
        f.write(raw)
        f.truncate(8 + len(raw) + data_size)  # a hole: 20 GB costs nothing on disk
    return path


def write_sparse(path: Path, spec: Spec, metadata: dict[str, str] | None = None) -> Path:
    header, size = header_for(spec, metadata)
    return write_raw(path, header, size)


def make_folder(
    folder: Path,
    config: dict[str, Any] | None,
    shards: dict[str, Spec],
    *,
    index: bool = False,
) -> Path:
    """A model folder: config.json, sparse shards and optionally model.safetensors.index.json."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    weight_map: dict[str, str] = {}
    total = 0
    for fname, spec in shards.items():
        write_sparse(folder / fname, spec)
        total += header_for(spec)[1]
        weight_map.update({name: fname for name in spec})
    if index:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
        )
    return folder


def make_hf_cache(
    cache: Path,
    repo_id: str,
    files: dict[str, bytes | Spec],
    *,
    commit: str,
    refs: tuple[str, ...] = ("main",),
) -> Path:
    """One snapshot in the hub cache layout; returns the snapshot folder.

    models--org--name/refs/<ref> holds the commit sha; snapshots/<sha>/<file> is a relative
    symlink into blobs/<hash>, exactly as huggingface_hub downloads lay it out.
    A Spec value becomes a sparse safetensors blob.
    """
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snap = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # the hub writes it without a newline
    for fname, content in files.items():
        key = hashlib.sha256(fname.encode() + commit.encode()).hexdigest()
        blob = blobs / key
        if isinstance(content, bytes):
            blob.write_bytes(content)
        else:
            write_sparse(blob, content)
        link = snap / fname
        link.parent.mkdir(parents=True, exist_ok=True)
        ups = len(Path(fname).parts) + 1  # snapshots/<sha>/[sub/]file -> ../../[../]blobs/<key>
        link.symlink_to(Path(*([".."] * ups), "blobs", key))
    return snap


def qwen3_8b_bf16_spec() -> Spec:
    """Qwen3-8B in bf16 as mlx-lm loads it (16.4 GB of tensors): embed and lm_head
    151936 x 4096; per layer q, o 4096 x 4096, k, v 1024 x 4096, q/k norms 128, gate/up
    12288 x 4096, down 4096 x 12288, two 4096 norms; a final norm."""
    spec: Spec = {
        "model.embed_tokens.weight": ("BF16", [151936, 4096]),
        "lm_head.weight": ("BF16", [151936, 4096]),
        "model.norm.weight": ("BF16", [4096]),
    }
    for i in range(36):
        p = f"model.layers.{i}."
        spec.update({
            p + "self_attn.q_proj.weight": ("BF16", [4096, 4096]),
            p + "self_attn.k_proj.weight": ("BF16", [1024, 4096]),
            p + "self_attn.v_proj.weight": ("BF16", [1024, 4096]),
            p + "self_attn.o_proj.weight": ("BF16", [4096, 4096]),
            p + "self_attn.q_norm.weight": ("BF16", [128]),
            p + "self_attn.k_norm.weight": ("BF16", [128]),
            p + "mlp.gate_proj.weight": ("BF16", [12288, 4096]),
            p + "mlp.up_proj.weight": ("BF16", [12288, 4096]),
            p + "mlp.down_proj.weight": ("BF16", [4096, 12288]),
            p + "input_layernorm.weight": ("BF16", [4096]),
            p + "post_attention_layernorm.weight": ("BF16", [4096]),
        })
    return spec


def make_qwen3_8b_bf16(folder: Path, config: dict[str, Any], n_shards: int) -> Path:
    """The sparse Qwen3-8B bf16 model in n contiguous model-0000i-of-0000n shards + index."""
    spec = qwen3_8b_bf16_spec()
    names = list(spec)
    per = -(-len(names) // n_shards)
    shards = {f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors":
              {n: spec[n] for n in names[s * per:(s + 1) * per]} for s in range(n_shards)}
    return make_folder(folder, config, shards, index=True)


def make_many_shards(folder: Path, n_shards: int, per_shard: int) -> list[Path]:
    """Sparse shards shaped like a real big checkpoint, for the timing check."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(n_shards):
        spec: Spec = {
            f"model.layers.{s}.block.{i}.mlp.down_proj.weight": ("BF16", [4096, 1024 + i])
            for i in range(per_shard)
        }
        paths.append(
            write_sparse(folder / f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors", spec)
        )
    return paths


def _time_scan(n_shards: int, per_shard: int) -> None:
    import tempfile
    import time

    from mlxfit.sources.safetensors_header import read_headers

    with tempfile.TemporaryDirectory() as d:
        paths = make_many_shards(Path(d), n_shards, per_shard)
        read_headers(paths)  # warm the page cache: we time parsing, not the disk
        t = time.perf_counter()
        tensors = read_headers(paths)
        ours = time.perf_counter() - t
        print(f"mlxfit reader: {len(paths)} shards, {len(tensors)} tensors in {ours:.3f} s")

        # The same job done with the library: names, dtypes, shapes into TensorInfo.
        t = time.perf_counter()
        from safetensors import safe_open

        from mlxfit.model.tensors import TensorInfo

        out = []
        for p in paths:
            with safe_open(str(p), framework="numpy") as f:  # imports numpy on first open
                for k in f.keys():  # noqa: SIM118 (safe_open handles are not iterable)
                    sl = f.get_slice(k)
                    out.append(TensorInfo.of(k, sl.get_dtype(), sl.get_shape()))
        print(
            f"safe_open + get_slice + TensorInfo (incl. numpy import): {len(out)} tensors in "
            f"{time.perf_counter() - t:.3f} s"
        )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    _time_scan(*(args + [1000, 200][len(args) :]))


def cache_catalog_model(cache: Path, repo_id: str, *, as_id: str | None = None,
                        commit: str | None = None) -> Path:
    """One snapshot of a built-in catalog model in the hub cache layout (one sparse shard with
    exactly the catalog's tensors, its real config.json); returns the snapshot folder."""
    e = load_entry(repo_id)
    assert e is not None, repo_id
    rid = as_id or repo_id
    spec = {t.name: (t.dtype, list(t.shape)) for t in e.tensors}
    return make_hf_cache(cache, rid, {"config.json": json.dumps(e.config).encode(),
                                      "model.safetensors": spec},
                         commit=commit or hashlib.sha1(rid.encode()).hexdigest())


def qwen_tiny(root: Path, *, n_shards: int = 3, index: bool = True, kv_config: bool = True,
              width: int = 1024) -> Path:
    """A Qwen3-0.6B-shaped model cut to two layers, sharded, with its real config."""
    cfg = config_dict("Qwen__Qwen3-0.6B")
    cfg["num_hidden_layers"] = 2
    tensors = {"model.embed_tokens.weight": ("BF16", [151936, width]),
               "model.norm.weight": ("BF16", [width])}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors.update({p + "self_attn.q_proj.weight": ("BF16", [2048, width]),
                        p + "self_attn.k_proj.weight": ("BF16", [1024, width]),
                        p + "self_attn.v_proj.weight": ("BF16", [1024, width]),
                        p + "self_attn.o_proj.weight": ("BF16", [width, 2048]),
                        p + "mlp.up_proj.weight": ("BF16", [3072, width]),
                        p + "mlp.gate_proj.weight": ("BF16", [3072, width]),
                        p + "mlp.down_proj.weight": ("BF16", [width, 3072]),
                        p + "input_layernorm.weight": ("BF16", [width])})
    names = list(tensors)
    shards: dict = {}
    for s in range(n_shards):
        fname = (f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors" if n_shards > 1
                 else "model.safetensors")
        shards[fname] = {n: tensors[n] for n in names[s::n_shards]}
    make_folder(root, cfg, shards, index=index)
    if kv_config:
        (root / "kv_config.json").write_text(json.dumps({"kv_bits": 8, "kv_group_size": 64}))
    (root / "README.md").write_text("# tiny\n")
    return root


# The mlxfit command for a child a test sends SIGINT: a non-interactive shell's ``&`` starts its
# job with SIGINT ignored, a child inherits that, and Python then installs no KeyboardInterrupt
# handler. Restoring it first makes the child take Ctrl-C as from a terminal however pytest
# itself was started.
MLXFIT_TAKING_CTRL_C = [sys.executable, "-c",
                        ("import runpy, signal; "
                         "signal.signal(signal.SIGINT, signal.default_int_handler); "
                         "runpy.run_module('mlxfit', run_name='__main__', alter_sys=True)")]
