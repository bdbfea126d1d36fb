"""Open WebUI: chat in the browser for the lab's models, from PyPI's open-webui in its own venv.

The connections are chosen by labwright.openwebui.config (pure); see deploys/openwebui.py (the pyinfra CLI shim,
with usage) and docs/openwebui.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from io import StringIO
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, cast

from pyinfra import host, inventory
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import File, FileContents
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.deploy_data import DeployData, conflict_error, jinja, refuse_unknown_keys
from labwright.deploys.common import (
    LOCKS_DIR,
    index_lock,
    install_missing,
    pip_install,
    pip_requirements,
    port_taken_by,
    service_user_version,
    venv_create,
)
from labwright.deploys.litellm import address_of, engine_key_values
from labwright.errors import BadInput
from labwright.facts.default_keys import DefaultKeysIn
from labwright.facts.openwebui import OpenwebuiKeysCurrent, OpenwebuiVersion
from labwright.guestlock import locked
from labwright.litellm.config import ConfigError, EngineHost, discover_engines, engine_keys_of, render_secrets
from labwright.litellm.config import load_defaults as litellm_defaults
from labwright.openwebui.config import (
    SIGNIN_CHECK,
    TEMPLATES,
    check_email,
    check_name,
    choose_backend,
    load_defaults,
    openai_env_script,
    refuse_default_key,
    render_settings,
)
from labwright.openwebui.wheelhouse import EXTRA as WHEELHOUSE_EXTRA
from labwright.operations import http
from labwright.operations import systemd as systemd_ops
from labwright.operations.secrets import secret_file
from labwright.schema import checks
from labwright.shell import quote

if TYPE_CHECKING:
    from labwright.schema.model import Schema

DEFAULTS = load_defaults()
JINJA = jinja(TEMPLATES)
GIT_REF = re.compile(r"^[0-9a-f]{7,40}$|^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
# Secrets are made on the guest only; a value for one of these in inventory data is refused.
SECRET_KEYS = ("secret_key", "admin_password", "pipelines_api_key")

KEYS = DeployData("openwebui", DEFAULTS)
fail, data = KEYS.fail, KEYS.get


@cache
def data_schema() -> type[Schema]:
    """Open WebUI's own ``openwebui_*`` values, typed (built on first use: pydantic loads only with the data)."""
    from pydantic import BeforeValidator

    from labwright.schema.fields import Flag, ListenAddress, ManagedDir, Packages, Port
    from labwright.schema.model import Schema

    class OpenwebuiData(Schema):
        venv: ManagedDir
        data_dir: ManagedDir
        config_dir: ManagedDir
        host: ListenAddress
        port: Port
        litellm_port: Port
        extra_index_url: Annotated[str, BeforeValidator(checks.or_empty(checks.url))]
        health_timeout: Annotated[int, BeforeValidator(checks.whole(1))]
        pipelines: Flag
        pipelines_port: Port
        runtime_packages: Packages
        backend: Annotated[str, BeforeValidator(checks.one_of("auto", "gateway", "engines"))]

    return OpenwebuiData


def generate(path: str, variable: str, nbytes: int, what: str) -> None:
    """``VARIABLE=<random>`` into a root-only file on the guest (python3 secrets), made once, never read back."""
    server.shell(name=f"Generate {what} on the guest ({path}, 0600 root)", commands=[
        f"umask 077; python3 -c 'import secrets; print(\"{variable}=\" + secrets.token_urlsafe({nbytes}))' "
        f"> {quote(path + '.new')} && mv {quote(path + '.new')} {quote(path)}",
    ])


