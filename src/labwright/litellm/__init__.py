"""LiteLLM gateway: configuration from inventory data (deploys/litellm.py) and the cached wheelhouse."""
