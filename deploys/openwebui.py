"""Open WebUI as a systemd service: chat in the browser for the lab's models (PyPI's open-webui, its own venv).

    pyinfra -y inventory.py deploys/openwebui.py --limit webui
    pyinfra -y inventory.py deploys/openwebui.py --limit webui --data openwebui_find_links=/mnt/openwebui-wheels
    labwright verify openwebui --hosts=@lxd/webui

The models: the LiteLLM gateway when deploys/litellm.py runs on the same host (its master key is copied into a
root-only file there, never through this machine), else every engine host of the inventory (``llamacpp_model``,
``tabbyapi_model_name``, ``ollama_models``) as a connection of its own; ``openwebui_backend`` forces one.
Host data: ``openwebui_<key>`` for each key of templates/openwebui/defaults.toml [service]. See docs/openwebui.md.

WEBUI_SECRET_KEY and the first admin's password are generated on the guest (python3 secrets) into root-only files
and never leave it; the admin is made by Open WebUI itself from WEBUI_ADMIN_EMAIL/WEBUI_ADMIN_PASSWORD (0.12.4:
open_webui/env.py, main.py) and sign-up stays off. Offline: OFFLINE_MODE, HF_HUB_OFFLINE, no Ollama, no embedding
model loaded at start. ``openwebui_pipelines=true`` adds the pipelines server with a generated PIPELINES_API_KEY;
its public default ``0p3n-w3bu!`` (and every other known default key) is refused wherever it is found.
"""

from labwright.deploys.openwebui import deploy_openwebui

deploy_openwebui()
