"""tabbyAPI in a guest, end to end: driver check, packages, user, engine stack, pinned source, n-gram, config, unit.

The host data and its checks are labwright.tabbyapi.deploy_data; the checkout, keys and config.yml are
labwright.operations.tabbyapi_deploy; see deploys/tabbyapi.py and docs/tabbyapi.md for the keys.
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.deploys import model as model_ops
from labwright.deploys.common import install_missing, port_taken_by
from labwright.errors import LabwrightError
from labwright.facts.llamacpp import ReadableBy
from labwright.facts.nvidia import NvidiaDriverMatch, NvidiaGpus
from labwright.facts.systemd import SystemdUnits, systemd_refusal, unit_active
from labwright.gpu.arch import capabilities_of
from labwright.gpu.devices import GPU_GROUP
from labwright.guestlock import locked
from labwright.operations import guests, http, tabbyapi
from labwright.operations import stack as stack_ops
from labwright.operations import tabbyapi_deploy as ops
from labwright.snapshots.deploy import check_snapshot_data
from labwright.stacks.dependency_lock import UNPINNED_KEY, lock_dependencies, unpinned_warning
from labwright.stacks.deploy_data import flag
from labwright.stacks.from_matrix import plan_for_stack
from labwright.tabbyapi.deploy_data import OOM_LINE, STARTUP_LINE, downloaded_model, settings_from


@locked("tabbyAPI")
def deploy_tabbyapi() -> None:
    """tabbyAPI at a pinned ref on an engine stack, as a systemd service, (re)started and health-checked on change.

    Everything in the data, and everything that can be known about the host before a change (model directory,
    port, driver), is checked first; each refusal is one line naming the key, and nothing changes. A broken stack
    is refused by the stack switch before its swap; a ref the remote does not have, before the checkout; both leave
    the running service as it was. A second run with the same data changes nothing.

    With deploys/model.py's keys (``model_repo``, ``model_revision``, ``model_allow`` ..., or a ``model`` table) the
    model is downloaded first (labwright.deploys.model: huggingface_hub, resumed, checksums verified) and config.yml's
    ``model_dir`` / ``model_name`` point at it; a model that changed restarts tabbyAPI onto it.
    """
    # --- read and check everything before touching the host -------------------------------------------
    check_snapshot_data()
    try:
        data, planned = downloaded_model(host.data.dict())
        s = settings_from(data)
        # The GPUs' compute capabilities: a stack whose CUDA has no kernels for them is refused here, naming the
        # stacks that have (a host without nvidia-smi reports none: no check).
        caps = capabilities_of(host.get_fact(NvidiaGpus)) if s.gpu != "off" else ()
        plan = plan_for_stack(s.stack, s.venv, root=s.stacks_root, wheelhouse=s.wheelhouse or None,
                              torch=s.torch or None, compute_caps=caps)
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None
    if s.cache_rounded:
        logger.warning(s.cache_note)

    # A model named with deploys/model.py's keys is downloaded first (verified, resumable, into the shared cache) and
    # config.yml points at MODEL_DIR/NAME, its link; a repo, revision or file the Hub does not have stops the run here
    # with one line. Until it is complete on the guest, the model checks below run after the download instead.
    state = model_ops.probe(planned) if planned else "complete"
    if planned is None and not host.get_fact(Directory, path=s.model_path):
        raise DeployError(f"tabbyapi_model_dir: {s.model_path} (model_dir/model_name) does not exist on {host.name}: "
                          "copy the model there or fix tabbyapi_model_dir / tabbyapi_model_name (nothing was changed)")
    if state == "complete" and not host.get_fact(ReadableBy, path=s.model_path, user=s.user):
        raise DeployError(f"tabbyapi_model_dir: {s.model_path} is not readable by the service user {s.user} on "
                          f"{host.name}: make it world- or group-readable (nothing was changed)")
    holder = port_taken_by(s.port, s.service)
    if holder:
        raise DeployError(f"tabbyapi_port: {s.port} is already in use on {host.name} by {holder}: stop it or choose "
                          "another tabbyapi_port (nothing was changed)")

    driver = host.get_fact(NvidiaDriverMatch, root=s.nvidia_root) if s.gpu != "off" else None
    if driver is not None:
        if driver["status"] == "no-host-driver":
            if s.gpu == "required":
                raise DeployError(f"tabbyapi_gpu: required, but {host.name} has no NVIDIA driver "
                                  f"({driver['message']})")
            logger.warning(f"{host.name}: no NVIDIA kernel module visible: GPU driver check skipped "
                           f"(tabbyapi_gpu={s.gpu})")
        elif driver["status"] != "match" and s.gpu == "check":
            raise DeployError(f"tabbyapi_gpu: {driver['message']} (tabbyapi_gpu=check installs nothing; nothing "
                              "changed)")

    unit_path = f"/etc/systemd/system/{s.service}.service"
    # tabbyAPI runs as a systemd unit: a host without a running systemd is refused here in one line (a --dry run
    # included), before pyinfra's own systemd facts fail the host. The answer is read in any shape pyinfra gives
    # (labwright.facts.systemd): a `systemctl is-active` Command fact was None there, and .strip() a traceback.
    systemd_state = host.get_fact(SystemdUnits, units=f"{s.service}.service")
    refusal = systemd_refusal(systemd_state, host.name, f"tabbyAPI runs as the systemd unit {s.service}.service")
    if refusal:
        raise DeployError(refusal)
    active = unit_active(systemd_state, f"{s.service}.service")
    # What the stack's wheels require, pinned by a hashed lock made here (labwright.stacks.dependency_lock): the last
    # check, since the first time it reads the wheels' requirements it downloads them (then it is cached).
    try:
        plan = lock_dependencies(plan, unpinned=flag(data, UNPINNED_KEY))
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None
    if plan.unpinned_dependencies:
        logger.warning(unpinned_warning(plan))

    # --- the guest, the driver, packages, the user ----------------------------------------------------
    guest = host.data.get("guest")
    if guest:
        guests.container(name="Guest matches its declaration", guest=guest, guest_host=host.name)
    if driver is not None and driver["status"] != "no-host-driver" and s.gpu != "check":
        guests.nvidia_userspace(name="NVIDIA userspace = host driver", root=s.nvidia_root)

    download = model_ops.download(planned, state) if planned else None
    install_missing(s.packages, "packages")
    # in the GPU nodes' group: a guest's nodes are 0660 group video (labwright.gpu.devices.guest_mode)
    server.user(name=f"Service user {s.user}", user=s.user, system=True, shell="/usr/sbin/nologin",
                home=f"/var/lib/{s.service}", create_home=True, groups=[GPU_GROUP], append=True)
    if download is not None:
        model_ops.readable_after_download(s.model_path, s.user, "model_dir", download)

    # --- the engine stack: built beside and ABI-verified before the swap; a running service is restarted on it
    # and health-checked, with an automatic rollback
    stack_ops.switch(
        name=f"Stack {plan.stack} at {s.venv}", plan=plan, keep=s.keep, base_python=s.base_python or None,
        installer=s.installer, create=True, service=s.service if active else None,
        health=f"{s.local_url}/health" if active else None, health_timeout=float(s.health_timeout))

    # --- source at the pinned ref, keys, config.yml, n-gram drafting ---------------------------------
    source = ops.checkout(name=f"tabbyAPI source at {s.ref}", url=s.git_url, ref=s.ref, dest=s.source)
    tokens = ops.api_tokens(name="API keys (generated on the host, kept)", path=s.tokens_path, group=s.user)
    rounded = f" (cache_size {s.cache_size_requested} rounded up to {s.cache_size})" if s.cache_rounded else ""
    config = ops.config(name=f"config.yml{rounded}", text=s.render_config(), path=s.config_path, source=s.source,
                        match_min=s.ngram_match_min, group=s.user)
    ngram = (tabbyapi.ngram(name=f"n-gram drafting (ngram_match_min={s.ngram_match_min})", source=s.source,
                            config=s.config_path, match_min=s.ngram_match_min, group=s.user)
             if s.ngram_match_min else None)

    # --- unit, (re)start on change, health -----------------------------------------------------------
    unit = files.put(name=f"Unit {s.service}.service", src=StringIO(s.render_unit()), dest=unit_path, user="root",
                     group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=unit.did_change)
    systemd.service(name=f"{s.service} enabled", service=f"{s.service}.service", running=None, enabled=True)
    changed = [op for op in (download, source, tokens, config, ngram, unit) if op is not None]
    # tabbyAPI's startup line in the journal first, then /health and /v1/models with the host's own API key; the
    # out-of-VRAM line ends the wait at once and stops the unit (else systemd restarts it into the same failure).
    http.wait_healthy(
        name=f"(Re)start {s.service}, wait for '{STARTUP_LINE}' and /health",
        url=s.local_url, service=s.service, timeout=s.health_timeout, models=[s.model_name], models_wait=True,
        key_file=s.tokens_path, key_name="api_key", restart=True, startup_line=STARTUP_LINE,
        fatal_lines={OOM_LINE: s.oom_message}, stop_on_fatal=True, interval=0.3,
        _if=lambda: not active or any_changed(*changed)(),
    )
