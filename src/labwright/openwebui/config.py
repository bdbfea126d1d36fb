"""Open WebUI configuration as pure logic: where its chat models come from, and the environment it runs with.

deploys/openwebui.py feeds this the inventory's hosts; everything that can be wrong in them is a ``ConfigError``
naming the data key, raised before the deploy changes anything. The environment variables are the ones Open WebUI
0.12.4 reads (open_webui/env.py and open_webui/config.py in the PyPI wheel), cited beside each below.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labwright import paths
from labwright.default_keys import is_default_key
from labwright.litellm.config import READ_KEY, ConfigError, EngineHost, discover_engines
from labwright.schema import checks
from labwright.shell import quote

TEMPLATES = paths.templates_dir("openwebui")
BACKENDS = ("auto", "gateway", "engines")
EMAIL = re.compile(r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,190}$")
SAFE_VALUE = re.compile(r"^[^\s'\"$`\\;]*$")
LOCAL_KEY = "none"  # engines without a key (Ollama, one open on purpose) take any; Open WebUI sends one per connection

# Settings that keep Open WebUI 0.12.4 off the internet and fast to start (values are strings, as in an env file):
OFFLINE_SETTINGS: dict[str, str] = {
    "OFFLINE_MODE": "true",                 # env.py: sets HF_HUB_OFFLINE=1, turns off the version check
    "HF_HUB_OFFLINE": "1",                  # huggingface_hub itself (also set by OFFLINE_MODE, stated here anyway)
    "ENABLE_VERSION_UPDATE_CHECK": "false",  # env.py
    "ENABLE_OLLAMA_API": "false",           # config.py: no Ollama connection at http://localhost:11434
    "ENABLE_OPENAI_API": "true",            # config.py
    "RAG_EMBEDDING_MODEL": "",              # config.py; routers/retrieval.py get_ef(): an empty model loads nothing,
    #                                         so no sentence-transformers download (or torch import) at start
    "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "false",   # config.py (already off under OFFLINE_MODE)
    "RAG_RERANKING_MODEL_AUTO_UPDATE": "false",   # config.py
    "ENABLE_WEB_SEARCH": "false",           # config.py
    "ENABLE_COMMUNITY_SHARING": "false",    # config.py: no openwebui.com share button
    "ENABLE_SIGNUP": "false",               # config.py: after the admin made from WEBUI_ADMIN_* nobody signs up
    "ENABLE_PERSISTENT_CONFIG": "false",    # config.py: these settings win over the copy in webui.db on each start
    "DO_NOT_TRACK": "true",
    "SCARF_NO_ANALYTICS": "true",
    "ANONYMIZED_TELEMETRY": "false",        # chromadb's telemetry
}


def load_defaults() -> dict[str, Any]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


@dataclass(frozen=True)
class Connection:
    """One OpenAI-compatible connection of Open WebUI: base URL, and where its key comes from."""

    url: str
    key: str  # a literal (LOCAL_KEY) or "" = read on the guest from ``key_file``'s ``key_var``
    source: str
    key_file: str = ""
    key_var: str = ""  # "NAME" for NAME= / name: lines; "" for a file holding the key alone (llama-server's)


def choose_backend(backend: str, gateway_here: bool, litellm_port: int, hosts: Iterable[EngineHost],
                   engines: Mapping[str, Mapping[str, Any]], address_of: Callable[[EngineHost], str],
                   gateway_key_file: str = "/etc/litellm/master.env",
                   engines_env: str = "/etc/open-webui/engines.env") -> list[Connection]:
    """The connections for ``backend`` ("auto", "gateway" or "engines").

    ``gateway_here``: the LiteLLM gateway's master.env exists on the Open WebUI host. Then (auto or gateway) the one
    connection is the gateway on loopback, its key copied from master.env on the guest. Otherwise every engine host of
    the inventory is a connection of its own (``engines`` as in templates/litellm/defaults.toml [engines]), with the
    engine's own key: read from its key file on the guest for an engine on the Open WebUI host, from ``engines_env``
    (written by the deploy with the keys read on the engines' hosts) for the others."""
    if backend not in BACKENDS:
        raise ConfigError("openwebui_backend", f"{backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "gateway" or (backend == "auto" and gateway_here):
        if not gateway_here:
            raise ConfigError("openwebui_backend", f"gateway: no LiteLLM gateway on this host ({gateway_key_file} is "
                              "missing); run deploys/litellm.py on it first, or set openwebui_backend=engines")
        return [Connection(f"http://127.0.0.1:{litellm_port}/v1", "", "LiteLLM gateway on this host",
                           gateway_key_file, "LITELLM_MASTER_KEY")]
    connections: list[Connection] = []
    seen: set[str] = set()
    for model in discover_engines(hosts, engines, address_of):
        # Ollama's OpenAI-compatible API is under /v1; the others' api_base has it already.
        url = model.api_base.rstrip("/") + "/v1" if model.model.startswith("ollama_chat/") else model.api_base
        if url not in seen:
            seen.add(url)
            key = model.key
            if key is None:
                connections.append(Connection(url, LOCAL_KEY, model.source))
            elif key.local:
                connections.append(Connection(url, "", model.source, key.path, key.name))
            else:
                connections.append(Connection(url, "", model.source, engines_env, key.env))
    if not connections:
        raise ConfigError("openwebui_backend", "no engines in the inventory (llamacpp_model, tabbyapi_model_name or "
                          "ollama_models on a host) and no LiteLLM gateway on this host: Open WebUI would have no "
                          "model (nothing was changed)")
    return connections


def check_email(email: str) -> str:
    if not EMAIL.match(email):
        raise ConfigError("openwebui_admin_email", f"{email!r} is not an e-mail address (Open WebUI signs in with one)")
    return email


def check_name(name: str) -> str:
    if not name.strip() or len(name) > 64 or not SAFE_VALUE.match(name.replace(" ", "")) \
            or checks.control_character(name):
        raise ConfigError("openwebui_admin_name", f"{name!r}: 1-64 characters without quotes, $, `, ; , \\ or "
                          "control characters")
    return name


def refuse_default_key(value: object, key: str) -> None:
    """A key set in inventory data is refused outright when it is a known public default (``0p3n-w3bu!``, ...)."""
    why = is_default_key(str(value))
    if why:
        raise ConfigError(key, f"is {why}, which anyone can look up; remove it: labwright generates a random key on "
                          "the guest (nothing was changed)")


def render_settings(connections: list[Connection], data_dir: str, admin_email: str, admin_name: str,
                    pipelines_url: str = "") -> str:
    """settings.env (0644, no secrets): DATA_DIR, the admin's e-mail and name, the offline settings and the
    connections' URLs.

    The keys of the connections are not here: OPENAI_API_KEYS is written on the guest into the root-only
    openai.env (see ``openai_env_script``)."""
    urls = [c.url for c in connections] + ([pipelines_url] if pipelines_url else [])
    lines = ["# Managed by labwright deploys/openwebui.py; local edits are replaced on the next run.",
             f"DATA_DIR={data_dir}",
             # env.py/config.py: the frontend's static files are copied here at every start; the default is inside
             # the (root-owned) venv, which the service user cannot write
             f"STATIC_DIR={data_dir}/static",
             # env.py: the first admin, made at start when no user exists (its password is in admin.env)
             f"WEBUI_ADMIN_EMAIL={admin_email}",
             f"WEBUI_ADMIN_NAME={admin_name}",
             # config.py: OPENAI_API_BASE_URLS, ';'-separated, index-aligned with OPENAI_API_KEYS
             f"OPENAI_API_BASE_URLS={';'.join(urls)}"]
    lines += [f"{name}={value}" for name, value in OFFLINE_SETTINGS.items()]
    return "\n".join(lines) + "\n"


def openai_env_script(connections: list[Connection], target: str, pipelines_key_file: str = "",
                      check: bool = False) -> str:
    """A POSIX shell script, run as root on the guest, for ``target`` (0600) with OPENAI_API_KEYS: literal keys as
    given, the gateway's (and the pipelines server's) read from their root-only files there, so no key passes
    through the control machine. ``check``: print ``current`` or ``stale`` instead of writing (the fact that decides
    whether the write runs). Exits 1 naming the file when a key cannot be read."""
    parts: list[str] = []
    sources = [(c.key, c.key_file, c.key_var) for c in connections]
    if pipelines_key_file:
        sources.append(("", pipelines_key_file, "PIPELINES_API_KEY"))
    for index, (key, key_file, key_var) in enumerate(sources):
        if key_file:
            # labwright.litellm.config.READ_KEY: NAME= and name: lines, or the key alone (llama-server's key file)
            parts.append(f"k{index}=$(python3 -c {quote(READ_KEY)} {quote(key_file)} {quote(key_var)} 2>/dev/null)")
            if not check:
                what = quote(f"labwright: no {key_var or 'key'} in {key_file} (run the deploy that makes it first)")
                parts.append(f"[ -n \"$k{index}\" ] || {{ echo {what} >&2; exit 1; }}")
        else:
            parts.append(f"k{index}='{key}'")
    joined = ";".join(f"${{k{index}}}" for index in range(len(sources)))
    line = f"printf 'OPENAI_API_KEYS=%s\\n' \"{joined}\""
    if check:
        parts.append(f"if {line} | cmp -s - {target} 2>/dev/null; then echo current; else echo stale; fi")
    else:
        parts.append(f"umask 077; {line} > {target}.new && mv {target}.new {target}")
    return "; ".join(parts)


# Run on the guest as root with python3 (standard library only): sign in as the admin from admin.env/settings.env
# and list the models Open WebUI offers. Prints one JSON line {"models": [...]}; exits 1 with one line on failure.
# The password is read there and never printed. argv: base URL, config dir.
SIGNIN_CHECK = r"""
import json, sys, urllib.error, urllib.request
url, config_dir = sys.argv[1].rstrip("/"), sys.argv[2]
env = {}
for name in ("settings.env", "admin.env"):
    for line in open(f"{config_dir}/{name}", encoding="utf-8"):
        if "=" in line and not line.startswith("#"):
            key, _, value = line.rstrip("\n").partition("=")
            env[key] = value.strip().strip('"')
def call(path, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url + path, data=data, headers=headers), timeout=60) as r:
        return json.load(r)
try:
    token = call("/api/v1/auths/signin", {"email": env["WEBUI_ADMIN_EMAIL"],
                                          "password": env["WEBUI_ADMIN_PASSWORD"]})["token"]
    models = [m["id"] for m in call("/api/models", token=token).get("data", [])]
except urllib.error.HTTPError as error:
    sys.exit(f"labwright: Open WebUI answered {error.code} to the admin's sign-in or model list at {url}")
except (OSError, KeyError, ValueError) as error:
    sys.exit(f"labwright: Open WebUI admin sign-in at {url} failed: {error}")
print(json.dumps({"models": models}))
if not models:
    sys.exit(f"labwright: Open WebUI at {url} lists no models: check its connections (OPENAI_API_BASE_URLS)")
"""
