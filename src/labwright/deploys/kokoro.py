"""Kokoro TTS: Kokoro-FastAPI as a systemd service, on CPU or GPU by field note 002's rule, streaming per sentence.

The device choice and the requirement list are labwright.kokoro.deploy_data; the streaming patch is
labwright.kokoro.streaming. See deploys/kokoro.py (the pyinfra CLI shim, with usage) and docs/kokoro.md.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from functools import cache
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import FindInFile
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.default_keys import is_default_key
from labwright.deploy_data import DeployData, conflict_error, jinja, refuse_unknown_keys
from labwright.deploys.common import (
    LOCKS_DIR,
    index_lock,
    install_missing,
    pip_install,
    pip_requirements,
    pip_source,
    port_taken_by,
    venv_create,
)
from labwright.engine_keys import is_loopback
from labwright.errors import LabwrightError
from labwright.facts.nvidia import NvidiaDriverVersion
from labwright.gpu.devices import GPU_GROUP
from labwright.guestlock import locked
from labwright.kokoro.deploy_data import TEMPLATES, DataError, choose_device, load_defaults, requirements
from labwright.kokoro.streaming import plan_streaming, read_tree
from labwright.operations import http
from labwright.operations import systemd as systemd_ops
from labwright.paths import cache_root
from labwright.schema import checks
from labwright.shell import join, quote

if TYPE_CHECKING:
    from labwright.schema.model import Schema

DEFAULTS = load_defaults()
JINJA = jinja(TEMPLATES)
IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".venv", "node_modules", ".pytest_cache")
MARKER = ".labwright-requirements"


KEYS = DeployData("kokoro", DEFAULTS)
fail, data = KEYS.fail, KEYS.get


def https_url(value: Any) -> str:
    text = checks.url(value)
    if not text.startswith("https://"):
        raise ValueError(f"{text!r} must be an https:// URL")
    return text


@cache
def data_schema() -> type[Schema]:
    """Kokoro's own ``kokoro_*`` values, typed (built on first use: pydantic loads only with the data)."""
    from pydantic import BeforeValidator

    from labwright.schema.fields import Flag, ListenAddress, ManagedDir, Packages, Port
    from labwright.schema.model import Schema

    class KokoroData(Schema):
        service: Annotated[str, BeforeValidator(checks.service_user)]
        user: Annotated[str, BeforeValidator(checks.service_user)]
        dir: ManagedDir
        venv: ManagedDir
        host: ListenAddress
        open: Flag
        port: Port
        health_timeout: Annotated[int, BeforeValidator(checks.whole(1))]
        extra_index_url: Annotated[str, BeforeValidator(checks.or_empty(https_url))]
        patch_streaming: Flag
        runtime_packages: Packages

    return KokoroData


def stage(source: Path, patched: dict[str, str]) -> Path:
    """A copy of the checkout with the patched files written in (one staging directory per source and host)."""
    key = hashlib.sha256(f"{source.resolve()}\0{host.name}".encode()).hexdigest()[:16]
    target = cache_root() / "kokoro" / "staged" / key
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=IGNORED)
    for relative, text in patched.items():
        (target / relative).write_text(text, encoding="utf-8", newline="")
    return target


def install_commands(venv: str, wanted: list[str], what: str, find_links: str, extra_index: str, marker: str,
                     where: str, lock_args: str = "") -> list[str]:
    """The venv at ``venv`` with the ``wanted`` requirements from ``find_links`` (alone: its hashed lock, which holds
    them, with --require-hashes; common.pip_requirements), else ``extra_index`` and PyPI, then ``marker`` (the
    requirement list and its digest) in ``venv``/.labwright-requirements; every value quoted. ``lock_args``: from the
    index, common.index_lock's words (the hashed lock made for the guest)."""
    args = lock_args if lock_args and not find_links else pip_requirements(find_links, extra_index, join(wanted))
    return [
        venv_create(venv),
        pip_install(f"{venv}/bin/pip", args, what,
                    find_links or extra_index or "PyPI", "kokoro_find_links / kokoro_extra_index_url", where=where),
        f"printf '%s\\n' {quote(marker)} > {quote(f'{venv}/{MARKER}')}",
    ]


