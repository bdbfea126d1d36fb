"""One TLS entrance (Caddy, Debian's package) in front of LiteLLM and every engine, one bearer key per client.

    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_model=/srv/models/qwen.gguf \
        --data gateway_clients=laptop,bench
    pyinfra -y @lxd/lw-node1 deploys/gateway.py --data llamacpp_model=/srv/models/qwen.gguf \
        --data gateway_clients=laptop,bench
    labwright bench --url https://ADDRESS:8443/v1 --ca ~/.local/share/labwright/gateway/lxd_lw-node1/root.crt \
        --api-key-env LW_KEY
    labwright verify gateway --hosts=@lxd/lw-node1

Host data ``gateway_<key>`` for every key in templates/gateway/defaults.toml: ``gateway_clients`` (one key each,
made on the guest in /etc/caddy/labwright/clients/NAME), ``gateway_cert_file`` / ``gateway_key_file`` (your
certificate; else Caddy's internal CA, whose root is copied to this machine), ``gateway_names``, ``gateway_port``.
With ``gateway_*`` data on the engine's own guest, ``llamacpp_host=auto`` binds the engine to 127.0.0.1: only the
entrance reaches it. See docs/gateway.md.
"""

from labwright.deploys.gateway import deploy_gateway

deploy_gateway()
