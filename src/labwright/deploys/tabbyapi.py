"""tabbyAPI in a guest, end to end: driver check, packages, user, engine stack, pinned source, n-gram, config, unit.

The host data and its checks are labwright.tabbyapi.deploy_data; the checkout, keys and config.yml are
labwright.operations.tabbyapi_deploy; see deploys/tabbyapi.py and docs/tabbyapi.md for the keys.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory
from pyinfra.operations.util import any_changed

from labwright.deploys import engine_common as engine
from labwright.deploys import model as model_ops
from labwright.deploys.common import install_missing, port_taken_by
from labwright.errors import LabwrightError
from labwright.facts.llamacpp import ReadableBy
from labwright.facts.nvidia import NvidiaDriverMatch
from labwright.guestlock import locked
from labwright.operations import http, tabbyapi
from labwright.operations import tabbyapi_deploy as ops
from labwright.snapshots.deploy import check_snapshot_data
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
        plan = engine.stack_plan(s)
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

    active = engine.unit_is_active(s, "tabbyAPI")
    plan = engine.locked_plan(plan, data)  # the last check: the first time, it downloads the wheels' requirements

    # --- the guest, the driver, packages, the user ----------------------------------------------------
    engine.guest_and_driver(s, driver)

    download = model_ops.download(planned, state) if planned else None
    install_missing(s.packages, "packages")
    engine.service_user(s)
    if download is not None:
        model_ops.readable_after_download(s.model_path, s.user, "model_dir", download)

    # --- the engine stack: built beside and ABI-verified before the swap; a running service is restarted on it
    # and health-checked, with an automatic rollback
    engine.switch_stack(s, plan, active)

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
    unit = engine.unit(s, s.render_unit())
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
