"""llama.cpp llama-server as a systemd service, with field note 004's production flags as data; an Ollama drop-in.

The binary is pushed from the control machine rather than built on each guest: one 5-minute build per machine
instead of one per guest, no compiler in the guests, and every guest runs byte-for-byte the same engine (its sha256
is checked on the guest before it replaces the installed one). The host data and its checks are
labwright.llamacpp.deploy_data; see deploys/llamacpp.py and docs/llamacpp.md for the keys.
"""

from __future__ import annotations

import os
from dataclasses import replace
from io import StringIO
from typing import Any

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory, File
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.deploy_data import FALSE, TRUE
from labwright.deploys import model as model_ops
from labwright.deploys.common import install_missing, port_taken_by
from labwright.engine_keys import gateway_only, key_file_refusal
from labwright.errors import BadInput, LabwrightError
from labwright.facts.dri import DriRenderNodes
from labwright.facts.llamacpp import GlibcVersion, OllamaPresent, ReadableBy
from labwright.facts.nvidia import NvidiaGpus
from labwright.gpu.devices import GPU_GROUP
from labwright.guestlock import locked
from labwright.guests.declared import pyinfra_dry_run
from labwright.llamacpp import build as llama_build
from labwright.llamacpp import buildbox, router
from labwright.llamacpp import router_deploy as llamacpp_router
from labwright.llamacpp.deploy_data import (
    KEYS,
    OLLAMA_DROPIN,
    BuildChoice,
    HostBuildMissing,
    LlamacppSettings,
    check_data,
    downloaded_model,
    first_build_for,
    glibc_needed,
    glibc_refusal,
    ollama_environment,
    ollama_mode,
    release_build_for,
    render_ollama_dropin,
    server_files,
    settings_from,
)
from labwright.operations import http
from labwright.operations import llamacpp as llamacpp_ops
from labwright.operations import secrets as secrets_ops
from labwright.operations import systemd as systemd_ops
from labwright.operations import vulkan as vulkan_ops
from labwright.snapshots.deploy import check_snapshot_data


