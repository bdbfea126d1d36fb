"""LiteLLM gateway configuration as pure logic: engines found in inventory data, cloud models, aliases.

deploys/litellm.py feeds this the inventory's hosts and the control machine's environment; everything that can be
wrong in them is a ``ConfigError`` naming the data key, raised before the deploy changes anything.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from labwright import paths
from labwright.default_keys import is_default_key
from labwright.shell import quote

TEMPLATES = paths.templates_dir("litellm")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
CLOUD = "litellm_cloud_models"
LOCAL_KEY = "none"  # for an engine without a key (Ollama, or one open on purpose): the OpenAI client wants one
KEY_VALUE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")  # what a key read from an engine host may look like


class ConfigError(ValueError):
    """Bad gateway data; the message starts with the data key (the gateway's ``litellm_*`` or an engine host's)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class EngineKey:
    """Where an engine's key is, on its host: the file and how to find the key in it (``name`` "": the file's
    first line that is not a comment; else the ``name:`` / ``NAME=`` line). ``env``: the variable the gateway's
    config.yaml reads it from (``os.environ/ENV``); ``local``: the engine runs on the gateway itself, so the key is
    copied there on the guest and never leaves it."""

    host: str
    path: str
    name: str
    env: str
    local: bool
    data_key: str


@dataclass(frozen=True)
class Model:
    name: str
    model: str
    api_base: str
    api_key: str
    source: str
    key: EngineKey | None = None


@dataclass(frozen=True)
class EngineHost:
    """What the deploy knows of one inventory host: its name and data, and whether it is the gateway itself."""

    name: str
    data: Mapping[str, Any]
    is_gateway: bool = False


@dataclass
class Gateway:
    models: list[Model] = field(default_factory=list)
    fallbacks: list[tuple[str, list[str]]] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    @property
    def engine_keys(self) -> list[EngineKey]:
        """Every engine key the config reads, once each, in model order."""
        found: dict[str, EngineKey] = {}
        for model in self.models:
            if model.key is not None:
                found.setdefault(model.key.env, model.key)
        return list(found.values())


def engine_keys_of(models: Iterable[Model]) -> list[EngineKey]:
    """The engine keys ``models`` need, once each; two hosts whose names map to one variable are refused."""
    keys: dict[str, EngineKey] = {}
    for model in models:
        if model.key is None:
            continue
        other = keys.setdefault(model.key.env, model.key)
        if (other.host, other.path) != (model.key.host, model.key.path):
            raise ConfigError("litellm_engines", f"{other.host} and {model.key.host} both map to the key variable "
                              f"{model.key.env}; rename one of the hosts (letters and digits tell them apart)")
    return list(keys.values())


def key_env(kind: str, host: str) -> str:
    """The environment variable an engine's key reaches LiteLLM in: ENGINE_KEY_<KIND>_<HOST> in [A-Z0-9_]."""
    return "ENGINE_KEY_" + re.sub(r"[^A-Z0-9]+", "_", f"{kind}_{host}".upper()).strip("_")[:48]


def engine_key(kind: str, rule: Mapping[str, Any], host: EngineHost) -> EngineKey | None:
    """Where the engine ``kind`` on ``host`` keeps its key (None: it has none: Ollama, or open on purpose)."""
    if not rule.get("key_file"):
        return None
    open_key = str(rule.get("open_key") or "")
    if open_key and str(host.data.get(open_key, "")).strip().lower() in ("1", "true", "yes", "on"):
        return None
    data_key = str(rule.get("key_file_key") or "")
    path = str(host.data.get(data_key) or "") if data_key else ""
    if not path and rule.get("key_dir_key"):
        data_key = str(rule["key_dir_key"])
        nested = host.data.get(kind)  # deploys/tabbyapi.py also reads a `tabbyapi` dict of settings
        directory = str(host.data.get(data_key) or (nested.get("dir") if isinstance(nested, Mapping) else None)
                        or rule.get("key_dir") or "")
        path = f"{directory.rstrip('/')}/{rule['key_file']}"
    path = path or str(rule["key_file"])
    if not PurePosixPath(path).is_absolute() or not re.fullmatch(r"[A-Za-z0-9._/@+-]+", path):
        raise ConfigError(data_key or f"{kind}_api_key_file", f"{path!r} on {host.name} is not an absolute path "
                          "without shell characters")
    return EngineKey(host.name, path, str(rule.get("key_name") or ""), key_env(kind, host.name), host.is_gateway,
                     data_key or f"{kind}_api_key_file")


