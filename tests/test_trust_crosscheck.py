"""config.json against its own tensors (issue 13, class 7): the dimensions the cache plan
uses are checked against the tensor shapes that carry them, and a disagreement is exit 2 naming
the field. Real models must all pass: every built-in catalog manifest (real headers of 60
models: dense, MoE, MLA, sliding-window, hybrid SSM / linear attention, gemma 3/4, gpt-oss,
quantized 4/6/8-bit and mxfp4) is run through the check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from st_helpers import M4PRO, config_dict, invoke, make_folder

from mlxfit.errors import ConfigError
from mlxfit.model.crosscheck import check_dims
from mlxfit.model.inputs import activation_bytes, model_inputs
from mlxfit.model.parse import parse_config
from mlxfit.sources import catalog
from mlxfit.sources.source import ModelSource


@pytest.mark.parametrize("repo_id", catalog.catalog_ids())
def test_every_catalog_model_passes(repo_id: str) -> None:
    e = catalog.load_entry(repo_id)
    assert e is not None
    cfg = parse_config(e.config, act_bytes=activation_bytes(e.tensors), where=repo_id)
    check_dims(cfg, e.tensors, e.config, repo_id)  # raises on a disagreement


def qwen(width: int = 1024, *, quantized: bool = False) -> tuple[dict, dict]:
    """Qwen3-0.6B's real config cut to two layers, its tensors at their real shapes."""
    cfg = config_dict("Qwen__Qwen3-0.6B")
    cfg["num_hidden_layers"] = 2
    t = {"model.embed_tokens.weight": ("BF16", [151936, width]),
         "model.norm.weight": ("BF16", [width])}
    if quantized:  # 4-bit affine, group 64: the embedding packed 8 per U32 word
        cfg["quantization"] = {"group_size": 64, "bits": 4}
        t["model.embed_tokens.weight"] = ("U32", [151936, width // 8])
        t["model.embed_tokens.scales"] = ("BF16", [151936, width // 64])
        t["model.embed_tokens.biases"] = ("BF16", [151936, width // 64])
    for i in range(2):
        p = f"model.layers.{i}.self_attn."
        t.update({p + "q_proj.weight": ("BF16", [2048, width]),
                  p + "k_proj.weight": ("BF16", [1024, width]),
                  p + "v_proj.weight": ("BF16", [1024, width]),
                  p + "o_proj.weight": ("BF16", [width, 2048])})
    return cfg, t


def qwen_moe(experts: int = 8) -> tuple[dict, dict]:
    cfg = config_dict("Qwen__Qwen3-30B-A3B")
    cfg.update(num_hidden_layers=1, num_experts=experts)
    h, e_in = cfg["hidden_size"], cfg["moe_intermediate_size"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    p = "model.layers.0."
    t = {"model.embed_tokens.weight": ("BF16", [1000, h]),
         p + "self_attn.q_proj.weight": ("BF16", [heads * hd, h]),
         p + "self_attn.k_proj.weight": ("BF16", [kv * hd, h]),
         p + "self_attn.v_proj.weight": ("BF16", [kv * hd, h]),
         p + "mlp.gate.weight": ("BF16", [experts, h]),
         p + "mlp.switch_mlp.gate_proj.weight": ("BF16", [experts, e_in, h]),
         p + "mlp.switch_mlp.up_proj.weight": ("BF16", [experts, e_in, h]),
         p + "mlp.switch_mlp.down_proj.weight": ("BF16", [experts, h, e_in])}
    return cfg, t


def sized(cfg: dict, tensors: dict) -> None:
    from st_helpers import header_for

    from mlxfit.model.tensors import TensorInfo

    header, _ = header_for(tensors)
    infos = tuple(TensorInfo.of(n, d["dtype"], d["shape"]) for n, d in header.items())
    model_inputs(ModelSource("m", "folder", "m", cfg, infos, ()))


def test_consistent_models_pass() -> None:
    sized(*qwen())
    sized(*qwen(quantized=True))
    sized(*qwen_moe())


@pytest.mark.parametrize("edit, field", [
    ({"num_key_value_heads": 10**9}, "num_key_value_heads"),
    ({"num_key_value_heads": 4}, "num_key_value_heads"),
    ({"num_attention_heads": 32}, "num_attention_heads"),
    ({"head_dim": 64}, "head_dim"),
    ({"hidden_size": 5120}, "hidden_size"),
])
@pytest.mark.parametrize("quantized", [False, True])
def test_a_config_its_weights_contradict(edit: dict, field: str, quantized: bool) -> None:
    cfg, t = qwen(quantized=quantized)
    cfg.update(edit)
    with pytest.raises(ConfigError) as e:
        sized(cfg, t)
    msg = str(e.value)
    assert msg.startswith(f"m/config.json: {field} disagrees with the weights"), msg
    assert "\n" not in msg


def test_expert_count_against_the_stacks() -> None:
    cfg, t = qwen_moe(8)
    cfg["num_experts"] = 128
    with pytest.raises(ConfigError, match="num_experts disagrees.*128 routed experts.*8 stacked"):
        sized(cfg, t)


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    """The review's probe: 10^9 KV heads over a 2-head k_proj gave a 4 PB cache and
    "DOES NOT FIT"; now exit 2 naming the field."""
    cfg, t = qwen()
    cfg["num_key_value_heads"] = 10**9
    folder = make_folder(tmp_path / "m", cfg, {"model.safetensors": t})
    r = invoke("fit", str(folder), "--machine", M4PRO)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "num_key_value_heads disagrees with the weights" in lines[0]
    cfg, t = qwen()
    cfg["hidden_size"] = 5120
    (folder / "config.json").write_text(json.dumps(cfg))
    r = invoke("fit", str(folder), "--machine", M4PRO)
    assert r.exit_code == 2 and "hidden_size disagrees" in r.output, r.output


VERBS_WITH_A_MODEL = (
    ("fit", "--machine", M4PRO),
    ("matrix",),
    ("serve-plan", "--machine", M4PRO),
    ("cluster", "--host", "M4 Max 64GB", "--host", M4PRO),
)


@pytest.mark.parametrize("verb", VERBS_WITH_A_MODEL, ids=lambda v: v[0])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_every_verb_refuses_a_config_its_weights_contradict(tmp_path: Path, verb, as_json) -> None:
    """The architecture review's probe: a config claiming 4 KV heads over 2-head k_proj
    weights was refused by fit, matrix and serve-plan and planned by cluster (exit 0), which
    loaded the model by a path of its own. Every verb now sizes through the same function."""
    cfg, t = qwen()
    cfg["num_key_value_heads"] = 4  # head_dim 128: the weights below hold 256 / 128 = 2 heads
    t = {k: (d, [256, s[1]]) if k.endswith(("k_proj.weight", "v_proj.weight")) else (d, s)
         for k, (d, s) in t.items()}
    folder = make_folder(tmp_path / "m", cfg, {"model.safetensors": t})
    args = (verb[0], str(folder), *verb[1:], *(("--json",) if as_json else ()))
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    if as_json:
        assert "num_key_value_heads disagrees" in json.loads(r.stdout)["error"]["message"]
    else:
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and "num_key_value_heads disagrees" in lines[0], r.output
