"""LiteLLM gateway: one OpenAI-compatible URL for the inventory's engines and cloud models.

The configuration is built by labwright.litellm.config (pure); see deploys/litellm.py (the pyinfra CLI shim, with
usage) and docs/litellm.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from io import StringIO
from typing import TYPE_CHECKING, Annotated, Any, cast

from pyinfra import host, inventory
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.deploy_data import DeployData, conflict_error, jinja, refuse_unknown_keys
from labwright.deploys.common import (
    LOCKS_DIR,
    index_lock,
    install_missing,
    pip_install,
    pip_requirements,
    pip_source,
    port_taken_by,
    service_user_version,
    venv_create,
)
from labwright.engine_keys import key_file_refusal
from labwright.errors import LabwrightError
from labwright.facts.default_keys import DefaultKeysIn
from labwright.facts.engine_keys import KeysFileCurrent
from labwright.facts.litellm import LitellmVersion, PrometheusClientVersion
from labwright.guestlock import locked
from labwright.lab.lab import instance_address
from labwright.litellm.config import (
    KEY_VALUE,
    READ_KEY,
    TEMPLATES,
    ConfigError,
    EngineHost,
    EngineKey,
    build_gateway,
    cloud_models,
    discover_engines,
    load_defaults,
    local_keys_script,
    metrics_refusal,
    parse_aliases,
    render_config,
    render_secrets,
)
from labwright.litellm.wheelhouse import EXTRA as WHEELHOUSE_EXTRA
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.operations import http
from labwright.operations import systemd as systemd_ops
from labwright.operations.secrets import secret_file
from labwright.schema import checks
from labwright.shell import quote

if TYPE_CHECKING:
    from labwright.schema.model import Schema

DEFAULTS = load_defaults()
JINJA = jinja(TEMPLATES)
MASTER_KEY_SCRIPT = 'import secrets; print("LITELLM_MASTER_KEY=sk-" + secrets.token_urlsafe(32))'


KEYS = DeployData("litellm", DEFAULTS)
fail, data = KEYS.fail, KEYS.get


@cache
def data_schema() -> type[Schema]:
    """The gateway's own ``litellm_*`` values, typed (built on first use: pydantic loads only with the data)."""
    from pydantic import BeforeValidator

    from labwright.schema.fields import ListenAddress, ManagedDir, Packages, Port
    from labwright.schema.model import Schema

    class LitellmData(Schema):
        venv: ManagedDir
        config_dir: ManagedDir
        host: ListenAddress
        port: Port
        health_timeout: Annotated[int, BeforeValidator(checks.whole(1))]
        num_retries: Annotated[int, BeforeValidator(checks.whole(0))]
        timeout: Annotated[int, BeforeValidator(checks.whole(1))]
        runtime_packages: Packages

    return LitellmData


def address_of(engine: EngineHost) -> str:
    """How the gateway reaches an engine host: explicit data, its LXD container's address, ssh_hostname, name."""
    given = engine.data.get("litellm_engine_address")
    if given:
        return str(given)
    instance = engine.data.get("lxd_instance")
    if instance:
        try:
            endpoint, project = resolve_endpoint(engine.data.get("lxd_remote"), engine.data.get("lxd_config_dir"),
                                                 "lxd", engine.data.get("lxd_socket"))
            found = instance_address(LxdClient(endpoint, project=engine.data.get("lxd_project") or project),
                                     str(instance))
        except LabwrightError as exc:
            raise fail("engine_address", f"{engine.name}: cannot look up its address ({exc}); set "
                       "litellm_engine_address on that host") from None
        if not found:
            raise fail("engine_address", f"{engine.name} has no IPv4 address (is it running?); set "
                       "litellm_engine_address on that host")
        return found
    if engine.data.get("ssh_hostname"):
        return str(engine.data.get("ssh_hostname"))
    if engine.name.startswith("@"):
        raise fail("engine_address", f"{engine.name}: no address known; set litellm_engine_address on that host")
    return engine.name


def engine_key_values(keys: list[EngineKey]) -> dict[str, str]:
    """Check every engine key file the gateway needs (there, root's, closed to other users: else one line naming the
    path and the fix, before anything runs) and read the keys of the engines on OTHER hosts, on those hosts.

    A key of an engine on the gateway itself is not read here: it is copied on the guest (local_keys_script). A key
    from another host has no other way to the gateway than through this pyinfra run: it is read over that host's
    connection without being printed (not even under -vv), kept in memory only, and written to the gateway's
    root-only secrets.env through labwright.operations.secrets.secret_file (never shown by --diff)."""
    values: dict[str, str] = {}
    for key in keys:
        other = host if key.local else inventory.get_host(key.host)
        if other is None:
            raise fail("engine_address", f"{key.host} is not in the inventory (its engine's key cannot be read)")
        refusal = key_file_refusal(key.data_key, key.path, other.get_fact(File, path=key.path), key.host,
                                   missing=f"deploy the engine there first (it makes the key), or set "
                                   f"{key.data_key} on {key.host} to where its key is")
        if refusal:
            raise DeployError(refusal)
        if key.local:
            continue
        command = StringCommand("python3", "-c", QuoteString(READ_KEY), QuoteString(key.path), QuoteString(key.name))
        ok, output = other.run_shell_command(command, print_output=False, print_input=False,
                                             _sudo=bool(other.data.get("_sudo")))
        value = "".join(output.stdout_lines).strip() if ok else ""
        if not KEY_VALUE.match(value):
            raise DeployError(f"{key.data_key}: no usable key in {key.path} on {key.host} (run as root there, or "
                              "delete the file and deploy the engine again to make a new one) (nothing was changed)")
        values[key.env] = value
    return values