def load_defaults() -> dict[str, Any]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


def _port(value: Any, key: str, host: str) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"{value!r} on {host} is not a port number") from None
    if not 1 <= port <= 65535:
        raise ConfigError(key, f"{port} on {host} is out of range (1..65535)")
    return port


def _check_name(name: str, key: str, host: str) -> str:
    if not MODEL_NAME.match(name):
        raise ConfigError(key, f"{name!r} on {host} is not a usable model name (letters, digits, ._:/@+-)")
    return name


def discover_engines(hosts: Iterable[EngineHost], engines: Mapping[str, Mapping[str, Any]],
                     address_of: Callable[[EngineHost], str]) -> list[Model]:
    """One model per llama.cpp / tabbyAPI / vLLM engine host, per model of a llama.cpp router (``models_key``:
    ``llamacpp_models``, one port) and per Ollama model, in inventory order."""
    found: list[Model] = []
    for host in hosts:
        for kind, rule in engines.items():
            marker = host.data.get(rule["marker"])
            routed = host.data.get(rule["models_key"]) if rule.get("models_key") else None
            if marker in (None, "", []) and routed in (None, "", []):
                continue
            port = _port(host.data.get(rule["port_key"]) or rule["port"], rule["port_key"], host.name)
            address = "127.0.0.1" if host.is_gateway else address_of(host)
            source = f"{kind} on {host.name}"
            if rule["provider"] == "ollama_chat":
                names = [marker] if isinstance(marker, str) else list(marker or [])
                for name in names:
                    name = _check_name(str(name), rule["marker"], host.name)
                    found.append(Model(name, f"ollama_chat/{name}", f"http://{address}:{port}", LOCAL_KEY, source))
                continue
            if routed not in (None, "", []):  # llama-server's router mode: every model of the list on one port
                from labwright.llamacpp.router import models_of

                key = engine_key(kind, rule, host)
                for routed_model in models_of({rule["models_key"]: routed}) or []:
                    name = _check_name(routed_model.name, rule["models_key"], host.name)
                    found.append(Model(name, f"{rule['provider']}/{name}", f"http://{address}:{port}/v1",
                                       f"os.environ/{key.env}" if key else LOCAL_KEY, source, key))
                continue
            name = str(host.data.get(rule["name_key"]) or "") if rule["name_key"] else ""
            if not name:  # a model file's stem (q.gguf: q), or a model directory's whole name (vLLM: Qwen2.5-7B)
                path = PurePosixPath(str(marker))
                name = path.name if rule.get("name_from") == "directory" else path.stem
            name = _check_name(name, rule["name_key"] or rule["marker"], host.name)
            key = engine_key(kind, rule, host)
            found.append(Model(name, f"{rule['provider']}/{name}", f"http://{address}:{port}/v1",
                               f"os.environ/{key.env}" if key else LOCAL_KEY, source, key))
    return found


