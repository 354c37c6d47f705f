"""How mlx-lm's model modules read a config.json, from their ModelArgs (mlx_lm_args.py, generated
from the installed mlx-lm 0.32.2 by scripts/gen_mlx_lm_args.py):

- the fields each ModelArgs requires (a dataclass field without a default; model_type aside;
  modules whose ModelArgs has its own from_dict are left out). A config without one fails
  mlx-lm's load with a TypeError (allenai/OLMoE-1B-7B-0924 has no rms_norm_eps;
  transformers-5 saves of olmo3 have no top-level rope_theta): parse_config refuses it,
  naming it (``absent_fields``); a field only the forward pass dereferences is a warning
  (``call_needed_fields``).
- ``mlx_lm_reads``: the config as the module sees it: only the keys its ModelArgs declares,
  absent ones at their defaults.
"""

from __future__ import annotations

from typing import Any

from mlxfit.model.mlx_lm_args import MODEL_ARGS

REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    module: req for module, row in MODEL_ARGS.items() if row["plain"] and ":" not in module
    and (req := tuple(k for k in row["required"] if k != "model_type"))
}

# Fields whose ModelArgs default is None (or empty) but whose module dereferences them
# unconditionally while it builds the model (ModelArgs.__post_init__ / Model.__init__): a
# config without one fails mlx-lm's load as a missing required field does
# (tests/test_mlx_lm_args.py removes each from the family fixture and checks that building
# fails); the dotted alternatives satisfy it too (qwen3 takes rope_parameters' rope_theta).
NEEDED_FIELDS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "deepseek_v2": (("rope_scaling", ()),),
    "hunyuan": (("rope_scaling", ()),),
    # lfm2.py __post_init__: "Config must specify either 'block_ff_dim' or 'intermediate_size'"
    "lfm2": (("block_ff_dim", ("intermediate_size",)),),
    "minicpm3": (("rope_scaling", ()),),
    "mellum": (("rope_parameters", ()),),
    "ministral3": (("rope_parameters", ()),),
    "qwen3": (("rope_theta", ("rope_parameters.rope_theta",)),),
}
# The same, dereferenced only by the forward pass: mlx-lm loads the config and its first
# call fails (mistral4.py reads rope_parameters["llama_4_scaling_beta"] in __call__), so
# parse_config warns instead of refusing a config mlx-lm loads.
CALL_NEEDED_FIELDS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "mistral4": (("rope_parameters", ()),),
}


def absent_fields(module: str, config: dict[str, Any]) -> list[str]:
    """The fields mlx-lm's ``module`` requires that ``config`` (top level or text_config) lacks,
    and those its text model requires of text_config (WRAPPED_TEXT, TEXT_OR_FLAT)."""
    missing = _absent(module, config)
    text = _text_module(module, config)
    if text is not None:
        tc = config.get("text_config")
        inner = tc if isinstance(tc, dict) else config
        # the text class's model_type too: the wrapper passes text_config as it is, with the
        # keys its __post_init__ sets when absent (pixtral's num_attention_heads)
        post_init = WRAPPED_TEXT[module][1] if module in WRAPPED_TEXT else {}
        missing += [k for k in MODEL_ARGS[text]["required"]
                    if k not in inner and k not in post_init]
        missing += _absent(text, inner)
    return list(dict.fromkeys(missing))


def _text_module(module: str, config: dict[str, Any]) -> str | None:
    if module in TEXT_OR_FLAT:
        return TEXT_OR_FLAT[module]
    tc = config.get("text_config")
    if module not in WRAPPED_TEXT or not isinstance(tc, dict):
        return None
    if module == "mistral3" and tc.get("model_type") in MISTRAL3_TEXT:
        return str(tc["model_type"])
    return WRAPPED_TEXT[module][0]


def call_needed_fields(module: str, config: dict[str, Any]) -> list[str]:
    """The fields ``module``'s forward pass dereferences that ``config`` lacks
    (CALL_NEEDED_FIELDS): mlx-lm loads such a config and fails at its first call."""
    return _absent(module, config, CALL_NEEDED_FIELDS, required=False)