def install_commands(venv: str, version: str, find_links: str, where: str, lock_args: str = "") -> list[str]:
    """The venv at ``venv`` with litellm[proxy]==``version`` from ``find_links`` (its hashed lock, --require-hashes;
    labwright.deploys.common.pip_requirements), else PyPI (from ``lock_args``: common.index_lock's); every value
    quoted."""
    spec = f"litellm[proxy]=={version}"
    args = lock_args if lock_args and not find_links else pip_requirements(find_links, "", quote(spec))
    return [venv_create(venv), pip_install(f"{venv}/bin/pip", args, spec, find_links or "PyPI", "litellm_find_links",
                                           where=where)]


def metrics_client_check(venv: str, source: str) -> str:
    """The shell line, run after the install when ``litellm_metrics`` is on, that stops the deploy in one line when
    the venv still has no prometheus_client (a wheelhouse made before labwright added it to the lock): else the
    proxy would stop at every start on the callback's import (litellm/integrations/prometheus.py line 42)."""
    why = (f"litellm_metrics: prometheus-client is not in {venv} after the install from {source} (a wheelhouse made "
           "before labwright added it to the lock): make the wheelhouse again (labwright wheelhouse litellm --python "
           "VERSION), or set litellm_metrics=false (the service was not restarted)")
    python = quote(venv + "/bin/python")
    return f"{python} -c 'import prometheus_client' 2>/dev/null || {{ echo {quote(why)} >&2; exit 1; }}"


def master_key_command(master_env: str) -> str:
    """``LITELLM_MASTER_KEY=sk-<random>`` into ``master_env``, made on the gateway: 0600 under umask 077, moved into
    place whole (the path quoted)."""
    new = quote(f"{master_env}.new")
    return f"umask 077; python3 -c {quote(MASTER_KEY_SCRIPT)} > {new} && mv {new} {quote(master_env)}"