def cloud_models(entries: Any, environ: Mapping[str, str]) -> tuple[list[Model], dict[str, str]]:
    """Cloud models from ``litellm_cloud_models`` ([{name, model, key_env[, api_base]}]) and the keys they need,
    read from the control machine's environment (never from inventory data)."""
    if entries in (None, "", []):
        return [], {}
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ConfigError(CLOUD, 'must be a list of tables like {name = "haiku", model = '
                          '"openrouter/anthropic/claude-haiku-4.5", key_env = "OPENROUTER_API_KEY"}')
    models, secrets = [], {}
    for entry in entries:
        name = _check_name(str(entry.get("name") or ""), CLOUD, "the gateway")
        model = str(entry.get("model") or "")
        if "/" not in model:
            raise ConfigError(CLOUD, f"{name}: model {model!r} needs a provider prefix, e.g. "
                              "openrouter/anthropic/claude-haiku-4.5")
        key_env = str(entry.get("key_env") or "")
        if not ENV_NAME.match(key_env):
            raise ConfigError(CLOUD, f"{name}: key_env {key_env!r} is not an environment variable name "
                              "(e.g. OPENROUTER_API_KEY)")
        value = environ.get(key_env, "")
        if not value.strip():
            raise ConfigError(CLOUD, f"{name} needs ${key_env} in the environment of the pyinfra run; "
                              f"export it (the key goes to a root-only file on the gateway, never into the inventory)"
                              " (nothing was changed)")
        if any(ch in value for ch in "\r\n\"\\") or value != value.strip():
            raise ConfigError(CLOUD, f"${key_env} contains quotes, backslashes, newlines or surrounding "
                              "spaces; check the exported value")
        why = is_default_key(value)
        if why:
            raise ConfigError(CLOUD, f"${key_env} is {why}; export the real key")
        api_base = str(entry.get("api_base") or "")
        if api_base and not api_base.startswith("https://"):
            raise ConfigError(CLOUD, f"{name}: api_base {api_base!r} must be https:// (keys travel to it)")
        models.append(Model(name, model, api_base, f"os.environ/{key_env}", f"cloud ({key_env})"))
        secrets[key_env] = value
    return models, secrets


def parse_aliases(value: Any) -> dict[str, list[str]]:
    """``{alias: [primary, fallback, ...]}``; a string value is a comma-separated list."""
    if value in (None, "", {}):
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError("litellm_aliases", 'must be a table like {fast = ["qwen3.5-4b", "qwen2.5-coder-1.5b"]}')
    aliases: dict[str, list[str]] = {}
    for alias, targets in value.items():
        if isinstance(targets, str):
            targets = [t.strip() for t in targets.split(",") if t.strip()]
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
            raise ConfigError("litellm_aliases", f"{alias}: needs a list of model names, primary first")
        aliases[_check_name(str(alias), "litellm_aliases", "the gateway")] = [str(t) for t in targets]
    return aliases


def build_gateway(engines: list[Model], cloud: list[Model], secrets: dict[str, str],
                  aliases: dict[str, list[str]]) -> Gateway:
    """Engines and cloud models, then one entry per alias (its primary's parameters) with the rest as fallbacks."""
    gateway = Gateway(secrets=dict(secrets))
    engine_keys_of(engines)
    for model in [*engines, *cloud]:
        clash = next((m for m in gateway.models if m.name == model.name), None)
        if clash:
            raise ConfigError("litellm_engines", f"model name {model.name!r} is served by {clash.source} and by "
                              f"{model.source}; give one a different name (e.g. llamacpp_alias)")
        gateway.models.append(model)
    by_name = {m.name: m for m in gateway.models}
    if aliases and not by_name:
        raise ConfigError("litellm_aliases", "no engines or cloud models in the inventory to point aliases at")
    for alias, targets in aliases.items():
        if alias in by_name:
            raise ConfigError("litellm_aliases", f"{alias} is already a model's name; pick another alias")
        missing = [t for t in targets if t not in by_name]
        if missing:
            raise ConfigError("litellm_aliases", f"{alias} -> {', '.join(missing)}: not a model in this lab (known: "
                              f"{', '.join(sorted(by_name))}); fix the alias or add the engine (nothing was changed)")
        primary = by_name[targets[0]]
        gateway.models.append(Model(alias, primary.model, primary.api_base, primary.api_key,
                                    f"alias -> {', '.join(targets)}", primary.key))
        if len(targets) > 1:
            gateway.fallbacks.append((alias, targets[1:]))
    return gateway


