"""What a model is, from config.json and safetensors headers: pure."""
