"""vLLM in a guest, end to end: driver check, user, engine stack (vllm + the torch its wheel pins), key, unit, health.

The host data and its checks are labwright.vllm.deploy_data; see deploys/vllm.py and docs/vllm.md for the keys.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory, File
from pyinfra.operations import server
from pyinfra.operations.util import any_changed

from labwright.deploys import engine_common as engine
from labwright.deploys import model as model_ops
from labwright.deploys.common import port_taken_by
from labwright.engine_keys import key_file_refusal
from labwright.errors import LabwrightError
from labwright.facts.llamacpp import ReadableBy
from labwright.facts.nvidia import NvidiaDriverMatch
from labwright.guestlock import locked
from labwright.operations import http
from labwright.operations import secrets as secrets_ops
from labwright.shell import quote
from labwright.snapshots.deploy import check_snapshot_data
from labwright.vllm.deploy_data import STARTUP_LINE, downloaded_model, fail, settings_from


@locked("vLLM")
def deploy_vllm() -> None:
    """vLLM on an engine stack (vllm and the exact torch its wheel's METADATA pins, ABI-verified before the swap), as
    a hardened systemd unit behind a key made on the host, (re)started and health-checked on change.

    Everything in the data, and everything that can be known about the host before a change (the model directory,
    the port, the driver, the key file), is checked first; each refusal is one line naming the key, and nothing
    changes. A broken stack (a wheel whose .so was built against another torch than it says) is refused by the stack
    switch before its swap, leaving the running service as it was. A second run with the same data changes nothing.

    With ``engine: auto`` (labwright.models.engine_plan) ``vllm_cpu_offload_gb`` / ``vllm_cpu_offload_params`` "auto"
    take kv fit's verdict: a split's weights in RAM (``--cpu-offload-gb N``), a MoE's routed experts
    (``--cpu-offload-params experts``).
    """
    # --- read and check everything before touching the host -------------------------------------------
    check_snapshot_data()
    data = host.data.dict()
    try:
        data, planned = downloaded_model(data)
        s = settings_from(data)
        plan = engine.stack_plan(s)
    except LabwrightError as exc:
        raise DeployError(f"{exc} (nothing was changed)" if "nothing was changed" not in str(exc) else str(exc)) \
            from None
    offload_gb, offload_params = 0, ""
    if str(data.get("engine")) == "auto":
        from labwright.deploys import auto_plan

        chosen = auto_plan()
        offload_gb, offload_params = chosen.cpu_offload_gb, chosen.offload_params
    if s.expose:
        logger.warning(f"{host.print_prefix}vllm_expose=true: /health and /metrics answer without a key on "
                       f"{s.host}:{s.port} (vLLM's key guards /v1, /v2, /inference and /cohere only)")

    state = model_ops.probe(planned) if planned else "complete"
    if planned is None and not host.get_fact(Directory, path=s.model):
        raise fail("model", f"{s.model} does not exist on {host.name}: copy the model there, or name it with "
                   "model_repo to have it downloaded (nothing was changed)")
    if state == "complete" and not host.get_fact(ReadableBy, path=s.model, user=s.user):
        raise fail("model", f"{s.model} is not readable by the service user {s.user} on {host.name}: make it world- "
                   "or group-readable (nothing was changed)")
    refusal = key_file_refusal("vllm_api_key_file", s.api_key_file, host.get_fact(File, path=s.api_key_file),
                               host.name)
    if refusal:
        raise DeployError(refusal)
    holder = port_taken_by(s.port, s.service)
    if holder:
        raise fail("port", f"{s.port} is already in use on {host.name} by {holder}: stop it or choose another "
                   "vllm_port (nothing was changed)")

    driver = host.get_fact(NvidiaDriverMatch, root=s.nvidia_root) if s.gpu != "off" else None
    if driver is not None:
        if driver["status"] == "no-host-driver":
            if s.gpu == "required":
                raise fail("gpu", f"required, but {host.name} has no NVIDIA driver ({driver['message']}) (nothing "
                           "was changed)")
            logger.warning(f"{host.print_prefix}no NVIDIA kernel module visible: GPU driver check skipped "
                           f"(vllm_gpu={s.gpu}); vLLM's CUDA build needs a GPU to serve")
        elif driver["status"] != "match" and s.gpu == "check":
            raise fail("gpu", f"{driver['message']} (vllm_gpu=check installs nothing; nothing was changed)")

    active = engine.unit_is_active(s, "vLLM")
    plan = engine.locked_plan(plan, data)

    # --- the guest, the driver, the user ---------------------------------------------------------------
    engine.guest_and_driver(s, driver)
    download = model_ops.download(planned, state) if planned else None
    engine.service_user(s)
    if download is not None:
        model_ops.readable_after_download(s.model, s.user, "model_dir", download)

    # --- the engine stack: built beside and ABI-verified before the swap; a running service is restarted on it
    engine.switch_stack(s, plan, active)

    # --- the key, made on the host; the unit reads it as VLLM_API_KEY from a root-only environment file -----
    key = secrets_ops.engine_key(name=f"API key (generated on the host, kept: {s.api_key_file})",
                                 path=s.api_key_file, group=s.user)
    env_there = host.get_fact(File, path=s.env_file)
    env = server.shell(
        name=f"VLLM_API_KEY in {s.env_file} (0600 root, from the key file)",
        commands=[f"umask 077; printf 'VLLM_API_KEY=%s\\n' \"$(head -n1 {quote(s.api_key_file)})\" > "
                  f"{quote(s.env_file + '.new')} && chmod 600 {quote(s.env_file + '.new')} && "
                  f"mv -f {quote(s.env_file + '.new')} {quote(s.env_file)}"],
        _if=lambda: key.did_change() or not env_there)

    # --- unit, (re)start on change, health -----------------------------------------------------------
    unit = engine.unit(s, s.render_unit(offload_gb, offload_params))
    changed = [op for op in (download, key, env, unit) if op is not None]
    # /health (unauthenticated in vLLM) first, then /v1/models with the host's own key, listing the served name.
    http.wait_healthy(
        name=f"(Re)start {s.service}, wait for /health and /v1/models", url=s.local_url, service=s.service,
        timeout=s.health_timeout, models=[s.served_model_name], models_wait=True, key_file=s.api_key_file,
        restart=True, startup_line=STARTUP_LINE, interval=0.3,
        _if=lambda: not active or any_changed(*changed)(),
    )