@locked("llama.cpp")
def deploy_llamacpp() -> None:
    """llama-server from the cached build, its unit, (re)start and health; the same KV policy for a local Ollama.

    With deploys/model.py's keys (``model_repo`` + ``model_file``, or a ``model`` table) the GGUF is downloaded first
    (labwright.deploys.model: huggingface_hub, resumed, checksums verified) and ``--model`` points at it; a model
    that changed restarts the server onto it.

    Everything is checked before anything changes (model present, port free or already ours, cache types the
    engine accepts, a quantized V cache only with flash attention, an existing key file root's and closed to other
    users); each refusal is one line naming the data key.

    The server answers only with its API key (``--api-key-file``, llama.cpp common/arg.cpp): made on the host the
    first time (labwright.operations.secrets.engine_key) and kept; llama-server then refuses every request without
    it with 401 except ``/health`` and ``/v1/health`` (tools/server/server-http.cpp, ``get_public_endpoints`` and
    ``middleware_validate_api_key``, llama.cpp as vendored in llama-cpp-python 0.3.36). ``llamacpp_open=true``
    leaves the key out on purpose.
    """
    # --- read and check host data before touching anything ------------------------------------------
    check_snapshot_data()
    # llamacpp_models: several models, one router llama-server (labwright.llamacpp.router); None: one model
    routed = router.models_of(host.data.dict())
    try:
        data, planned = downloaded_model(host.data.dict())
    except BadInput as exc:
        raise DeployError(f"{exc} (nothing was changed)") from None
    # llamacpp_host=auto: loopback when only the gateway on this guest uses the engine (the whole inventory is read)
    alone = gateway_only(data, [other.data.dict() for other in inventory if other.name != host.name])
    # the checks that need no host, before the first fact (sweep at 2b91fd1: llamacpp_port=0 ran nvidia-smi on the
    # host first; the Ollama keys were checked only where Ollama was found)
    check_data(data)
    gpus = host.get_fact(NvidiaGpus)
    try:
        s = settings_from(data, gpus, gateway_only=alone)
        build_pending = False
    except HostBuildMissing:  # every other check passed: the first CPU build is made once the host's checks pass
        s = settings_from(data, gpus, gateway_only=alone, pending=True)
        build_pending = True
    # A build the guest's glibc cannot run, with no build box to make one it can (a Vulkan build for a Debian 12
    # guest): refused here, before the host's other checks; a build a box can make is made below, after them
    needed, guest_glibc, too_old = glibc_of(s) if not build_pending else (None, None, None)
    if too_old and release_build_for(s.build, needed, guest_glibc,
                                     host.get_fact(LinuxDistribution)["release_meta"]) is None:
        raise DeployError(too_old)
    # A model named with deploys/model.py's keys is downloaded first (verified, resumable, into the shared cache);
    # a repo, revision or file the Hub does not have stops the run here with one line. Until it is complete on the
    # guest, the model checks below run after the download instead.
    state = model_ops.probe(planned) if planned else "complete"
    if routed is None and planned is None and not host.get_fact(File, path=s.model):
        if host.get_fact(Directory, path=s.model):
            raise KEYS.fail("model", f"{s.model} is a directory on {host.name}, not a GGUF file; name the .gguf file "
                            "in it (nothing was changed)")
        raise KEYS.fail("model", f"{s.model} does not exist on {host.name}; copy the GGUF there first (nothing was "
                        "changed)")
    if routed is None and state == "complete" and not host.get_fact(ReadableBy, path=s.model, user=s.user):
        raise KEYS.fail("model", f"{s.model} is not readable by the service user {s.user} on {host.name}; make the "
                        "file and its directories world-readable or group-readable by it (nothing was changed)")
    # The key file, when there is one already, must be root's and closed to other users: refused here, before
    # anything runs (a key anyone on the host can read, or its owner could swap, is no key).
    refusal = None if s.open else key_file_refusal("llamacpp_api_key_file", s.api_key_file,
                                                   host.get_fact(File, path=s.api_key_file), host.name)
    if refusal:
        raise DeployError(refusal)
    if s.open:
        logger.warning(f"{host.print_prefix}llamacpp_open=true: llama-server answers without a key on "
                       f"{s.flags['host']}:{s.flags['port']} (`labwright verify llamacpp` reports it)")
    holder = port_taken_by(s.flags["port"], s.service)
    if holder:
        raise KEYS.fail("port", f"{s.flags['port']} is already in use on {host.name} by {holder} (nothing was "
                        "changed)")
    # each model of the list there, readable and fit-checked (kv fit), and how many fit at once: --models-max
    routing = llamacpp_router.plan(routed, s, data) if routed is not None else None

    mode = ollama_mode(data)
    ollama = host.get_fact(OllamaPresent)
    ollama_found = ollama["unit"] or ollama["binary"]
    if mode in TRUE and not ollama_found:
        raise KEYS.fail("ollama_override", f"no ollama unit or binary on {host.name}; use auto or false")
    apply_ollama = ollama_found and mode not in FALSE
    # an AMD/Intel host (/dev/dri render nodes): Ollama's Vulkan backend on, its user in the nodes' groups
    dri = host.get_fact(DriRenderNodes)
    ollama_env = ollama_environment(data, vulkan=bool(dri["render_nodes"])) if apply_ollama else {}
    ollama_groups = vulkan_ops.render_groups(dri)[0] if dri["render_nodes"] else []

    # --- the build: this machine's first CPU build, made where the guest can run it, only now that every check
    # of the data and the host passed (sweep at 6d041d3: a --dry run with a missing model built for 6 minutes and
    # only then said the model was missing); a --dry run builds nothing and says so ---------------------------
    if build_pending:
        if pyinfra_dry_run():
            logger.info(f"{host.print_prefix}--dry: no llama-server is built on this machine yet; a real run builds "
                        f"the {s.build.describe()} first (~6 min on 2 cores, once), then installs it: the steps after "
                        "it are not planned here")
            return
        s = settings_from(data, gpus, gateway_only=alone, release=first_build())
        needed, guest_glibc, too_old = glibc_of(s)
    # This machine's CPU build needing a newer glibc than the guest's (a Debian 13 controller, a Debian 12 guest) is
    # built for the guest's release instead, in that release's build box of the lab (labwright.llamacpp.buildbox)
    if too_old:
        fitting = for_guest_release(s, data, needed, guest_glibc, too_old)
        if fitting is None:  # --dry, and the build for the guest's release is not made yet
            return
        s = fitting

    # --- the model first, when named by deploys/model.py's keys -------------------------------------
    download = model_ops.download(planned, state) if planned else None

    # --- runtime libraries (apt only when missing) and the service user ------------------------------
    install_missing(s.runtime_packages, "runtime libraries", name="Install llama-server runtime libraries")
    # a CUDA build's user in the GPU nodes' group: a guest's nodes are 0660 group video (gpu.devices.guest_mode)
    server.user(name=f"Service user {s.user}", user=s.user, system=True, shell="/usr/sbin/nologin",
                home=f"/var/lib/{s.service}", create_home=True,
                groups=[GPU_GROUP] if s.build.kind == "cuda" else None, append=True)
    # an AMD/Intel guest (gpu: amd/intel, /dev/dri render nodes): the user in video and render, Mesa's Vulkan drivers
    vulkan_ops.vulkan_guest(s.user)
    if download is not None:
        model_ops.readable_after_download(s.model, s.user, "model_dir", download)
    # The API key, made on the host the first time and kept (0640 root:<user>); --api-key-file reads it at start.
    key = (secrets_ops.engine_key(name=f"API key (generated on the host, kept: {s.api_key_file})",
                                  path=s.api_key_file, group=s.user) if not s.open else None)
    key_changed = key.did_change if key is not None else (lambda: False)
    model_changed = download.did_change if download is not None else (lambda: False)

    # --- the build for this host's GPUs (CUDA where it shows NVIDIA GPUs, else CPU): staged, sha256-checked on the
    # guest, then moved over the old one; a CUDA build's libraries beside it ---------------------------
    binary_op = llamacpp_ops.server_binary(
        name=f"llama-server: the {s.build.describe()}", binary=s.binary,
        build=str(data.get("llamacpp_build") or "auto"), release=s.build.release or None,
        binary_src=data.get("llamacpp_binary_src") or None, binary_sha256=data.get("llamacpp_binary_sha256") or None)
    binary_changed = binary_op.did_change

    # --- unit, start, restart on change, health ------------------------------------------------------
    preset = llamacpp_router.preset(routing, s) if routing is not None else None
    preset_changed = preset.did_change if preset is not None else (lambda: False)
    unit = files.put(name=f"Unit {s.service}.service",
                     src=StringIO(routing.unit if routing is not None else s.render_unit()),
                     dest=f"/etc/systemd/system/{s.service}.service", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=unit.did_change)
    started = systemd_ops.started_owned(name=f"{s.service} enabled and running", service=f"{s.service}.service")
    # Restart only for a real change; a fresh start above already runs the new binary and unit.
    restarted = systemd_ops.restarted_owned(
        name=f"Restart {s.service} (unit or binary changed)", service=f"{s.service}.service",
        _if=lambda: (unit.did_change() or binary_changed() or model_changed() or key_changed() or preset_changed())
        and not started.did_change())
    # /v1/models is asked with the key (only /health and /v1/health are public once a key is set).
    http.wait_healthy(name=f"{s.service} health: /health then /v1/models", url=s.health_url, service=s.service,
                      timeout=s.health_timeout, models=routing.names if routing is not None else s.model_ids,
                      all_models=routing is not None, key_file=s.key_file,
                      _if=lambda: (binary_changed() or model_changed() or key_changed() or preset_changed()
                                   or any_changed(unit, started, restarted)()))

    # --- Ollama on the same host: the same KV policy, as a drop-in -----------------------------------
    if apply_ollama:
        dropin = files.put(name="Ollama drop-in (flash attention, KV cache type, keep-alive, context)",
                           src=StringIO(render_ollama_dropin(ollama_env, ollama_groups)), dest=OLLAMA_DROPIN,
                           user="root", group="root", mode="644", create_remote_dir=True)
    else:
        dropin = files.file(name="No labwright Ollama drop-in", path=OLLAMA_DROPIN, present=False)
    systemd.daemon_reload(name="systemd daemon-reload (Ollama drop-in changed)", _if=dropin.did_change)
    # try-restart: a stopped Ollama stays stopped, a running one picks up the new environment.
    systemd_ops.restarted_foreign(name="Restart Ollama if running (drop-in changed)", service="ollama.service",
                                  running_only=True, _if=lambda: dropin.did_change() and bool(ollama["unit"]))