@locked("Kokoro TTS")
def deploy_kokoro() -> None:
    """Kokoro-FastAPI from a checkout on this machine (streaming patch applied), its venv, unit and health.

    Everything is checked before anything changes (names, paths, the device and its driver, the port, the patch's
    fit); each refusal is one line naming the data key. A re-run with the same source changes nothing.
    """
    # --- read and check everything before touching anything -----------------------------------------
    refuse_unknown_keys(host.data.dict(), "kokoro", {*DEFAULTS["service"], "source", "env"},
                        "docs/kokoro.md and templates/kokoro/defaults.toml")
    typed = KEYS.parse(data_schema())
    service, user, guest_dir, venv = typed["service"], typed["user"], typed["dir"], typed["venv"]
    listen_host, open_engine, port = typed["host"], typed["open"], typed["port"]
    clash = conflict_error(host.data.dict(), {"kokoro_port": port, "kokoro_dir": guest_dir, "kokoro_venv": venv})
    if clash is not None:
        raise DeployError(clash)
    if not is_loopback(listen_host) and not open_engine:
        raise fail("host", f"{listen_host} would answer every client on the network without a key (Kokoro-FastAPI "
                   "has none); keep 127.0.0.1 and reach it from the same guest, or set kokoro_open=true to expose "
                   "it on purpose (nothing was changed)")
    if open_engine and not is_loopback(listen_host):
        logger.warning(f"{host.print_prefix}kokoro_open=true: Kokoro answers without a key on {listen_host}:"
                       f"{data('port')} (`labwright verify kokoro` reports it)")
    health_timeout = typed["health_timeout"]
    find_links = KEYS.path_of("find_links", data("find_links") or "", absolute=False)
    extra_index = KEYS.path_of("extra_index_url", typed["extra_index_url"], absolute=False)
    try:
        pip_source(find_links, extra_index)  # a plain http:// wheelhouse whose host pip_trusted_host does not name
    except LabwrightError as exc:
        raise fail("find_links", str(exc)) from None
    try:
        device = choose_device(str(data("use")), str(data("device") or ""), DEFAULTS["choice"])
    except DataError as exc:
        raise DeployError(str(exc)) from None
    device_data = DEFAULTS["device"][device]
    extra_env = host.data.get("kokoro_env") or {}
    if not isinstance(extra_env, dict) or not all(
            re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(k)) and not re.search(r"[\s\"'\\%$]", str(v))
            for k, v in extra_env.items()):
        raise fail("env", "must be a table of NAME = value (upper-case names; values without spaces, quotes, % or $)")
    for env_name, env_value in extra_env.items():
        why = is_default_key(str(env_value))
        if why:
            raise fail("env", f"{env_name} is {why}, which anyone can look up; set a random key (nothing was changed)")
    unit_env = {**device_data["env"], **{str(k): str(v) for k, v in extra_env.items()}}

    source_value = host.data.get("kokoro_source")
    if not source_value:
        raise fail("source", "is required: the Kokoro-FastAPI checkout on this machine (the directory holding api/ and "
                   "pyproject.toml), e.g. --data kokoro_source=~/src/Kokoro-FastAPI")
    source = Path(str(source_value)).expanduser()
    if not (source / "pyproject.toml").is_file():
        raise fail("source", f"{source} has no pyproject.toml: pass the Kokoro-FastAPI checkout (nothing was changed)")
    try:
        wanted = requirements((source / "pyproject.toml").read_text(), str(device_data["extra"]),
                              str(source / "pyproject.toml"))
    except DataError as exc:
        raise DeployError(str(exc)) from None
    patched: dict[str, str] = {}
    if typed["patch_streaming"]:
        try:
            change = plan_streaming(read_tree(source))
        except LabwrightError as exc:
            raise fail("source", str(exc)) from None
        if not change.ok:
            raise fail("patch_streaming", f"{change.message} (or set kokoro_patch_streaming=false)")
        patched = {f.label: f.after for f in change.files}

    if device == "gpu" and not host.get_fact(NvidiaDriverVersion):
        raise fail("device", f"gpu on {host.name}, which has no NVIDIA driver loaded; pass a GPU through to it, or "
                   "use kokoro_use=conversational (CPU: as fast to first audio, as field note 002 measured) "
                   "(nothing was changed)")
    holder = port_taken_by(port, service)
    if holder:
        raise fail("port", f"{port} is already in use on {host.name} by {holder} (nothing was changed)")

    # --- packages, user, the checkout ------------------------------------------------------------------
    install_missing(typed["runtime_packages"], "runtime packages")
    home = f"/var/lib/{service}"
    # on the GPU, in the nodes' group: a guest's nodes are 0660 group video (labwright.gpu.devices.guest_mode)
    server.user(name=f"Service user {user}", user=user, system=True, shell="/usr/sbin/nologin", home=home,
                create_home=True, groups=[GPU_GROUP] if device == "gpu" else None, append=True)
    staged = stage(source, patched)
    patch_note = " (streaming patch applied)" if patched else ""
    tree = files.sync(name=f"Kokoro-FastAPI checkout -> {guest_dir}{patch_note}",
                      src=str(staged), dest=guest_dir, user="root", group="root", mode="644", dir_mode="755",
                      exclude=["*.pyc", "__pycache__"])

    # --- the venv: reinstall only when the requirement list changes --------------------------------------
    requirement_text = "\n".join([f"# {device} ({device_data['extra']}) index {extra_index or 'PyPI'}", *wanted]) + "\n"
    digest = hashlib.sha256(requirement_text.encode()).hexdigest()
    install_changed = False
    if not host.get_fact(FindInFile, path=f"{venv}/{MARKER}", pattern=f"sha256 {digest}"):
        what = f"{len(wanted)} requirements ({device})"
        # From the index: the hashed lock made here for the guest's Python (common.index_lock).
        lock_args = "" if find_links else index_lock(wanted, extra_index, f"{LOCKS_DIR}/{service}.lock", what)
        server.shell(name=f"Install {len(wanted)} requirements ({device}) into {venv}",
                     commands=install_commands(venv, wanted, what, find_links, extra_index,
                                               requirement_text + "sha256 " + digest, host.name, lock_args))
        install_changed = True

    # --- unit, start, restart on change, health ----------------------------------------------------------
    unit_text = JINJA.get_template("kokoro.service.j2").render(
        user=user, home=home, dir=guest_dir, venv=venv, host=listen_host, port=port, env=unit_env,
        device=device, use=str(data("use")))
    unit = files.put(name=f"Unit {service}.service", src=StringIO(unit_text),
                     dest=f"/etc/systemd/system/{service}.service", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=unit.did_change)
    started = systemd_ops.started_owned(name=f"{service} enabled and running", service=f"{service}.service")
    restarted = systemd_ops.restarted_owned(
        name=f"Restart {service} (checkout, requirements or unit changed)", service=f"{service}.service",
        _if=lambda: (install_changed or any_changed(tree, unit)()) and not started.did_change())
    health_host = "127.0.0.1" if listen_host in ("0.0.0.0", "::") else listen_host
    http.wait_healthy(name=f"{service} health: /health", url=f"http://{health_host}:{port}", service=service,
                      timeout=health_timeout, interval=1, journal_lines=20,
                      _if=lambda: install_changed or any_changed(tree, unit, started, restarted)())
