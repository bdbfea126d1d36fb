"""Prometheus's configuration as pure logic: scrape targets found in inventory data, rules, the GPU script's config.

deploys/monitoring.py feeds this the inventory's hosts; everything that can be wrong in them is a ``MonitoringError``
naming the data key, raised before the deploy changes anything.
"""

from __future__ import annotations

import json
import re
import tomllib
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from labwright import paths
from labwright.deploy_data import jinja
from labwright.litellm.config import EngineHost, EngineKey, engine_key, key_env
from labwright.litellm.config import load_defaults as litellm_defaults
from labwright.schema import checks
from labwright.textio import ascii_digits

TEMPLATES = paths.templates_dir("monitoring")
TARGET = re.compile(r"(?a)^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})"
                    r"(?P<path>/[A-Za-z0-9._~/-]*)?$")
DURATION = re.compile(r"^[1-9][0-9]{0,5}(ms|s|m|h|d|w|y)$")
#: decode speed by context: the buckets of labwright:decode_tokens_per_second:by_context (tokens in the context)
BUCKETS = ({"name": "0-8K", "low": -1, "high": 8192}, {"name": "8K-32K", "low": 8192, "high": 32768},
           {"name": "32K-64K", "low": 32768, "high": 65536}, {"name": "64K-128K", "low": 65536, "high": 131072},
           {"name": "128K+", "low": 131072, "high": 0})
#: A router's /metrics is per model (``?model=NAME``; tools/server/README.md "GET /metrics" of the pinned llama.cpp,
#: llama-cpp-python 0.3.36's vendor/llama.cpp): the router proxies it to that model's instance (server.cpp lines
#: 216 and 253, ``routes.get_metrics = models_routes->proxy_get``; server-models.cpp ``proxy_get``, lines
#: 1958-1969), loading the model first unless ``autoload=false`` (``is_autoload``, lines 1878-1885). A scrape must
#: not load a model: asked with autoload=false, one that is not loaded answers 400 ``model is not loaded``
#: (``router_validate_model``, line 1872), so its ``up`` is 0. A GET does not count as use for the router's LRU
#: unloading (``proxy_request(..., update_last_used=false)``, lines 1549-1561).
ROUTER_PARAMS = {"autoload": "false"}


class MonitoringError(ValueError):
    """Bad monitoring data; the message starts with the data key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Target:
    """One scrape target: ``job`` (engine kind, node, litellm, extra), where it is, and the key it needs."""

    job: str
    guest: str
    address: str
    port: int
    path: str = "/metrics"
    key: EngineKey | None = None
    service: str = ""
    #: one model of a llama-server router (``llamacpp_models``): asked as ``/metrics?model=NAME&autoload=false``
    model: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}{self.path}" + (f"?{urllib.parse.urlencode(ROUTER_PARAMS)}&"
                                                                   f"model={urllib.parse.quote(self.model)}"
                                                                   if self.model else "")

    @property
    def key_name(self) -> str:
        """The file name of this target's key under monitoring_key_dir."""
        return self.key.env.lower() if self.key else ""


def load_defaults() -> dict[str, Any]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


def is_monitoring(data: Mapping[str, Any]) -> bool:
    """Whether a host's data declares the Prometheus server (any ``monitoring_*`` key)."""
    return any(str(key).startswith("monitoring_") for key in data)


def _port(value: Any, key: str, host: str) -> int:
    text = str(value).strip()
    if not ascii_digits(text) or not 1 <= int(text) <= 65535:
        raise MonitoringError(key, f"{value!r} on {host} is not a port number (1..65535)")
    return int(text)


def _off(value: Any) -> bool:
    return str(value).strip().lower() in ("0", "false", "no", "off")


def engine_targets(hosts: Iterable[EngineHost], rules: Mapping[str, Mapping[str, Any]],
                   address_of: Callable[[EngineHost], str]) -> list[Target]:
    """One target per engine with a metrics endpoint, in inventory order (``is_gateway``: the Prometheus host)."""
    key_rules = litellm_defaults()["engines"]
    found = []
    for host in hosts:
        for kind, rule in rules.items():
            routed = host.data.get(rule["models_key"]) if rule.get("models_key") else None
            if host.data.get(rule["marker"]) in (None, "", []) and routed in (None, "", []):
                continue
            if rule.get("off_key") and _off(host.data.get(rule["off_key"], True)):
                continue
            port = _port(host.data.get(rule["port_key"]) or rule["port"], rule["port_key"], host.name)
            key = engine_key(kind, key_rules[kind], host) if rule.get("keyed") and kind in key_rules else None
            address = "127.0.0.1" if host.is_gateway else address_of(host)
            target = Target(kind, host.name, address, port, str(rule["path"]), key, str(rule["service"]))
            if routed in (None, "", []):
                found.append(target)
                continue
            from labwright.llamacpp.router import models_of  # one target per model of the router, on its one port

            found += [replace(target, model=m.name) for m in models_of({rule["models_key"]: routed}) or []]
    return found