def _absent(module: str, config: dict[str, Any],
            needs: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = NEEDED_FIELDS,
            required: bool = True) -> list[str]:
    inner = config.get("text_config")
    present = set(config) | (set(inner) if isinstance(inner, dict) else set())
    scopes = [config] + ([inner] if isinstance(inner, dict) else [])

    def given(path: str) -> bool:
        for scope in scopes:
            value: Any = scope
            for key in path.split("."):
                value = value.get(key) if isinstance(value, dict) else None
            if value:
                return True
        return False

    needed = [k for k, alternatives in needs.get(module, ())
              if not given(k) and not any(given(a) for a in alternatives)]
    if not required:
        return needed
    return [k for k in REQUIRED_FIELDS.get(module, ()) if k not in present] + needed


# Keys mlxfit reads for the weights and the compute model, not for the cache plan: kept even
# where the family's ModelArgs does not declare them (mlx-lm's module then has its own width,
# and these only feed estimates that are approximations of the MLP and router anyway).
NOT_CACHE_KEYS = frozenset({
    "architectures", "quantization", "quantization_config", "torch_dtype", "dtype",
    "vocab_size", "tie_word_embeddings", "tie_embedding", "max_position_embeddings",
    "intermediate_size", "n_inner", "block_ff_dim", "ffn_hidden_size", "moe_intermediate_size",
    "expert_intermediate_size", "shared_expert_intermediate_size", "num_experts",
    "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
    "top_k_experts", "moe_k", "num_activated_experts", "n_shared_experts",
    "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
    "interleave_moe_layer_step", "mlp_only_layers", "attn_output_gate", "max_seq_len",
    "max_sequence_length", "n_positions", "seq_length", "weight_tying",
})

# Fields a module's ModelArgs declares but its attention never reads (checked against mlx-lm
# with a mismatched value in tests/test_mlx_lm_args.py): helium.py takes hidden // heads;
# gpt2.py's and gpt_neox.py's fused c_attn / query_key_value keep a KV head per query head.
DECLARED_NOT_READ: dict[str, tuple[str, ...]] = {
    "helium": ("head_dim",),
    "gpt2": ("num_key_value_heads",),
    "gpt_neox": ("num_key_value_heads",),
}


# Wrappers whose ModelArgs passes text_config to a text module's ModelArgs.from_dict: that
# module, and the keys the wrapper's __post_init__ sets in text_config when absent
# (gemma3.py, gemma4.py, pixtral.py, lfm2-vl.py, mistral3.py: its text model_type picks
# ministral3 or mistral4, else llama).
WRAPPED_TEXT: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma3": ("gemma3_text", {"num_attention_heads": 8, "num_key_value_heads": 4}),
    "gemma4": ("gemma4_text", {"num_attention_heads": 8, "num_key_value_heads": 1}),
    "pixtral": ("llama", {"num_attention_heads": 32}),
    "lfm2-vl": ("lfm2", {}),
    "mistral3": ("llama", {}),
    # TextArgs / TextConfig of the wrapper's own module (<module>:text), or another module's
    "minimax_m3_vl": ("minimax_m3_vl:text", {}),
    "kimi_vl": ("kimi_vl:text", {}),
    "llama4": ("llama4:text", {}),
    "gemma3n": ("gemma3n:text", {}),
    "muse_spark": ("muse_spark:text", {}),
    "kimi_k25": ("deepseek_v3", {}),
    "qwen3_vl_moe": ("qwen3_moe", {}),
}

