"""The config.json fields each mlx-lm model module's ModelArgs requires (a dataclass field
without a default; model_type aside), copied from mlx-lm 0.32.2; modules whose ModelArgs has its
own from_dict (it reads text_config or renames fields) are left out. A config without one of
these fails mlx-lm's load with a TypeError (allenai/OLMoE-1B-7B-0924 has no rms_norm_eps;
transformers-5 saves of olmo3 have no top-level rope_theta): parse_config warns, naming it.
tests/test_families.py fails when the installed mlx-lm (the measure extra's) has another table.
"""

from __future__ import annotations

from typing import Any

from mlxfit.model.mlx_lm_args import MODEL_ARGS

REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "afm7": (
        "vocab_size", "hidden_dim", "num_layers", "num_kv_reuse_layers", "num_heads",
        "num_kv_heads",
    ),
    "afmoe": ("layer_types",),
    "apertus": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "mlp_bias", "num_attention_heads",
        "attention_bias", "rms_norm_eps", "vocab_size", "num_key_value_heads",
        "max_position_embeddings", "rope_theta", "post_norm", "qk_norm", "tie_word_embeddings",
    ),
    "baichuan_m1": (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "rope_theta", "sliding_window",
        "sliding_window_layers", "conv_window", "rms_norm_eps",
    ),
    "bailing_hybrid": (
        "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "num_experts", "num_experts_per_tok",
        "num_shared_experts", "n_group", "topk_group", "first_k_dense_replace", "layer_group_size",
        "group_norm_size", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings",
        "routed_scaling_factor", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim",
    ),
    "bailing_moe": (
        "hidden_size", "intermediate_size", "max_position_embeddings", "moe_intermediate_size",
        "num_experts", "num_shared_experts", "norm_topk_prob", "num_attention_heads",
        "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps",
        "rope_theta", "vocab_size", "first_k_dense_replace",
    ),
    "bailing_moe_linear": (
        "hidden_size", "intermediate_size", "max_position_embeddings", "moe_intermediate_size",
        "num_experts", "num_shared_experts", "norm_topk_prob", "num_attention_heads",
        "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps",
        "rope_theta", "vocab_size", "first_k_dense_replace", "layer_group_size", "group_norm_size",
    ),
    "bitnet": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "vocab_size",
    ),
    "dbrx": ("vocab_size", "d_model", "ffn_config", "attn_config", "n_layers", "n_heads",),
    "dots1": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "max_position_embeddings", "num_key_value_heads",
        "first_k_dense_replace", "moe_intermediate_size", "n_routed_experts", "n_shared_experts",
        "norm_topk_prob", "num_experts_per_tok", "rope_theta", "routed_scaling_factor",
    ),
    "ernie4_5": (
        "hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
        "num_key_value_heads", "head_dim", "num_hidden_layers", "rms_norm_eps", "vocab_size",
        "rope_theta", "use_bias", "tie_word_embeddings",
    ),
    "ernie4_5_moe": (
        "hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
        "num_key_value_heads", "num_hidden_layers", "rms_norm_eps", "vocab_size", "rope_theta",
        "use_bias", "tie_word_embeddings", "moe_num_experts",
    ),
    "exaone": (
        "hidden_size", "num_layers", "intermediate_size", "num_attention_heads", "vocab_size",
        "rope_theta", "layer_norm_epsilon", "num_key_value_heads",
    ),
    "exaone4": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_key_value_heads", "max_position_embeddings",
        "rope_theta", "head_dim", "tie_word_embeddings", "rope_scaling", "sliding_window",
        "sliding_window_pattern",
    ),
    "exaone_moe": (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "num_experts", "num_experts_per_tok", "num_shared_experts", "rms_norm_eps",
        "max_position_embeddings", "sliding_window", "layer_types", "is_moe_layer",
    ),
    "gear": (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "layer_types",
    ),
    "gemma": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "head_dim",
        "rms_norm_eps", "vocab_size", "num_key_value_heads",
    ),
    "gemma2": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "head_dim",
        "rms_norm_eps", "vocab_size", "num_key_value_heads",
    ),
    "gemma3": ("text_config",),
    "gemma3n": ("text_config",),
    "glm": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "head_dim", "num_key_value_heads",
    ),
    "glm4": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "attention_bias", "head_dim", "rms_norm_eps", "vocab_size", "num_key_value_heads",
        "partial_rotary_factor", "rope_theta",
    ),
    "glm4_moe": (
        "vocab_size", "hidden_size", "intermediate_size", "max_position_embeddings",
        "moe_intermediate_size", "norm_topk_prob", "num_attention_heads", "n_group", "head_dim",
        "topk_group", "n_shared_experts", "n_routed_experts", "routed_scaling_factor",
        "num_experts_per_tok", "first_k_dense_replace", "num_hidden_layers", "num_key_value_heads",
        "rms_norm_eps", "rope_theta", "rope_scaling", "use_qk_norm", "tie_word_embeddings",
        "attention_bias", "partial_rotary_factor",
    ),
    "glm_moe_dsa": (
        "vocab_size", "hidden_size", "index_head_dim", "index_n_heads", "index_topk",
        "intermediate_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "n_shared_experts", "n_routed_experts", "routed_scaling_factor",
        "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim",
        "topk_method", "scoring_func", "norm_topk_prob", "n_group", "topk_group",
        "num_experts_per_tok", "moe_layer_freq", "first_k_dense_replace",
        "max_position_embeddings", "rms_norm_eps", "rope_parameters", "attention_bias",
    ),
    "gpt2": (
        "n_ctx", "n_embd", "n_head", "n_layer", "n_positions", "layer_norm_epsilon", "vocab_size",
    ),
    "gpt_bigcode": (
        "n_embd", "n_layer", "n_inner", "n_head", "n_positions", "layer_norm_epsilon",
        "vocab_size",
    ),
    "gpt_neox": (
        "max_position_embeddings", "hidden_size", "num_attention_heads", "num_hidden_layers",
        "layer_norm_eps", "vocab_size", "rotary_emb_base", "rotary_pct",
    ),
    "granite": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "logits_scaling", "attention_multiplier",
        "embedding_multiplier", "residual_multiplier", "max_position_embeddings",
        "num_key_value_heads", "attention_bias", "mlp_bias", "rope_theta",
    ),
    "granitemoe": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "logits_scaling", "attention_multiplier",
        "embedding_multiplier", "residual_multiplier", "max_position_embeddings",
        "num_key_value_heads", "attention_bias", "rope_theta", "num_local_experts",
        "num_experts_per_tok",
    ),
    "granitemoehybrid": (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "max_position_embeddings", "num_attention_heads", "num_key_value_heads", "attention_bias",
        "embedding_multiplier", "attention_multiplier", "logits_scaling", "residual_multiplier",
        "layer_types", "rms_norm_eps",
    ),
    "helium": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "vocab_size", "attention_bias", "head_dim",
        "max_position_embeddings", "mlp_bias", "rope_theta", "tie_word_embeddings",
    ),
    "hunyuan": (
        "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
        "num_attention_heads", "num_key_value_heads", "attention_bias", "moe_topk", "num_experts",
        "num_shared_expert", "use_mixed_mlp_moe", "use_qk_norm", "rms_norm_eps", "rope_theta",
        "use_cla", "cla_share_factor",
    ),
    "hunyuan_v1_dense": (
        "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
        "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
    ),
    "internlm2": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "internlm3": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "iquestloopcoder": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "head_dim", "num_key_value_heads",
    ),
    "jamba": (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "attn_layer_offset", "attn_layer_period", "expert_layer_offset",
        "expert_layer_period", "mamba_d_conv", "mamba_d_state", "mamba_expand", "num_experts",
        "num_experts_per_tok", "rms_norm_eps", "max_position_embeddings", "vocab_size",
    ),
    "kimi_k25": ("text_config",),
    "kimi_linear": (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "intermediate_size", "head_dim", "rope_theta", "rms_norm_eps",
        "linear_attn_config", "model_max_length", "num_experts", "moe_intermediate_size",
        "kv_lora_rank",
    ),
    "kimi_vl": ("text_config",),
    "Klear": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "attention_bias", "mlp_only_layers", "num_experts", "num_experts_per_tok",
        "decoder_sparse_step", "n_shared_experts", "moe_intermediate_size", "rms_norm_eps",
        "vocab_size", "num_key_value_heads", "rope_theta", "max_position_embeddings",
        "norm_topk_prob",
    ),
    "lfm2": (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "max_position_embeddings", "norm_eps", "conv_bias", "conv_L_cache",
        "block_dim", "block_multiple_of", "block_ffn_dim_multiplier", "block_auto_adjust_ff_dim",
    ),
    "lfm2-vl": ("text_config",),
    "lfm2_moe": (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_hidden_layers", "num_experts", "num_experts_per_tok", "norm_topk_prob",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "use_expert_bias",
        "num_dense_layers", "norm_eps", "conv_bias", "conv_L_cache",
    ),
    "lille-130m": (
        "block_size", "layer_norm_eps", "n_embd", "n_head", "n_kv_heads", "n_layer", "rope_theta",
        "vocab_size",
    ),
    "llama": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "llama4": ("text_config",),
    "llama4_text": (
        "hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size",
        "intermediate_size", "intermediate_size_mlp", "num_key_value_heads", "rms_norm_eps",
        "rope_theta", "head_dim", "tie_word_embeddings", "no_rope_layers", "use_qk_norm",
    ),
    "longcat_flash": (
        "attention_method", "zero_expert_type", "hidden_size", "ffn_hidden_size", "moe_topk",
        "expert_ffn_hidden_size", "n_routed_experts", "zero_expert_num", "num_layers",
        "vocab_size", "max_position_embeddings", "num_attention_heads", "kv_lora_rank",
        "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
        "routed_scaling_factor", "rms_norm_eps", "rope_theta", "mla_scale_q_lora",
        "mla_scale_kv_lora", "attention_bias",
    ),
    "longcat_flash_ngram": (
        "hidden_size", "ffn_hidden_size", "moe_topk", "expert_ffn_hidden_size", "n_routed_experts",
        "zero_expert_num", "num_layers", "vocab_size", "max_position_embeddings",
        "num_attention_heads", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim", "routed_scaling_factor", "rms_norm_eps", "rope_theta",
        "mla_scale_q_lora", "mla_scale_kv_lora",
    ),
    "mamba": (
        "vocab_size", "hidden_size", "intermediate_size", "state_size", "num_hidden_layers",
        "conv_kernel", "use_bias", "use_conv_bias", "time_step_rank",
    ),
    "mamba2": (
        "num_heads", "head_dim", "vocab_size", "hidden_size", "intermediate_size", "state_size",
        "num_hidden_layers", "layer_norm_epsilon", "conv_kernel", "n_groups", "use_bias",
        "use_conv_bias", "tie_word_embeddings", "time_step_limit", "time_step_rank",
    ),
    "mellum": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_experts", "num_experts_per_tok", "moe_intermediate_size", "rms_norm_eps",
        "vocab_size", "num_key_value_heads", "head_dim", "tie_word_embeddings",
        "max_position_embeddings", "norm_topk_prob", "sliding_window", "layer_types",
    ),
    "mimo": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_key_value_heads",
    ),
    "mimo_v2_flash": (
        "num_experts_per_tok", "hybrid_layer_pattern", "moe_layer_freq",
        "add_swa_attention_sink_bias", "add_full_attention_sink_bias", "sliding_window_size",
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts",
        "n_routed_experts", "routed_scaling_factor", "topk_method", "scoring_func",
        "norm_topk_prob", "n_group", "topk_group", "max_position_embeddings", "layernorm_epsilon",
        "rope_theta", "swa_rope_theta", "swa_num_attention_heads", "swa_num_key_value_heads",
        "head_dim", "v_head_dim", "swa_head_dim", "swa_v_head_dim", "partial_rotary_factor",
    ),
    "minicpm": (
        "hidden_size", "dim_model_base", "num_hidden_layers", "intermediate_size",
        "num_attention_heads", "rms_norm_eps", "vocab_size", "num_key_value_heads", "scale_depth",
        "scale_emb",
    ),
    "minicpm3": (
        "hidden_size", "dim_model_base", "num_hidden_layers", "intermediate_size",
        "num_attention_heads", "rms_norm_eps", "vocab_size", "num_key_value_heads", "q_lora_rank",
        "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "scale_depth", "scale_emb",
        "max_position_embeddings",
    ),
    "minimax": (
        "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "max_position_embeddings", "num_experts_per_tok", "num_local_experts",
        "shared_intermediate_size", "num_hidden_layers", "rms_norm_eps", "rope_theta",
        "rotary_dim", "vocab_size",
    ),
    "minimax_m3_vl": ("text_config",),
    "ministral3": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "mistral3": ("text_config",),
    "mistral4": (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts",
        "n_routed_experts", "routed_scaling_factor", "kv_lora_rank", "q_lora_rank",
        "norm_topk_prob", "max_position_embeddings", "rms_norm_eps", "topk_group",
        "num_experts_per_tok", "first_k_dense_replace", "n_group", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim",
    ),
    "muse_spark": ("text_config",),
    "nanbeige": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "vocab_size",
    ),
    "nemotron": (
        "hidden_size", "hidden_act", "num_hidden_layers", "intermediate_size",
        "num_attention_heads", "norm_eps", "vocab_size", "num_key_value_heads",
    ),
    "nemotron_h": (
        "vocab_size", "hidden_size", "intermediate_size", "max_position_embeddings",
        "num_attention_heads", "num_key_value_heads", "attention_bias", "mamba_num_heads",
        "mamba_head_dim", "mamba_proj_bias", "ssm_state_size", "conv_kernel", "n_groups",
        "mlp_bias", "layer_norm_epsilon", "use_bias", "use_conv_bias",
    ),
    "olmo2": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "olmo3": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "max_position_embeddings", "sliding_window", "rope_theta",
    ),
    "olmo_hybrid": (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "vocab_size", "max_position_embeddings",
        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "linear_allow_neg_eigval",
        "tie_word_embeddings", "attention_bias",
    ),
    "olmoe": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_experts", "num_experts_per_tok",
    ),
    "openelm": (
        "head_dim", "num_transformer_layers", "model_dim", "vocab_size", "ffn_dim_divisor",
        "num_query_heads", "num_kv_heads", "ffn_multipliers",
    ),
    "phi3": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "phi3small": (
        "hidden_size", "dense_attention_every_n_layers", "ff_intermediate_size", "gegelu_limit",
        "num_hidden_layers", "num_attention_heads", "layer_norm_epsilon", "vocab_size",
        "num_key_value_heads",
    ),
    "pixtral": ("text_config",),
    "plamo": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "prism_hadamard_qwen35": ("text_config",),
    "qwen2": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_key_value_heads",
    ),
    "qwen2_moe": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_experts_per_tok", "num_experts", "moe_intermediate_size",
        "shared_expert_intermediate_size", "rms_norm_eps", "vocab_size",
    ),
    "qwen3": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_key_value_heads", "max_position_embeddings", "head_dim",
        "tie_word_embeddings",
    ),
    "qwen3_moe": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_experts", "num_experts_per_tok", "decoder_sparse_step", "mlp_only_layers",
        "moe_intermediate_size", "rms_norm_eps", "vocab_size", "num_key_value_heads", "head_dim",
        "rope_theta", "tie_word_embeddings", "max_position_embeddings", "norm_topk_prob",
    ),
    "qwen3_next": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok",
        "decoder_sparse_step", "shared_expert_intermediate_size", "mlp_only_layers",
        "moe_intermediate_size", "rms_norm_eps", "vocab_size", "num_key_value_heads", "rope_theta",
        "partial_rotary_factor", "max_position_embeddings", "head_dim",
    ),
    "qwen3_vl_moe": ("text_config",),
    "recurrent_gemma": (
        "attention_bias", "conv1d_width", "hidden_size", "intermediate_size", "logits_soft_cap",
        "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps",
        "rope_theta", "attention_window_size", "vocab_size",
    ),
    "rwkv7": (
        "vocab_size", "hidden_size", "intermediate_size", "norm_eps", "head_dim",
        "num_hidden_layers", "a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim",
        "decay_low_rank_dim",
    ),
    "seed_oss": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_key_value_heads", "head_dim",
    ),
    "smollm3": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size",
    ),
    "solar_open": (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "n_shared_experts", "n_routed_experts", "routed_scaling_factor", "num_experts_per_tok",
        "first_k_dense_replace", "norm_topk_prob", "max_position_embeddings", "rms_norm_eps",
        "rope_theta", "tie_word_embeddings", "partial_rotary_factor",
    ),
    "spark2_5": (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "sliding_window", "rope_parameters",
    ),
    "stablelm": (
        "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
        "num_key_value_heads", "intermediate_size", "rope_theta", "use_qkv_bias",
        "partial_rotary_factor", "layer_norm_eps",
    ),
    "starcoder2": (
        "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "num_key_value_heads",
    ),
    "step3p5": (
        "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
        "num_attention_groups", "head_dim", "intermediate_size",
    ),
    "telechat3": (
        "hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
        "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "vocab_size", "rope_theta",
    ),
}