@locked("Open WebUI")
def deploy_openwebui() -> None:
    """Open WebUI at a pinned version, its secret key and first admin (made on the guest), its connections to the
    inventory's LiteLLM gateway or engines, offline settings, unit; the optional pipelines server with its own key.

    Everything is checked before anything changes; each refusal is one line naming the data key.
    """
    # --- read and check everything before touching anything -----------------------------------------
    refuse_unknown_keys(host.data.dict(), "openwebui", {*DEFAULTS["service"], *SECRET_KEYS},
                        "docs/openwebui.md and templates/openwebui/defaults.toml")
    for key in SECRET_KEYS:
        value = host.data.get(f"openwebui_{key}")
        if value is not None:
            try:
                refuse_default_key(value, f"openwebui_{key}")
            except ConfigError as exc:
                raise DeployError(str(exc)) from None
            raise fail(key, "is never taken from inventory data (secrets stay out of inventories); labwright "
                       f"generates it on the guest: remove openwebui_{key} (nothing was changed)")
    service, user, version = service_user_version(KEYS, "open-webui", "0.12.4")
    typed = KEYS.parse(data_schema())
    venv, data_dir, config_dir = typed["venv"], typed["data_dir"], typed["config_dir"]
    listen_host, port, litellm_port = typed["host"], typed["port"], typed["litellm_port"]
    find_links, pipelines_find_links = (KEYS.path_of(key, data(key) or "", absolute=False)
                                        for key in ("find_links", "pipelines_find_links"))
    extra_index = KEYS.path_of("extra_index_url", typed["extra_index_url"], absolute=False)
    health_timeout, pipelines, pipelines_port = typed["health_timeout"], typed["pipelines"], typed["pipelines_port"]
    pipelines_dir, pipelines_repo = str(data("pipelines_dir")), str(data("pipelines_repo"))
    pipelines_ref = str(data("pipelines_ref"))
    own: dict[str, Any] = {"openwebui_port": port, "openwebui_venv": venv, "openwebui_data_dir": data_dir,
                           "openwebui_config_dir": config_dir}
    # the pipelines keys are checked whether or not the pipelines are on: a bad value is refused when it is written,
    # not on the day openwebui_pipelines=true is set
    pipelines_dir = KEYS.managed_of("pipelines_dir", pipelines_dir)
    try:  # the one check of a git URL (schema.checks.git_url), as for tabbyapi_git_url
        pipelines_repo = checks.git_url(pipelines_repo)
    except ValueError as error:
        raise fail("pipelines_repo", str(error)) from None
    if not GIT_REF.match(pipelines_ref) or ".." in pipelines_ref:
        raise fail("pipelines_ref", f"{pipelines_ref!r} is not a plain git commit, tag or branch")
    if pipelines:
        own.update(openwebui_pipelines_port=pipelines_port, openwebui_pipelines_dir=pipelines_dir)
    clash = conflict_error(host.data.dict(), own)
    if clash is not None:
        raise DeployError(clash)
    if pipelines:
        if pipelines_port == port:
            raise fail("pipelines_port", f"{pipelines_port} is Open WebUI's own port (openwebui_port)")
        if not pipelines_find_links:
            # Its requirements are read from the repository on the guest, so this machine cannot lock them from the
            # index: they come from a wheelhouse with its hashed lock (docs/security.md, "Every download pinned").
            raise fail("pipelines_find_links", "the pipelines venv installs from a hashed lock: build its wheelhouse "
                       "with `labwright wheelhouse requirements --python <the guest's> --out DIR -r "
                       "requirements-minimum.txt` (the file at openwebui_pipelines_ref) and set "
                       "openwebui_pipelines_find_links to it (nothing was changed)")
    # Every venv from a wheelhouse installs from its hashed lock (docs/security.md, "Every download pinned"); a plain
    # http:// one only when pip_trusted_host names its host: checked here, before the host is touched.
    try:
        install_args = pip_requirements(find_links, extra_index, f"'open-webui=={version}'")
        pipelines_args = pip_requirements(pipelines_find_links, extra_index,
                                          f"-r {quote(pipelines_dir + '/requirements-minimum.txt')}")
    except BadInput as exc:
        raise fail("pipelines_find_links" if pipelines_find_links and pipelines_find_links in str(exc)
                   else "find_links", str(exc)) from None
    try:
        admin_email = check_email(str(data("admin_email")))
        admin_name = check_name(str(data("admin_name")))
        hosts = [EngineHost(h.name, cast(Mapping[str, Any], h.data), h.name == host.name) for h in inventory]
        gateway_here = bool(host.get_fact(File, path="/etc/litellm/master.env"))
        connections = choose_backend(typed["backend"], gateway_here, litellm_port, hosts,
                                     litellm_defaults()["engines"], address_of,
                                     engines_env=f"{config_dir}/engines.env")
        through_gateway = any(c.key_var == "LITELLM_MASTER_KEY" for c in connections)
        engine_keys = [] if through_gateway else engine_keys_of(discover_engines(hosts, litellm_defaults()["engines"],
                                                                                 address_of))
    except ConfigError as exc:
        raise DeployError(str(exc)) from None
    # The engines' keys: every key file checked where it is (one line naming the path and the fix), the keys of
    # engines on other hosts read there (labwright.deploys.litellm.engine_key_values).
    remote_keys = engine_key_values(engine_keys)

    secret_env, admin_env, openai_env, settings_env, pipelines_env = (
        f"{config_dir}/{name}" for name in ("secret.env", "admin.env", "openai.env", "settings.env", "pipelines.env"))
    defaults_found = host.get_fact(DefaultKeysIn, paths=[secret_env, admin_env, openai_env, settings_env,
                                                         pipelines_env])
    if defaults_found:
        found = defaults_found[0]
        key = "pipelines_api_key" if found["path"] == pipelines_env else "secret_key"
        raise fail(key, f"{found['path']} on {host.name} sets {found['variable']} to {found['why']}, which anyone "
                   f"can look up; delete {found['path']} and re-run to generate a random one (nothing was changed)")
    holder = port_taken_by(port, service)
    if holder:
        raise fail("port", f"{port} is already in use on {host.name} by {holder} (nothing was changed)")
    if pipelines:
        holder = port_taken_by(pipelines_port, f"{service}-pipelines")
        if holder:
            raise fail("pipelines_port", f"{pipelines_port} is already in use on {host.name} by {holder} (nothing "
                       "was changed)")

    # --- runtime, user, the venv at the pinned version ------------------------------------------------
    install_missing([*typed["runtime_packages"], *(["git"] if pipelines else [])], "Open WebUI's runtime")
    server.user(name=f"Service user {user}", user=user, system=True, shell="/usr/sbin/nologin", home=data_dir,
                create_home=True)
    files.directory(name=f"{data_dir} ({user} 0750)", path=data_dir, user=user, group=user, mode="750")
    where = find_links or (f"PyPI and {extra_index}" if extra_index else "PyPI")
    install_changed = False
    current = host.get_fact(OpenwebuiVersion, venv=venv)
    if current != version:
        if not find_links:  # from the index: the hashed lock made here for the guest's Python (common.index_lock)
            install_args = index_lock([f"open-webui=={version}", *WHEELHOUSE_EXTRA], extra_index,
                                      f"{LOCKS_DIR}/{service}.lock", f"open-webui=={version}")
        server.shell(name=f"Install open-webui=={version} in {venv} (was {current or 'absent'})", commands=[
            f"mkdir -p {quote(str(PurePosixPath(venv).parent))}",
            venv_create(venv),
            pip_install(f"{venv}/bin/pip", install_args, f"open-webui=={version}", where, "openwebui_find_links"),
        ])
        install_changed = True

    # --- keys (made on the guest), settings, unit ---------------------------------------------------------
    files.directory(name=f"{config_dir} (root 0755)", path=config_dir, user="root", group="root", mode="755")
    made = []
    for path, variable, nbytes, what in ((secret_env, "WEBUI_SECRET_KEY", 48, "WEBUI_SECRET_KEY"),
                                         (admin_env, "WEBUI_ADMIN_PASSWORD", 18, "the admin's password"),
                                         *([(pipelines_env, "PIPELINES_API_KEY", 32, "PIPELINES_API_KEY")]
                                           if pipelines else [])):
        if not host.get_fact(File, path=path):
            generate(path, variable, nbytes, what)
            made.append(path)
    pipelines_url = f"http://127.0.0.1:{pipelines_port}" if pipelines else ""
    settings = files.put(name=f"{settings_env}: {len(connections) + bool(pipelines)} connections, offline",
                         src=StringIO(render_settings(connections, data_dir, admin_email, admin_name,
                                                      pipelines_url)),
                         dest=settings_env, user="root", group="root", mode="644")
    # Keys of engines on other hosts, read there by this run (never printed), into a root-only file here; openai.env
    # is then made from it on the guest like every other key.
    remote_file = (secret_file(name=f"Keys of engines on other hosts ({config_dir}/engines.env, 0600 root)",
                               content=render_secrets({}, remote_keys), dest=f"{config_dir}/engines.env", user="root",
                               group="root", mode="600") if remote_keys else None)
    keys_current = host.get_fact(OpenwebuiKeysCurrent, script=openai_env_script(
        connections, openai_env, pipelines_env if pipelines else "", check=True))
    keys_op = None
    if not keys_current or remote_file is not None:
        # A changed engines.env (read before it was written) makes openai.env stale as well.
        keys_op = server.shell(
            name=f"OPENAI_API_KEYS on the guest ({openai_env}, 0600 root; read from the key files there)",
            commands=[openai_env_script(connections, openai_env, pipelines_env if pipelines else "")],
            _if=(lambda: True) if not keys_current else remote_file.did_change)  # type: ignore[union-attr]
    keys_changed = keys_op.did_change if keys_op is not None else (lambda: False)

    pipelines_changed = False
    if pipelines:
        # Its requirements come from their own wheelhouse (its hashed lock) when one is given, else from the index.
        pipelines_changed = deploy_pipelines(pipelines_dir, pipelines_repo, pipelines_ref, pipelines_port, user,
                                             data_dir, config_dir, service, pipelines_args,
                                             pipelines_find_links or where, health_timeout)

    unit_text = JINJA.get_template("open-webui.service.j2").render(
        user=user, data_dir=data_dir, config_dir=config_dir, venv=venv, host=listen_host, port=port)
    unit = files.put(name=f"Unit {service}.service", src=StringIO(unit_text),
                     dest=f"/etc/systemd/system/{service}.service", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=unit.did_change)
    started = systemd_ops.started_owned(name=f"{service} enabled and running", service=f"{service}.service")
    changed = lambda: bool(install_changed or made or keys_changed() or pipelines_changed)  # noqa: E731
    restarted = systemd_ops.restarted_owned(
        name=f"Restart {service} (install, keys, settings or unit changed)", service=f"{service}.service",
        _if=lambda: (changed() or any_changed(settings, unit)()) and not started.did_change())
    health_host = "127.0.0.1" if listen_host in ("0.0.0.0", "::") else listen_host
    base = f"http://{health_host}:{port}"
    check = lambda: changed() or any_changed(settings, unit, started, restarted)()  # noqa: E731
    http.wait_healthy(name=f"{service} health: /health", url=base, service=service, timeout=health_timeout,
                      health_path="/health", interval=1, journal_lines=20, request_timeout=30, _if=check)
    server.shell(name=f"{service}: the admin signs in and sees the models",
                 commands=[f"python3 -c {quote(SIGNIN_CHECK)} {quote(base)} {quote(config_dir)}"],
                 _if=check)