# Modules whose ModelArgs has its own from_dict: the text class it passes text_config to, or
# the whole config when there is no text_config (qwen2_vl.py, qwen3_vl.py, qwen3_5.py,
# qwen3_5_moe.py, kimi_k3.py).
TEXT_OR_FLAT: dict[str, str] = {
    "qwen2_vl": "qwen2",
    "qwen3_vl": "qwen3",
    "qwen3_5": "qwen3_5:text",
    "qwen3_5_moe": "qwen3_5:text",
    "kimi_k3": "kimi_k3:text",
}
# Own from_dict that merges text_config into the top level, then keeps ModelArgs' fields:
# deepseek_v41.py (text_config's fields and the wrapper's model_type), muse_glimmer.py (the
# top level updated by text_config).
MERGES_TEXT = frozenset({"deepseek_v41", "muse_glimmer"})


def _own_from_dict_view(module: str, config: dict[str, Any]) -> dict[str, Any]:
    tc = config.get("text_config")
    top = {k: v for k, v in config.items() if k in NOT_CACHE_KEYS or k == "model_type"}
    if module in TEXT_OR_FLAT:
        inner = tc if isinstance(tc, dict) else config
        return {**top, "text_config": _filled(TEXT_OR_FLAT[module], inner)}
    if module in MERGES_TEXT:
        merged = dict(config)
        if isinstance(tc, dict):
            merged = ({**tc, "model_type": config.get("model_type")} if module == "deepseek_v41"
                      else {**config, **tc})
        merged.pop("text_config", None)
        return {**top, **_filled(module, merged)}
    return config


def _filled(module: str, config: dict[str, Any]) -> dict[str, Any]:
    """The keys ``module``'s args class declares (NOT_CACHE_KEYS kept), absent ones at their
    defaults (but NOT_CACHE_KEYS), minus DECLARED_NOT_READ."""
    row = MODEL_ARGS[module]
    declared = set(row["fields"]) - set(DECLARED_NOT_READ.get(module, ()))
    out = {k: v for k, v in config.items()
           if k in declared or k in NOT_CACHE_KEYS or k == "model_type"}
    for k, v in row["defaults"].items():
        # NOT_CACHE_KEYS keep mlxfit's own reading: a ModelArgs default max_position_embeddings
        # is no context limit the model was trained to (gemma3_text's 32,768, Gemma 3's 131,072)
        if k not in config and k != "model_type" and k in declared and k not in NOT_CACHE_KEYS:
            out[k] = v
    return out
MISTRAL3_TEXT = ("ministral3", "mistral4")


def _text_view(module: str, config: dict[str, Any]) -> dict[str, Any]:
    wrapped = WRAPPED_TEXT.get(module)
    tc = config.get("text_config")
    if tc is None and "text_config" not in MODEL_ARGS[module]["required"]:
        tc = {}  # gemma4.py: text_config None becomes {} (every text default)
    if wrapped is None or not isinstance(tc, dict):
        return config
    inner, post_init = wrapped
    if module == "mistral3" and tc.get("model_type") in MISTRAL3_TEXT:
        inner = tc["model_type"]
    tc = {**post_init, **tc}
    view = mlx_lm_reads(inner, tc)
    # the text module's own model_type is not the wrapper's: text_fields keeps the wrapper's
    return {**config, "text_config": view}


def mlx_lm_reads(module: str, config: dict[str, Any]) -> dict[str, Any]:
    """The config as mlx-lm's ``module`` sees it: where its ModelArgs.from_dict is
    BaseModelArgs' (keep the keys the dataclass declares), only those keys, each absent one at
    its ModelArgs default (afmoe's sliding_window 2048, plamo2's 4 KV heads, phixtral's 32
    layers), minus DECLARED_NOT_READ; NOT_CACHE_KEYS pass through. A wrapper's text_config is
    read the same way through the text class it is passed to (WRAPPED_TEXT), with the keys the
    wrapper's __post_init__ sets; a ModelArgs with its own from_dict as that from_dict reads
    (TEXT_OR_FLAT, MERGES_TEXT). A module mlx-lm does not have: the config unchanged."""
    row = MODEL_ARGS.get(module)
    if row is None:
        return config
    if not row["plain"]:
        return _own_from_dict_view(module, config)
    return _filled(module, _text_view(module, config))