def glibc_of(s: LlamacppSettings) -> tuple[tuple[tuple[int, int], str] | None, str | None, str | None]:
    """(the newest glibc the files' ELF need, the guest's glibc, the refusal when the guest's is older): every file
    pushed (CPU, CUDA, Vulkan, a given binary, the libraries beside it) needs the glibc its ELF names, and one built
    on a newer Debian than the guest's would not start there."""
    needed = glibc_needed(s.files)
    guest_glibc = host.get_fact(GlibcVersion) if needed else None
    return needed, guest_glibc, glibc_refusal(s.build, needed, guest_glibc, host.name) if needed else None


def lab_daemon() -> tuple[Any, str, str | None, str] | None:
    """The guest's own LXD/Incus daemon, to make a build box on: (client, its command-line tool, the remote, the
    profile), None for a guest not reached through @lxd/@incus. The profile is ``lab_profile`` (the lab's
    inventory data), else the guest's own lab profile (a profile labwright's lab made), else its first."""
    from labwright.connectors.lxd import LxdConnector

    connector = host.connector
    if not isinstance(connector, LxdConnector):
        return None
    client = connector.client
    profile = host.data.get("lab_profile")
    if not profile:
        profiles = list(client.instance(connector.instance).get("profiles") or [])
        ours = [name for name in profiles if str((client.get_or_none(f"/1.0/profiles/{name}") or {})
                                                 .get("description") or "").startswith("labwright lab ")]
        profile = (ours or profiles or [""])[0]
    if not profile:
        return None
    return client, "incus" if connector.flavour == "incus" else "lxc", host.data.get("lxd_remote") or None, \
        str(profile)