def absent_fields(module: str, config: dict[str, Any]) -> list[str]:
    """The fields mlx-lm's ``module`` requires that ``config`` (top level or text_config) lacks."""
    inner = config.get("text_config")
    present = set(config) | (set(inner) if isinstance(inner, dict) else set())
    return [k for k in REQUIRED_FIELDS.get(module, ()) if k not in present]


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


def mlx_lm_reads(module: str, config: dict[str, Any]) -> dict[str, Any]:
    """The config as mlx-lm's ``module`` sees it: where its ModelArgs.from_dict is
    BaseModelArgs' (keep the keys the dataclass declares), only those keys, each absent one at
    its ModelArgs default (afmoe's sliding_window 2048, plamo2's 4 KV heads, phixtral's 32
    layers), minus DECLARED_NOT_READ; NOT_CACHE_KEYS pass through. A wrapper's text_config is
    kept as it is. Any other module: the config unchanged."""
    row = MODEL_ARGS.get(module)
    if row is None or not row["plain"]:
        return config
    declared = set(row["fields"]) - set(DECLARED_NOT_READ.get(module, ()))
    out = {k: v for k, v in config.items()
           if k in declared or k in NOT_CACHE_KEYS or k == "model_type"}
    for k, v in row["defaults"].items():
        if k not in config and k != "model_type" and k in declared:
            out[k] = v
    return out
