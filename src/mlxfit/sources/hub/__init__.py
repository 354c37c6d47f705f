"""The Hugging Face Hub: config.json and safetensors headers only, through range requests,
cached under ~/.cache/mlxfit."""