def render_config(gateway: Gateway, num_retries: int, timeout: int, metrics: bool = False) -> str:
    """config.yaml; ``metrics``: LiteLLM's prometheus callback on, its /metrics behind the master key."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=True)
    models = [Model(m.name, m.model, m.api_base, m.api_key, re.sub(r"[\r\n]", " ", m.source)) for m in gateway.models]
    return env.get_template("config.yaml.j2").render(models=models, fallbacks=gateway.fallbacks,
                                                     num_retries=num_retries, timeout=timeout, metrics=metrics)


#: The first LiteLLM whose prometheus callback is open. 1.79.3 (the release before) imports it from
#: litellm-enterprise 0.1.20 (litellm/litellm_core_utils/litellm_logging.py line 179), whose PrometheusLogger makes
#: only ``litellm_not_a_premium_user_metric`` without a licence (litellm_enterprise/integrations/prometheus.py lines
#: 47-57); 1.80.0 ships it in the open package without that check (litellm/integrations/prometheus.py lines 39-45).
METRICS_OPEN_SINCE = "1.80.0"


def metrics_open(version: str) -> bool:
    """Whether LiteLLM ``version``'s prometheus callback serves metrics without a licence (a version that is not one
    counts as open: its own check names it)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) >= Version(METRICS_OPEN_SINCE)
    except InvalidVersion:
        return True


def metrics_refusal(version: str) -> str | None:
    """Why the gateway cannot have /metrics at LiteLLM ``version`` (one line naming litellm_metrics), or None."""
    if metrics_open(version):
        return None
    return (f"litellm_metrics: LiteLLM {version}'s prometheus callback is an enterprise feature (no metrics without "
            f"a licence); it is open from {METRICS_OPEN_SINCE}: set litellm_version={METRICS_OPEN_SINCE} or later, "
            "or litellm_metrics=false (nothing was changed)")


def render_secrets(secrets: dict[str, str], engine_keys: Mapping[str, str] | None = None) -> str:
    """secrets.env: the cloud keys, and the keys of engines on other hosts (``engine_keys``: variable -> key)."""
    lines = ["# Managed by labwright deploys/litellm.py: cloud keys from the deploy's environment, keys of engines "
             "on other hosts. Root only."]
    lines += [f'{name}="{value}"' for name, value in sorted({**secrets, **(engine_keys or {})}.items())]
    return "\n".join(lines) + "\n"


# Run on the engine host (python3, standard library only): print the key in argv[1] found as argv[2] describes
# ("" = the first line that is not a comment; else the `NAME:` / `NAME=` line). Exit 3 when the file cannot be
# read, 4 when the key is not in it. Only the key is printed, to the pyinfra connection, never to the log.
READ_KEY = r"""
import re, sys
path, name = sys.argv[1], sys.argv[2]
try:
    lines = open(path, encoding="utf-8").read().splitlines()
except OSError:
    sys.exit(3)
for line in lines:
    if not name:
        if line.strip() and not line.startswith("#"):
            print(line.strip()); sys.exit(0)
        continue
    found = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:=](.*)", line)
    if found and found.group(1) == name:
        print(found.group(2).strip().strip("'\"")); sys.exit(0)
sys.exit(4)
"""


def local_keys_script(keys: Iterable[EngineKey], target: str, check: bool = False) -> str:
    """A POSIX shell script, run as root on the gateway, that writes ``target`` (0600, ``ENV="key"`` lines) from
    the key files of the engines on the gateway itself, so those keys never leave the guest. ``check``: print
    ``current`` or ``stale`` instead of writing (never a key). Exits 1 naming the file when a key cannot be read."""
    parts = []
    names = []
    for index, key in enumerate(keys):
        reader = f"python3 -c {quote(READ_KEY)} {quote(key.path)} {quote(key.name)}"
        parts.append(f"k{index}=$({reader} 2>/dev/null)")
        if not check:
            why = quote(f"labwright: no usable key in {key.path} (deploy the engine on this host first)")
            parts.append(f"case \"$k{index}\" in ''|*[!A-Za-z0-9._~+/=-]*) echo {why} >&2; exit 1;; esac")
        names.append((key.env, index))
    body = " ".join(f"'{env}=\"'\"$k{index}\"'\"'" for env, index in names)
    header = "'# Managed by labwright deploys/litellm.py: keys of the engines on this host. Root only.'"
    line = f"printf '%s\\n' {header} {body}"
    if check:
        parts.append(f"if {{ {line}; }} | cmp -s - {quote(target)} 2>/dev/null; then echo current; else echo stale; fi")
    else:
        new = quote(target + ".new")
        parts.append(f"umask 077; {{ {line}; }} > {new} && mv -f {new} {quote(target)}")
    return "; ".join(parts)