def litellm_targets(hosts: Iterable[EngineHost], address_of: Callable[[EngineHost], str]) -> list[Target]:
    """The LiteLLM gateway(s) of the inventory: /metrics/ with the master key (monitoring_litellm=true).

    deploys/litellm.py turns LiteLLM's prometheus callback on (``litellm_metrics``, on by default) with
    ``require_auth_for_metrics_endpoint: true``: the callback mounts its ASGI app at ``/metrics`` (litellm 1.80.0's
    wheel, litellm/integrations/prometheus.py lines 2201-2225; Starlette redirects ``/metrics`` to ``/metrics/``) and
    PrometheusAuthMiddleware answers 401 there without a key LiteLLM accepts (the master key: it reads
    ``Authorization: Bearer``; litellm/proxy/middleware/prometheus_auth_middleware.py lines 27-45). A gateway with
    ``litellm_metrics=false``, or a LiteLLM older than the callback's first open release, is refused here."""
    from labwright.litellm.config import METRICS_OPEN_SINCE, metrics_open

    defaults = litellm_defaults()["service"]
    found = []
    for host in hosts:
        if not any(str(k).startswith("litellm_") and k != "litellm_engine_address" for k in host.data):
            continue
        if _off(host.data.get("litellm_metrics", defaults["metrics"])):
            raise MonitoringError("monitoring_litellm", f"the gateway on {host.name} runs with litellm_metrics=false "
                                  "(no /metrics); deploy it again with litellm_metrics=true, or set "
                                  "monitoring_litellm=false (nothing was changed)")
        version = str(host.data.get("litellm_version") or defaults["version"]).strip()
        if not metrics_open(version):
            raise MonitoringError("monitoring_litellm", f"the gateway on {host.name} runs LiteLLM {version}, whose "
                                  "prometheus callback is an enterprise feature (no metrics without a licence); "
                                  f"deploy it with litellm_version={METRICS_OPEN_SINCE} or later, or set "
                                  "monitoring_litellm=false (nothing was changed)")
        port = _port(host.data.get("litellm_port") or defaults["port"], "litellm_port", host.name)
        config_dir = str(host.data.get("litellm_config_dir") or defaults["config_dir"]).rstrip("/")
        key = EngineKey(host.name, f"{config_dir}/master.env", "LITELLM_MASTER_KEY", key_env("litellm", host.name),
                        host.is_gateway, "litellm_config_dir")
        address = "127.0.0.1" if host.is_gateway else address_of(host)
        found.append(Target("litellm", host.name, address, port, "/metrics/", key, str(
            host.data.get("litellm_service") or defaults["service"])))
    return found


