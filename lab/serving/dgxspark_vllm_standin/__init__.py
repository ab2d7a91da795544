"""dgxspark LAB STAND-IN for `vllm serve`: real Ray, no GPU, no model, never generates text."""
