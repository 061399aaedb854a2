"""The router role: vLLM's own router (PyPI vllm-router) as one OpenAI-compatible endpoint in
front of several replica rigs that each serve the model (docs/router.md)."""
