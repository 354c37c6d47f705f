"""config.json -> ModelConfig: the language model's dimensions and a per-layer cache plan.

Pure: takes the parsed dict, returns frozen data. The family (``mlxfit.model.families``) builds
the layers; the fields every family shares (depth, widths, experts) are read here.
"""

from __future__ import annotations

from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.config import Fields, Layer, ModelConfig
from mlxfit.model.families import (
    GENERIC,
    IGNORES_HEAD_DIM,
    NOT_SUPPORTED,
    Ctx,
    mlx_lm_module,
    resolve_family,
)
from mlxfit.model.mlx_lm_fields import absent_fields, call_needed_fields, mlx_lm_reads
from mlxfit.model.rope_context import scaled_context


def text_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields: ``text_config`` (VLM wrappers) over the top level."""
    if not isinstance(config, dict):
        raise ConfigError("config.json: the top level must be a JSON object")
    tc = config.get("text_config")
    if tc is None:
        return config
    if not isinstance(tc, dict):
        raise ConfigError("config.json: 'text_config' must be an object")
    merged = {k: v for k, v in config.items() if k != "text_config"}
    merged.update(tc)
    # The wrapper's model_type names the mlx-lm module (gemma3, qwen3_5, llama4, ...).
    if "model_type" in config:
        merged["model_type"] = config["model_type"]
    return merged


def _moe_layer_flags(c: Ctx, n_experts: int) -> list[bool]:
    """Which layers are MoE, from every naming of dense prefixes and strides."""
    f = c.f
    if n_experts <= 0:
        return [False] * c.n
    first_dense = f.int("first_k_dense_replace", 0)
    per_layer = f.d.get("moe_layer_freq")
    if isinstance(per_layer, list):  # mimo_v2_flash / minimax_m3: a 0/1 flag per layer
        if len(per_layer) < c.n or not all(x in (0, 1) for x in per_layer):
            raise ConfigError(f"{f.where}: 'moe_layer_freq' as a list needs a 0/1 flag per "
                              "layer")
        return [bool(per_layer[i]) and i >= first_dense for i in range(c.n)]
    step = f.first_int(("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step"), 1)
    step = max(step, 1)
    mlp_only = set(f.int_list("mlp_only_layers") or [])
    flags = []
    for i in range(c.n):
        moe = i >= first_dense and (i + 1) % step == 0 and i not in mlp_only
        flags.append(moe)
    return flags


def _experts(f: Fields) -> tuple[int, int]:
    n = f.first_int(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 0)
    k = f.first_int(("num_experts_per_tok", "top_k_experts", "moe_k", "num_activated_experts"), 0)
    if n and not k:
        k = 1
    return n, k


# The max_position_embeddings default of transformers' text config classes that composite
# (vision-language) configs nest: Gemma3TextConfig (transformers 4.50+, the model card's 128K).
TEXT_CONFIG_CONTEXT_DEFAULTS = {"gemma3_text": 131072}


def parse_config(config: dict[str, Any], *, act_bytes: int = 2,
                 where: str = "config.json") -> ModelConfig:
    """Build the ModelConfig; ``act_bytes`` is the activation dtype width from the weights."""
    t = text_fields(config)
    f = Fields(t, where)
    raw_type = t.get("model_type")
    if not isinstance(raw_type, str) or not raw_type:
        raise ConfigError(f"{where}: missing 'model_type'")
    archs = t.get("architectures") or ()
    archs = (archs,) if isinstance(archs, str) else archs if isinstance(archs, list) else ()
    archs = tuple(a for a in archs if isinstance(a, str))
    family_name, family = resolve_family(raw_type, archs)
    known = family is not None
    if family is not None and isinstance(config.get("model_type"), str):
        # the keys mlx-lm's ModelArgs keeps, absent ones at its defaults (mlx_lm_args.py)
        t = text_fields(mlx_lm_reads(mlx_lm_module(raw_type, archs), config))
        f = Fields(t, where)
    if family is not None and family.prepare is not None:
        t = family.prepare(t)  # the family's own field names -> the standard ones
        f = Fields(t, where)
    warnings: list[str] = []
    if family is None:
        needed = ("hidden_size", "num_hidden_layers", "num_attention_heads")
        missing = [k for k in needed if not f.has(k)]
        if missing:
            raise ConfigError(
                f"{where}: unknown model_type {raw_type!r} without standard fields "
                f"({', '.join(missing)} missing); cannot size it"
            )
        why = NOT_SUPPORTED.get(mlx_lm_module(raw_type))
        warnings.append(
            f"unknown model_type {raw_type!r}: sized as a plain transformer with a full KV cache "
            "on every layer, UNVERIFIED; "
            + (f"mlxfit does not size it exactly ({why})" if why else
               "with mlx-lm installed (mlxfit[measure]) the plan is read from mlx-lm itself")
        )
        family = GENERIC
    else:
        module = mlx_lm_module(raw_type, archs)
        absent = absent_fields(module, config)
        if absent:  # mlx-lm's from_dict / Model() fails: no run to size
            raise ConfigError(
                f"{where}: missing {', '.join(repr(k) for k in absent)}, which mlx-lm's "
                f"{module} model requires: mlx-lm cannot load this config",
                file=where, field=absent[0])
        at_call = call_needed_fields(module, config)
        if at_call:
            warnings.append(
                f"{where} has no {', '.join(repr(k) for k in at_call)}, which mlx-lm's "
                f"{module} model reads when it runs: mlx-lm loads this config but its first "
                "call fails; the sizes assume the field is added"
            )

    n_layers = f.int("num_hidden_layers", 0 if family.depth_from_pattern else None,
                     minimum=0 if family.depth_from_pattern else 1)
    if n_layers > 100_000:
        raise ConfigError(f"{where}: num_hidden_layers {n_layers} is implausible")
    # d_model is the Mamba spelling; when both are missing, name the usual one.
    hidden = f.int("d_model" if f.has("d_model") and not f.has("hidden_size") else "hidden_size",
                   minimum=1)
    if family.attention_free:
        heads = kv_heads = head_dim = 0
    else:
        heads = f.first_int(("num_attention_heads", "num_heads", "n_heads"), 0)
        if heads <= 0:
            raise ConfigError(f"{where}: missing 'num_attention_heads'")
        kv_heads = f.int("num_key_value_heads", heads, minimum=1)
        stated = 0 if known and family_name in IGNORES_HEAD_DIM else f.int("head_dim", 0)
        head_dim = stated or family.head_dim_default or hidden // heads
        if head_dim < 1:  # else every cache would silently size to 0 bytes
            raise ConfigError(f"{where}: hidden_size {hidden} < num_attention_heads {heads} "
                              "and no head_dim: cannot size the attention")
    n_exp, top_k = _experts(f)
    c = Ctx(f, n_layers, hidden, heads, kv_heads, head_dim, act_bytes, warnings)
    layers = family.build(c)
    n_layers = c.n = len(layers)  # a block pattern may define the depth (depth_from_pattern)
    if not 1 <= n_layers <= 100_000:  # an empty or 10^6-character block pattern
        raise ConfigError(f"{where}: {n_layers} layers is implausible (expected 1 to 100,000)")
    flags = _moe_layer_flags(c, n_exp)
    layers = [
        Layer(ly.attn, ly.state_bytes, ly.state_kind, moe=ly.moe or flags[i])
        for i, ly in enumerate(layers)
    ]
    shared_n = f.int("n_shared_experts", 0)
    moe_inter = f.first_int(("moe_intermediate_size", "expert_intermediate_size"), 0)
    shared_inter = f.int("shared_expert_intermediate_size", 0) or shared_n * moe_inter
    intermediate = f.first_int(("intermediate_size", "block_ff_dim", "ffn_hidden_size"), 0)
    max_pos = f.int("max_position_embeddings", 0) or None
    if max_pos is None and isinstance(config.get("text_config"), dict):
        # transformers saves a composite model's text_config as its difference from the text
        # class's defaults, so a trained context equal to the default is left out.
        max_pos = TEXT_CONFIG_CONTEXT_DEFAULTS.get(str(config["text_config"].get("model_type")))
    max_pos, context_source = scaled_context(t, max_pos)
    tie = f.bool("tie_word_embeddings", bool(config.get("tie_word_embeddings", False)))
    if f.has("tie_embedding"):
        tie = f.bool("tie_embedding", tie)
    return ModelConfig(
        model_type=raw_type,
        family=family_name,
        hidden=hidden,
        num_layers=n_layers,
        vocab=f.int("vocab_size", 0),
        intermediate=intermediate,
        moe_intermediate=moe_inter or (intermediate if n_exp else 0),
        num_experts=n_exp,
        top_k=min(top_k, n_exp) if n_exp else 0,
        shared_intermediate=shared_inter,
        tie_embeddings=tie,
        max_position=max_pos,
        context_source=context_source,
        layers=tuple(layers),
        own_cache=family.own_cache,
        scores_always=family.scores_always,
        act_bytes=act_bytes,
        warnings=tuple(warnings),
        ssm_heads=c.mixer.get("ssm_heads", 0),
        ssm_head_dim=c.mixer.get("ssm_head_dim", 0),
        linear_v_heads=c.mixer.get("linear_v_heads", 0),
        linear_k_heads=c.mixer.get("linear_k_heads", 0),
        linear_k_dim=c.mixer.get("linear_k_dim", 0),
        linear_v_dim=c.mixer.get("linear_v_dim", 0),
        linear_scan=c.mixer.get("linear_scan", ""),
        linear_state_bytes=c.mixer.get("linear_state_bytes", 4),
        lru_width=c.mixer.get("lru_width", 0),
        fails_past=c.mixer.get("fails_past"),
        fails_why=c.mixer.get("fails_why", ""),
        gated_q=family.gated_q or f.bool("attn_output_gate", False),
        never_quantized=family.never_quantized,
        no_quantized_attention=family.no_quantized_attention or (
            family.shared_kv_not_quantized and any(
                ly.attn is not None and not ly.attn.cache.owns_memory
                and ly.attn.cache.window is None for ly in layers)),
        family_known=known,
        plan_source="table" if known else "plain transformer (unverified)",
    )
