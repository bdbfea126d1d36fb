"""LiteLLM proxy as a systemd service: one OpenAI-compatible URL for the lab's engines and cloud models.

    pyinfra -y inventory.py deploys/litellm.py --limit gateway
    OPENROUTER_API_KEY=... pyinfra -y inventory.py deploys/litellm.py --limit gateway
    labwright verify litellm --hosts=@lxd/gateway

The deploy reads the whole inventory: every host whose data marks it as an engine (``llamacpp_model``,
``tabbyapi_model_name``, ``ollama_models``; templates/litellm/defaults.toml [engines]) becomes a model in config.yaml.
Gateway host data: ``litellm_<key>`` for each key of defaults.toml [service], ``litellm_cloud_models`` (a list of
{name, model, key_env[, api_base]}; the key itself comes from the pyinfra run's environment and lands in a root-only
secrets.env) and ``litellm_aliases`` ({alias: [primary, fallback, ...]}). See docs/litellm.md.

The master key is generated on the gateway (python3 secrets) into a root-only master.env the first time and never
leaves it; a known public default key there (LiteLLM's ``sk-1234``, pipelines' ``0p3n-w3bu!``, ...) stops the deploy.
Everything is checked before anything changes; each refusal is one line naming the data key.
"""

from labwright.deploys.litellm import deploy_litellm

deploy_litellm()
