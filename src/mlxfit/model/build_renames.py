"""``prepare`` hooks for families whose configs name their fields their own way: each maps
them to the standard names before ``parse_config`` reads them (mlx-lm 0.32's ModelArgs)."""

from __future__ import annotations

from typing import Any


def renamed(names: dict[str, str]):
    """A prepare hook: copy each mlx-lm field name to the standard one it stands for."""
    def prepare(d: dict[str, Any]) -> dict[str, Any]:
        out = dict(d)
        for theirs, ours in names.items():
            if out.get(theirs) is not None and out.get(ours) is None:
                out[ours] = out[theirs]
        return out
    return prepare


GPT2_NAMES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers",
              "n_head": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
              "n_inner": "intermediate_size", "n_positions": "max_position_embeddings"}


def prepare_recurrent_gemma(d: dict[str, Any]) -> dict[str, Any]:
    """recurrent_gemma.py MLPBlock: intermediate_size is the expanded width; its gate and up
    projections are each half of it, the width a prefill chunk's MLP computes."""
    out = dict(d)
    v = out.get("intermediate_size")
    if isinstance(v, int) and not isinstance(v, bool):
        out["intermediate_size"] = v // 2
    return out


def prepare_dbrx(d: dict[str, Any]) -> dict[str, Any]:
    # max_seq_len is DBRX's context limit (databricks/dbrx-instruct: 32768)
    out = renamed({"d_model": "hidden_size", "n_layers": "num_hidden_layers",
                   "n_heads": "num_attention_heads", "max_seq_len": "max_position_embeddings"})(d)
    attn = d.get("attn_config")
    if isinstance(attn, dict) and out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = attn.get("kv_n_heads")
    ffn = d.get("ffn_config")
    if isinstance(ffn, dict):
        for theirs, ours in (("moe_num_experts", "num_local_experts"),
                             ("moe_top_k", "num_experts_per_tok"), ("ffn_hidden_size",
                                                                    "intermediate_size")):
            if ffn.get(theirs) is not None and out.get(ours) is None:
                out[ours] = ffn[theirs]
    return out


def prepare_openelm(d: dict[str, Any]) -> dict[str, Any]:
    out = renamed({"model_dim": "hidden_size",
                   "num_transformer_layers": "num_hidden_layers"})(d)
    q = d.get("num_query_heads")
    if (isinstance(q, list) and q and all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in q) and out.get("num_attention_heads") is None):
        out["num_attention_heads"] = max(q)
    return out


def prepare_olmo(d: dict[str, Any]) -> dict[str, Any]:
    # olmo.py (OLMo 1) ModelArgs: d_model / n_layers / n_heads; wte and the output head have
    # embedding_size rows (padded past vocab_size); ff_proj is mlp_hidden_size wide (default
    # mlp_ratio x d_model) and SwiGLU halves it, so the MLP's intermediate is half of it.
    out = renamed({"d_model": "hidden_size", "n_layers": "num_hidden_layers",
                   "n_heads": "num_attention_heads", "weight_tying": "tie_word_embeddings",
                   "max_sequence_length": "max_position_embeddings"})(d)
    if isinstance(d.get("embedding_size"), int):
        out["vocab_size"] = d["embedding_size"]
    mlp = d.get("mlp_hidden_size")
    if mlp is None and isinstance(d.get("d_model"), int):
        ratio = d.get("mlp_ratio", 4)
        mlp = ratio * d["d_model"] if isinstance(ratio, int) else None
    if isinstance(mlp, int) and not isinstance(mlp, bool) and out.get("intermediate_size") is None:
        out["intermediate_size"] = mlp // 2
    return out