def extra_targets(value: Any, guest: str) -> list[Target]:
    """``monitoring_targets``: "HOST:PORT" or "HOST:PORT/PATH" (a list, or one comma-separated string)."""
    if value in (None, "", []):
        return []
    items = [v.strip(" ") for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise MonitoringError("monitoring_targets", 'must be a list like ["10.0.0.5:9400", "gpu1:9835/metrics"]')
    found = []
    for item in items:
        text = str(item)
        match = TARGET.fullmatch(text)
        if not match:
            raise MonitoringError("monitoring_targets", f"{text!r} is not HOST:PORT or HOST:PORT/PATH (letters, "
                                  "digits, .-, no scheme, no control characters)")
        problem = checks.host_problem(match["host"], brackets=True)  # the one parser of hosts (999.1.1.1, [::g])
        if problem is not None:
            raise MonitoringError("monitoring_targets", f"{text!r}: {problem}")
        _port(match["port"], "monitoring_targets", guest)
        found.append(Target("extra", match["host"], match["host"].strip("[]"), int(match["port"]),
                            match["path"] or "/metrics"))
    return found


def package_list(value: Any, key: str) -> list[str]:
    """Debian package names (labwright.schema.checks.debian_packages), at least one: a refusal names ``key``."""
    try:
        names = checks.debian_packages(value)
    except ValueError as error:
        raise MonitoringError(key, str(error)) from None
    if not names:
        raise MonitoringError(key, "is empty: the service needs its packages, e.g. prometheus,prometheus-node-exporter")
    return names


def node_collector_args(value: Any, key: str = "monitoring_node_collectors") -> str:
    """node-exporter's arguments for ``node_collectors``: ``--collector.disable-defaults`` and one
    ``--collector.NAME`` each (textfile always: the GPU script's series come through it), or nothing for ``["all"]``
    (the package's own defaults)."""
    names = [w for w in re.split(r"[,\s]+", value) if w] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names or not all(
            isinstance(n, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,40}", n) for n in names):
        raise MonitoringError(key, f"{value!r} is not a list of node-exporter collector names, e.g. "
                              'cpu,meminfo,textfile, or ["all"]')
    if "all" in names:
        return ""
    return " ".join(["--collector.disable-defaults", *(f"--collector.{n}" for n in dict.fromkeys(
        [*names, "textfile"]))])


def duration(value: Any, key: str) -> str:
    text = str(value).strip()
    if not DURATION.match(text):
        raise MonitoringError(key, f"{value!r} is not a duration like 15s, 1m or 15d")
    return text


def render_prometheus(targets: list[Target], nodes: list[Target], interval: str, key_dir: str,
                      rules_file: str) -> str:
    """prometheus.yml: one job per engine target (its key as a credentials_file), one node job, extra targets."""
    jobs: dict[str, dict[str, Any]] = {}
    for target in targets:
        name = (f"{target.job}-{target.guest}" + (f"-{target.port}" if target.job == "extra" else "")) \
            .replace("@", "").replace("/", "-")
        labels = {"guest": target.guest, **({"service": target.service} if target.service else {})}
        if target.model:  # a router's model: labelled by it, asked for it (__param_model: ?model=NAME)
            labels |= {"model": target.model, "__param_model": target.model}
        static = {"targets": [f"{target.address}:{target.port}"], "labels": labels}
        if name in jobs:  # the other models of the same router
            jobs[name]["static_configs"].append(static)
            continue
        job: dict[str, Any] = {"job_name": name, "metrics_path": target.path, "static_configs": [static]}
        if target.model:
            job["params"] = {key: [value] for key, value in ROUTER_PARAMS.items()}
        if target.key is not None:
            job["authorization"] = {"type": "Bearer", "credentials_file": f"{key_dir}/{target.key_name}"}
        jobs[name] = job
    if nodes:
        jobs["node"] = {"job_name": "node", "static_configs": [
            {"targets": [f"{n.address}:{n.port}"], "labels": {"guest": n.guest}} for n in nodes]}
    doc = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
           "rule_files": [rules_file], "scrape_configs": list(jobs.values())}
    return "# Managed by labwright deploys/monitoring.py.\n" + yaml.safe_dump(doc, sort_keys=False)


def render_rules(min_decode_tps: float) -> str:
    return jinja(TEMPLATES).get_template("rules.yml.j2").render(buckets=BUCKETS, min_decode_tps=min_decode_tps)


def render_unit(name: str, **values: Any) -> str:
    return jinja(TEMPLATES).get_template(name).render(**values)


def gpu_script() -> str:
    return (TEMPLATES / "labwright-gpu-metrics.py").read_text()


def gpu_config(local: list[Target]) -> str:
    """/etc/labwright/gpu-metrics.json: the engines on this host the textfile script looks at."""
    engines: dict[str, dict[str, Any]] = {}
    for t in local:
        if not t.service:
            continue
        engine = engines.setdefault(t.service, {"service": t.service, "kind": t.job, "url": f"http://127.0.0.1:{t.port}",
                                                "key_file": t.key.path if t.key else ""})
        if t.model:  # a router: its models, asked one by one (/slots?model=NAME) and listed as loaded or not
            engine.setdefault("models", []).append(t.model)
    return json.dumps({"engines": list(engines.values())}, indent=2) + "\n"


def key_copy_script(keys: Iterable[EngineKey], key_dir: str, group: str, check: bool = False) -> str:
    """A POSIX shell script, run as root on the Prometheus host, that copies the keys of the engines on that host
    from their key files into ``key_dir/<name>`` (0640 root:``group``, the key alone, no newline), so they never
    leave the guest. ``check``: print ``current`` or ``stale`` instead (never a key). Exits 1 naming the file when a
    key cannot be read or is not one line of key characters."""
    from labwright.litellm.config import READ_KEY
    from labwright.shell import quote

    parts = ["stale=0"]
    for index, key in enumerate(keys):
        target = quote(f"{key_dir}/{key.env.lower()}")
        parts.append(f"k{index}=$(python3 -c {quote(READ_KEY)} {quote(key.path)} {quote(key.name)} 2>/dev/null)")
        why = quote(f"labwright: no usable key in {key.path} (deploy the engine on this host first)")
        if not check:
            parts.append(f"case \"$k{index}\" in ''|*[!A-Za-z0-9._~+/=-]*) echo {why} >&2; exit 1;; esac")
        same = f"printf '%s' \"$k{index}\" | cmp -s - {target}"
        if check:
            parts.append(f"{same} || stale=1")
        else:
            new = f"{target}.new"
            parts.append(f"{same} || {{ umask 027; printf '%s' \"$k{index}\" > {new} && chown root:{quote(group)} "
                         f"{new} && chmod 640 {new} && mv -f {new} {target}; }}")
    if check:
        parts.append("if [ $stale = 0 ]; then echo current; else echo stale; fi")
    return "; ".join(parts)
