"""Prometheus and node-exporter from the distribution's packages, scraping the inventory's engines.

The targets, rules and the GPU script's config are built by labwright.monitoring.config (pure); see
deploys/monitoring.py (the pyinfra CLI shim, with usage) and docs/monitoring.md.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.deploy_data import DeployData, jinja, keys_of, one_line, refuse_unknown_keys
from labwright.deploys.common import install_missing, port_taken_by
from labwright.facts.engine_keys import KeysFileCurrent
from labwright.facts.monitoring import HttpAnswers, answers
from labwright.guestlock import locked
from labwright.litellm.config import EngineHost
from labwright.monitoring.config import (
    TEMPLATES,
    MonitoringError,
    Target,
    duration,
    engine_targets,
    extra_targets,
    gpu_config,
    gpu_script,
    is_monitoring,
    key_copy_script,
    litellm_targets,
    load_defaults,
    node_collector_args,
    package_list,
    render_prometheus,
    render_rules,
)
from labwright.operations import http
from labwright.operations import systemd as systemd_ops
from labwright.operations.secrets import secret_file
from labwright.schema import checks
from labwright.textio import ascii_digits

DEFAULTS = load_defaults()
JINJA = jinja(TEMPLATES)
KEYS = DeployData("monitoring", DEFAULTS)
fail, data = KEYS.fail, KEYS.get
SCRIPT, SCRIPT_CONFIG = "/usr/local/lib/labwright/gpu-metrics.py", "/etc/labwright/gpu-metrics.json"
STAGED = "/etc/prometheus/.labwright-staged"
RULES = "/etc/prometheus/labwright-rules.yml"


def _hosts() -> list[EngineHost]:
    return [EngineHost(h.name, h.data.dict(), h.name == host.name) for h in inventory]


def _address_of(engine: EngineHost) -> str:
    from labwright.deploys.litellm import address_of

    return address_of(engine)


def _listen(key: str, value: Any) -> tuple[str, int]:
    """``key`` (without the monitoring_ prefix, which fail adds) as ADDRESS:PORT; an IPv6 address in brackets."""
    text = str(value).strip()
    address, _, port = text.rpartition(":")
    bracketed = address.startswith("[") and address.endswith("]") and len(address) > 2
    if not address or not ascii_digits(port) or not 1 <= int(port) <= 65535 or (
            (":" in address or "[" in address or "]" in address) and not bracketed):
        raise fail(key, f"{value!r} is not ADDRESS:PORT (an IPv6 address in brackets: [::1]:9090), e.g. "
                   "127.0.0.1:9090")
    KEYS.checked(key, address[1:-1] if bracketed else address, checks.listen_address)
    return address, int(port)


def _unanswered(targets: list[Target]) -> None:
    """Every engine and extra target must answer over HTTP from this host (401 counts: a keyed endpoint that is
    there); else one line naming the target and the fix, before anything is installed."""
    urls = tuple(t.url for t in targets)
    if not urls:
        return
    found = answers(urls, host.get_fact(HttpAnswers, urls=urls))
    for target in targets:
        status = found[target.url]
        where = f"{target.job} on {target.guest}" if target.job != "extra" else "monitoring_targets"
        if isinstance(status, str):
            fix = "start it or remove it from monitoring_targets" if target.job == "extra" else \
                "deploy or start the engine there first"
            raise DeployError(f"{where}: {target.url} does not answer from {host.name} ({one_line(status)}); {fix} "
                              "(nothing was changed)")
        if status == 501 and target.job == "llamacpp":
            raise DeployError(f"llamacpp_metrics on {target.guest}: {target.url} answers 501 (llama-server runs "
                              "without --metrics); deploy llama.cpp again with llamacpp_metrics=true, or set "
                              "llamacpp_metrics=false there to leave it unscraped (nothing was changed)")
        if status == 404 and target.job == "litellm":
            raise DeployError(f"monitoring_litellm: {target.url} on {target.guest} answers 404: the gateway runs "
                              "without LiteLLM's prometheus callback (deployed before labwright turned it on); "
                              "deploy it again (deploys/litellm.py, litellm_metrics=true), or set "
                              "monitoring_litellm=false (nothing was changed)")
        if status >= 400 and status not in (401, 403):
            raise DeployError(f"{where}: {target.url} answers {status}, not metrics; check the port and path "
                              "(nothing was changed)")


def _node_exporter(listen: str, textfile_dir: str, local: list[Target], interval: str, collectors: str) -> None:
    """node-exporter (textfile collector on, ``collectors``: its collector arguments) and the GPU script with its
    timer, on this host."""
    args = f'ARGS="--web.listen-address={listen} --collector.textfile.directory={textfile_dir}' + \
        (f" {collectors}" if collectors else "") + '"\n'
    count = f"{collectors.count('--collector.') - 1} collectors" if collectors else "the package's collectors"
    defaults = files.put(name=f"node-exporter listens on {listen}, {count}, textfile collector {textfile_dir}",
                         src=StringIO("# Managed by labwright deploys/monitoring.py.\n" + args),
                         dest="/etc/default/prometheus-node-exporter", user="root", group="root", mode="644")
    files.directory(name=f"{textfile_dir} exists", path=textfile_dir, user="root", group="root", mode="755")
    script = files.put(name=f"GPU metrics script {SCRIPT}", src=StringIO(gpu_script()), dest=SCRIPT, user="root",
                       group="root", mode="755", create_remote_dir=True)
    config = files.put(name=f"{SCRIPT_CONFIG}: {len(local)} engine(s) on this host", src=StringIO(gpu_config(local)),
                       dest=SCRIPT_CONFIG, user="root", group="root", mode="644", create_remote_dir=True)
    out = f"{textfile_dir.rstrip('/')}/labwright.prom"
    service = files.put(name="Unit labwright-gpu-metrics.service", src=StringIO(JINJA.get_template(
        "labwright-gpu-metrics.service.in").render(out=out)), dest="/etc/systemd/system/labwright-gpu-metrics.service",
        user="root", group="root", mode="644")
    timer = files.put(name=f"Timer labwright-gpu-metrics.timer (every {interval})", src=StringIO(JINJA.get_template(
        "labwright-gpu-metrics.timer.in").render(interval=interval)),
        dest="/etc/systemd/system/labwright-gpu-metrics.timer", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (GPU metrics units changed)", _if=any_changed(service, timer))
    systemd.service(name="labwright-gpu-metrics.timer enabled and running", service="labwright-gpu-metrics.timer",
                    running=True, enabled=True)
    # The first .prom file now, so the first scrape has GPU and engine series (the timer runs it from then on).
    server.shell(name="GPU metrics written once now", commands=["systemctl start labwright-gpu-metrics.service"],
                 _if=any_changed(script, config, service, timer))
    systemd_ops.restarted_foreign(name="Restart prometheus-node-exporter (its arguments changed)",
                                  service="prometheus-node-exporter", _if=defaults.did_change)


@locked("monitoring")
def deploy_monitoring() -> None:
    """Prometheus (on the host whose data has ``monitoring_*`` keys) scraping every engine of the inventory that has
    a metrics endpoint, node-exporter with the GPU textfile script on it and on every engine host the deploy runs on;
    alert and recording rules for a model that left VRAM and decode speed by context.

    Everything is checked before anything changes (keys, ports, every target answering); each refusal is one line
    naming the data key.
    """
    from labwright.deploys.litellm import engine_key_values

    here = host.data.dict()
    hosts = _hosts()
    server_host = is_monitoring(here)
    textfile_dir = KEYS.managed_of("textfile_dir", data("textfile_dir"))   # chgrp'd and made group-writable
    try:
        packages = package_list(data("packages"), "monitoring_packages")
        local = [t for t in engine_targets(hosts, DEFAULTS["targets"], _address_of) if t.guest == host.name]
        interval = duration(data("gpu_interval"), "monitoring_gpu_interval")
        collectors = node_collector_args(data("node_collectors"))
    except MonitoringError as exc:
        raise DeployError(str(exc)) from None
    node_port = KEYS.int_of("node_port", data("node_port"), 1, 65535)
    if not server_host:
        if not any(is_monitoring(h.data) for h in hosts):
            logger.warning(f"{host.print_prefix}monitoring: not deployed here (no host of the inventory has "
                           "monitoring_* data); set e.g. monitoring_listen on the host that runs Prometheus")
            return
        if not local:
            logger.warning(f"{host.print_prefix}monitoring: nothing to do here (neither the Prometheus host nor an "
                           "engine host)")
            return
        holder = port_taken_by(node_port, "prometheus-node-exporter")
        if holder:
            raise fail("node_port", f"{node_port} is already in use on {host.name} by {holder} (nothing was changed)")
        install_missing(["prometheus-node-exporter"], "node-exporter", name="Install prometheus-node-exporter")
        node_listen = str(data("node_listen"))
        _node_exporter(f"0.0.0.0:{node_port}" if node_listen == "auto" else node_listen, textfile_dir, local,
                       interval, collectors)
        return

    # --- the Prometheus host: read and check everything before touching anything -------------------
    refuse_unknown_keys(here, "monitoring", keys_of(DEFAULTS["service"]), "docs/monitoring.md and "
                        "templates/monitoring/defaults.toml")
    address, port = _listen("listen", data("listen"))
    node_listen = str(data("node_listen"))
    node_listen = f"127.0.0.1:{node_port}" if node_listen == "auto" else node_listen
    node_address, node_own_port = _listen("node_listen", node_listen)
    if port == node_own_port:
        raise fail("listen", f"port {port} is node-exporter's too (monitoring_node_listen / monitoring_node_port "
                   f"{node_own_port}); give the two services different ports")
    node_address = "127.0.0.1" if node_address in ("0.0.0.0", "::", "[::]") else node_address
    key_dir = KEYS.managed_of("key_dir", data("key_dir"))   # made root:prometheus 0750: never / or /etc
    try:
        retention = duration(data("retention"), "monitoring_retention")
    except MonitoringError as exc:
        raise DeployError(str(exc)) from None
    try:
        scrape = duration(data("scrape_interval"), "monitoring_scrape_interval")
        targets = engine_targets(hosts, DEFAULTS["targets"], _address_of)
        if KEYS.bool_of("litellm", data("litellm")):
            targets += litellm_targets(hosts, _address_of)
        extra = extra_targets(host.data.get("monitoring_targets"), host.name)
    except MonitoringError as exc:
        raise DeployError(str(exc)) from None
    min_tps = KEYS.checked("min_decode_tps", data("min_decode_tps"), checks.whole(0))
    for service, wanted in (("prometheus", port), ("prometheus-node-exporter", node_port)):
        holder = port_taken_by(wanted, service)
        if holder:
            raise fail("listen" if service == "prometheus" else "node_port",
                       f"{wanted} is already in use on {host.name} by {holder} (nothing was changed)")
    _unanswered([*targets, *extra])
    keys = [t.key for t in targets if t.key is not None]
    remote = engine_key_values(keys)  # every key file checked where it is; other hosts' keys read there
    local_keys = [k for k in keys if k.local]
    engine_guests = {t.guest for t in targets}
    nodes = [Target("node", h.name, node_address, node_own_port) if h.is_gateway
             else Target("node", h.name, _address_of(h), node_port)
             for h in hosts if h.is_gateway or h.name in engine_guests]
    config_text = render_prometheus([*targets, *extra], nodes, scrape, key_dir, RULES)
    rules_text = render_rules(min_tps)

    # --- packages, keys, config (checked by promtool before it replaces the old one), start ---------
    install_missing(packages, "Prometheus and node-exporter", name=f"Install {', '.join(packages)}")
    files.directory(name=f"{key_dir} (root:prometheus 0750)", path=key_dir, user="root", group="prometheus",
                    mode="750")
    changed_keys = []
    for key in keys:
        if not key.local:
            changed_keys.append(secret_file(
                name=f"Key of {key.host}'s engine ({key_dir}/{key.env.lower()}, 0640 root:prometheus)",
                content=remote[key.env], dest=f"{key_dir}/{key.env.lower()}", user="root", group="prometheus",
                mode="640"))
    local_changed = False
    if local_keys and not host.get_fact(KeysFileCurrent, script=key_copy_script(local_keys, key_dir, "prometheus",
                                                                                 check=True)):
        server.shell(name=f"Keys of the engines on this guest (into {key_dir}; read from their key files there)",
                     commands=[key_copy_script(local_keys, key_dir, "prometheus")])
        local_changed = True
    files.directory(name=f"{STAGED} (root 0700)", path=STAGED, user="root", group="root", mode="700")
    staged_config = files.put(name="prometheus.yml (staged)", src=StringIO(config_text),
                              dest=f"{STAGED}/prometheus.yml", user="root", group="root", mode="644")
    staged_rules = files.put(name="labwright-rules.yml (staged)", src=StringIO(rules_text),
                             dest=f"{STAGED}/labwright-rules.yml", user="root", group="root", mode="644")
    installed = server.shell(
        name=f"promtool checks the new rules and config, then they replace the old ({len(targets) + len(extra)} "
             f"targets, {len(nodes)} node-exporter(s))",
        commands=[f"promtool check rules {STAGED}/labwright-rules.yml >/dev/null && "
                  f"promtool check config --syntax-only {STAGED}/prometheus.yml >/dev/null && "
                  f"install -m 644 -o root -g root {STAGED}/labwright-rules.yml {RULES} && "
                  f"install -m 644 -o root -g root {STAGED}/prometheus.yml /etc/prometheus/prometheus.yml && "
                  "promtool check config /etc/prometheus/prometheus.yml >/dev/null"],
        _if=any_changed(staged_config, staged_rules))
    defaults = files.put(name=f"Prometheus listens on {address}:{port}, keeps {retention}", src=StringIO(
        "# Managed by labwright deploys/monitoring.py.\n"
        f'ARGS="--web.listen-address={address}:{port} --storage.tsdb.retention.time={retention}"\n'),
        dest="/etc/default/prometheus", user="root", group="root", mode="644")
    _node_exporter(node_listen, textfile_dir, local, interval, collectors)
    systemd_ops.restarted_foreign(
        name="Restart prometheus (config, rules, keys or arguments changed)", service="prometheus",
        _if=lambda: local_changed or any_changed(installed, defaults, *changed_keys)())
    health = "127.0.0.1" if address in ("0.0.0.0", "::", "[::]") else address
    http.wait_healthy(name="prometheus ready: /-/ready", url=f"http://{health}:{port}", service="prometheus",
                      timeout=60, health_path="/-/ready", interval=1,
                      _if=lambda: local_changed or any_changed(installed, defaults, *changed_keys)())
