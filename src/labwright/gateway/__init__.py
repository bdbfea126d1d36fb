"""One TLS entrance in front of LiteLLM and the engines: Caddy from the distribution (deploys/gateway.py)."""