def deploy_pipelines(directory: str, repo: str, ref: str, port: int, user: str, data_dir: str, config_dir: str,
                     service: str, pip_args: str, where: str, health_timeout: int) -> bool:
    """The pipelines server at ``ref`` in its own venv, on loopback, with the generated PIPELINES_API_KEY;
    ``pip_args``: its source and requirements (common.pip_requirements)."""
    name = f"{service}-pipelines"
    marker = f"{directory}/.labwright-ref"
    install = None
    if (host.get_fact(FileContents, path=marker) or [""])[0].strip() != ref:
        install = server.shell(name=f"pipelines server at {ref[:12]} in {directory}", commands=[
            f"test -d {quote(directory + '/.git')} || git init -q {quote(directory)}",
            f"git -C {quote(directory)} fetch -q --depth 1 {quote(repo)} {quote(ref)}",
            f"git -C {quote(directory)} checkout -q --force FETCH_HEAD",
            venv_create(f"{directory}/.venv"),
            pip_install(f"{directory}/.venv/bin/pip", pip_args, "the pipelines server's requirements", where,
                        "openwebui_pipelines_find_links or openwebui_find_links"),
            f"printf '%s\\n' {quote(ref)} > {quote(marker)}",
        ])
    files.directory(name=f"{data_dir}/pipelines ({user})", path=f"{data_dir}/pipelines", user=user, group=user,
                    mode="750")
    unit = files.put(name=f"Unit {name}.service", src=StringIO(JINJA.get_template("pipelines.service.j2").render(
        user=user, directory=directory, data_dir=data_dir, config_dir=config_dir, port=port, ref=ref)),
        dest=f"/etc/systemd/system/{name}.service", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (pipelines unit changed)", _if=unit.did_change)
    started = systemd_ops.started_owned(name=f"{name} enabled and running", service=f"{name}.service")
    restarted = systemd_ops.restarted_owned(
        name=f"Restart {name} (code or unit changed)", service=f"{name}.service",
        _if=lambda: any_changed(unit, *([install] if install else []))() and not started.did_change())
    http.wait_healthy(name=f"{name} health: /", url=f"http://127.0.0.1:{port}", service=name,
                      timeout=health_timeout, health_path="/", interval=1, journal_lines=20,
                      _if=any_changed(unit, started, restarted, *([install] if install else [])))
    return install is not None