@locked("LiteLLM gateway")
def deploy_litellm() -> None:
    """The LiteLLM proxy at a pinned version, its master key (made on the gateway), cloud keys, config and unit.

    The whole inventory is read: every engine host becomes a model in config.yaml. Everything is checked before
    anything changes; each refusal is one line naming the data key.
    """
    # --- read and check everything before touching anything -----------------------------------------
    refuse_unknown_keys(host.data.dict(), "litellm",
                        {*DEFAULTS["service"], "aliases", "cloud_models", "master_key", "engine_address"},
                        "docs/litellm.md and templates/litellm/defaults.toml")
    if host.data.get("litellm_master_key") is not None:
        raise fail("master_key", "is never taken from inventory data (secrets stay out of inventories); labwright "
                   "generates it on the gateway: remove litellm_master_key (nothing was changed)")
    service, user, version = service_user_version(KEYS, "litellm", "1.80.0")
    typed = KEYS.parse(data_schema())
    venv, config_dir, listen_host, port = typed["venv"], typed["config_dir"], typed["host"], typed["port"]
    clash = conflict_error(host.data.dict(), {"litellm_port": port, "litellm_venv": venv,
                                              "litellm_config_dir": config_dir})
    if clash is not None:
        raise DeployError(clash)
    find_links = KEYS.path_of("find_links", data("find_links") or "", absolute=False)
    try:
        pip_source(find_links)  # a plain http:// wheelhouse whose host pip_trusted_host does not name: refused here
    except LabwrightError as exc:
        raise fail("find_links", str(exc)) from None
    health_timeout, num_retries, request_timeout = typed["health_timeout"], typed["num_retries"], typed["timeout"]
    metrics = KEYS.bool_of("metrics", data("metrics"))
    refusal = metrics_refusal(version) if metrics else None
    if refusal:
        raise DeployError(refusal)

    try:
        # HostData is read through .get only, as a Mapping would be.
        hosts = [EngineHost(h.name, cast(Mapping[str, Any], h.data), h.name == host.name) for h in inventory]
        engines = discover_engines(hosts, DEFAULTS["engines"], address_of)
        cloud, secrets = cloud_models(host.data.get("litellm_cloud_models"), os.environ)
        gateway = build_gateway(engines, cloud, secrets, parse_aliases(host.data.get("litellm_aliases")))
    except ConfigError as exc:
        raise DeployError(str(exc)) from None
    if not gateway.models:
        raise fail("cloud_models", "no engines in the inventory (llamacpp_model, tabbyapi_model_name or ollama_models "
                   "on a host) and no cloud models: the gateway would serve nothing (nothing was changed)")

    master_env, secrets_env, config_file = (f"{config_dir}/master.env", f"{config_dir}/secrets.env",
                                            f"{config_dir}/config.yaml")
    defaults_found = host.get_fact(DefaultKeysIn, paths=[master_env, secrets_env, config_file])
    if defaults_found:
        found = defaults_found[0]
        raise fail("master_key", f"{found['path']} on {host.name} sets {found['variable']} to {found['why']}, which "
                   f"anyone can look up; delete {found['path']} and re-run to generate a random one (nothing was "
                   "changed)")
    holder = port_taken_by(port, service)
    if holder:
        raise fail("port", f"{port} is already in use on {host.name} by {holder} (nothing was changed)")
    # The engines' keys: every key file checked where it is, the keys of engines on other hosts read there.
    engine_keys = gateway.engine_keys
    remote_keys = engine_key_values(engine_keys)
    local_keys = [key for key in engine_keys if key.local]
    local_env = f"{config_dir}/engines-local.env"

    # --- runtime, user, the venv at the pinned version ------------------------------------------------
    install_missing(typed["runtime_packages"], "python3-venv")
    home = f"/var/lib/{service}"
    server.user(name=f"Service user {user}", user=user, system=True, shell="/usr/sbin/nologin", home=home,
                create_home=True)
    install_changed = False
    current = host.get_fact(LitellmVersion, venv=venv)
    # prometheus-client comes with the lock (labwright.litellm.wheelhouse.METRICS): a venv made before it was there
    # is installed again from the lock, which adds it.
    if current != version or not host.get_fact(PrometheusClientVersion, venv=venv):
        # From PyPI: the hashed lock made here for the guest's Python (common.index_lock); from a wheelhouse, its own.
        lock_args = "" if find_links else index_lock([f"litellm[proxy]=={version}", *WHEELHOUSE_EXTRA], "",
                                                     f"{LOCKS_DIR}/{service}.lock", f"litellm[proxy]=={version}")
        server.shell(name=f"Install litellm[proxy]=={version} and prometheus-client in {venv} (was "
                          f"{current or 'absent'})",
                     commands=[*install_commands(venv, version, find_links, host.name, lock_args),
                               *([metrics_client_check(venv, find_links or "PyPI")] if metrics else [])])
        install_changed = True

    # --- keys, config, unit ---------------------------------------------------------------------------
    files.directory(name=f"{config_dir} (root:{user} 0750)", path=config_dir, user="root", group=user, mode="750")
    master_created = False
    if not host.get_fact(File, path=master_env):
        server.shell(name=f"Generate the master key on the gateway ({master_env}, 0600 root)",
                     commands=[master_key_command(master_env)])
        master_created = True
    # Never shown by --diff, never world-readable on the way (labwright.operations.secrets).
    secrets_file = secret_file(name=f"Cloud keys and other hosts' engine keys ({secrets_env}, 0600 root)",
                               content=render_secrets(gateway.secrets, remote_keys), dest=secrets_env, user="root",
                               group="root", mode="600")
    # The keys of the engines on this guest: copied from their key files on the guest, never off it.
    local_changed = False
    if not host.get_fact(KeysFileCurrent, script=local_keys_script(local_keys, local_env, check=True)):
        server.shell(name=f"Keys of the engines on this guest ({local_env}, 0600 root; read from their key files "
                     "there)", commands=[local_keys_script(local_keys, local_env)])
        local_changed = True
    config = files.put(name=f"{config_file}: {len(gateway.models)} models", src=StringIO(
        render_config(gateway, num_retries, request_timeout, metrics)), dest=config_file, user="root", group=user,
        mode="640")
    unit_text = JINJA.get_template("litellm.service.j2").render(user=user, home=home, config_dir=config_dir, venv=venv,
                                                                host=listen_host, port=port)
    unit = files.put(name=f"Unit {service}.service", src=StringIO(unit_text),
                     dest=f"/etc/systemd/system/{service}.service", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=unit.did_change)
    started = systemd_ops.started_owned(name=f"{service} enabled and running", service=f"{service}.service")
    restarted = systemd_ops.restarted_owned(
        name=f"Restart {service} (install, keys, config or unit changed)", service=f"{service}.service",
        _if=lambda: (install_changed or master_created or local_changed or any_changed(secrets_file, config, unit)())
        and not started.did_change())
    health_host = "127.0.0.1" if listen_host in ("0.0.0.0", "::") else listen_host
    http.wait_healthy(
        name=f"{service} health: /health/liveliness then /v1/models", url=f"http://{health_host}:{port}",
        service=service, timeout=health_timeout, health_path="/health/liveliness", models=gateway.names,
        all_models=True, key_file=master_env, key_name="LITELLM_MASTER_KEY", interval=1, journal_lines=20,
        request_timeout=30,
        _if=lambda: (install_changed or master_created or local_changed
                     or any_changed(secrets_file, config, unit, started, restarted)()))