def first_build() -> str:
    """No CPU build on this machine yet: make it, for the guest's Debian release in the lab's build box of that
    release where this machine's glibc is newer than the guest's (deploy_data.first_build_for: the codename is
    returned), else here, as `labwright build llamacpp` does ("" returned). Either way once, then cached."""
    guest_glibc = host.get_fact(GlibcVersion)
    controller = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else None
    choice = BuildChoice("cpu")
    codename = first_build_for(choice, controller, guest_glibc, host.get_fact(LinuxDistribution)["release_meta"])
    if codename is not None and lab_daemon() is not None:
        logger.info(f"{host.print_prefix}no llama-server built yet; this machine's {controller} is newer than "
                    f"{guest_glibc}: building it for Debian {codename} in the lab's build box, not here")
        release_build(codename, choice, guest_glibc)
        return codename
    logger.info(f"{host.print_prefix}no llama-server built yet: building the {choice.describe()} on this machine once "
                f"(~6 min on 2 cores; then cached in {llama_build.cache_dir()})")
    try:
        llama_build.build_llama_server()
    except LabwrightError as exc:
        raise DeployError(f"llamacpp_build: cpu: the first build on this machine failed: {exc} (nothing was "
                          "changed)") from None
    return ""


def release_build(codename: str, choice: BuildChoice, guest_glibc: str | None, refusal: str | None = None) -> bool:
    """The CPU build for Debian ``codename``, made in that release's build box on the guest's own lab daemon unless
    cached. ``refusal``: the line to give where no lab daemon is there (default: the command that builds it).
    False: a --dry run, which builds nothing (said in one line)."""
    if (buildbox.release_cache_dir(codename) / "manifest.json").is_file():
        return True
    wanted = replace(choice, release=codename)
    daemon = lab_daemon()
    if daemon is not None and pyinfra_dry_run():
        logger.info(f"{host.print_prefix}--dry: the {wanted.describe()} is not built yet; a real run builds it in "
                    f"the lab's build box first (once), then installs it: the steps after it are not planned here")
        return False
    if daemon is None:
        raise DeployError(refusal or f"llamacpp_build: {choice.kind}: the {wanted.describe()} is not built yet and "
                          f"{host.name} is not a guest of a lab daemon here; build it with `labwright build llamacpp "
                          f"--release {codename}` (nothing was changed)")
    client, tool, remote, profile = daemon
    logger.info(f"{host.print_prefix}building the {wanted.describe()} in the lab's build box "
                f"{buildbox.box_name(profile, codename)} (once; then cached in {buildbox.release_cache_dir(codename)})")
    try:
        buildbox.build_for_release(codename, client, profile, tool, remote=remote, log=logger.info)
    except LabwrightError as exc:
        raise DeployError(f"llamacpp_build: {choice.kind}: the {wanted.describe()} for {host.name} (its glibc "
                          f"{guest_glibc or 'unknown'} is older than this machine's build needs): {exc} (nothing was "
                          "changed)") from None
    return True


def for_guest_release(s: LlamacppSettings, data: dict[str, Any], needed: tuple[tuple[int, int], str] | None,
                      guest_glibc: str | None, refusal: str) -> LlamacppSettings | None:
    """``s`` with the build made for the guest's Debian release (deploy_data.release_build_for: only where this
    machine's would not start there), from the cache or built now in that release's build box on the guest's own
    daemon; its files checked against the guest's glibc again (the last guard). ``refusal`` (glibc_refusal's line)
    stands where no box can help; where one could but no lab daemon is there, the line names the command."""
    codename = release_build_for(s.build, needed, guest_glibc, host.get_fact(LinuxDistribution)["release_meta"])
    if codename is None:
        raise DeployError(refusal)
    choice = replace(s.build, release=codename)
    logger.info(f"{host.print_prefix}this machine's llama-server ({s.build.describe()}) needs a newer glibc than "
                f"{guest_glibc or 'the guest has'}: the {choice.describe()} is pushed instead")
    if not release_build(codename, s.build, guest_glibc,
                         glibc_refusal(s.build, needed, guest_glibc, host.name, release=codename) or refusal):
        return None
    files = server_files(choice, data, s.binary)
    last = glibc_refusal(choice, glibc_needed(files), guest_glibc, host.name)
    if last:
        raise DeployError(last)
    return replace(s, build=choice, files=tuple(files), binary_src=files[0].src, binary_sha256=files[0].sha256)
