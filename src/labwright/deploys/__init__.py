"""labwright's deploys as importable pyinfra ``@deploy`` functions (pyinfra's "Packaging Deploys" convention).

One pattern for every deploy: the host data and its checks live in the tool's package (pure functions over a
mapping, unit-tested: ``labwright.llamacpp.deploy_data``, ``labwright.tabbyapi.deploy_data``, ``labwright.base
.deploy_data`` ...), the operations in ``labwright.operations`` (every HTTP health check is
``labwright.operations.http.wait_healthy``), and the function here only reads facts, refuses with one line naming
the data key before anything changes, and calls the operations. ``deploys/*.py`` in the repository are few-line
shims so ``pyinfra INVENTORY deploys/X.py`` keeps working.

========================  =====================================================
``deploy_base``           timezone, locale, admin user, sshd hardening
``deploy_llamacpp``       llama-server from the cached build; Ollama drop-in
``deploy_tabbyapi``       tabbyAPI on an engine stack, pinned source, n-gram
``deploy_vllm``           vLLM on an engine stack, key on the host, loopback
``deploy_kokoro``         Kokoro-FastAPI text to speech
``deploy_litellm``        LiteLLM gateway over the inventory's engines
``deploy_monitoring``     Prometheus + node-exporter over the engines, GPU metrics
``deploy_gateway``        Caddy: one TLS entrance, a key per client
``deploy_desktop``        xrdp + MATE + Firefox in an unprivileged LXC
``deploy_stack``          switch (or roll back) a venv's engine stack
``deploy_guest``          build an inventory's guests (run on ``@local``)
``deploy_bios_backup``    flashrom backup of a host's BIOS chip
``deploy_cluster_rejoin`` rejoin a stale corosync node (run on ``@local``)
========================  =====================================================

Compose them in your own deploy file; each reads the same host data as its shim (``llamacpp_model``,
``tabbyapi_model_name``, ...), from your inventory or ``--data``::

    # my_lab.py:  pyinfra -y inventory.py my_lab.py
    from pyinfra import host

    from labwright.deploys.base import deploy_base
    from labwright.deploys.llamacpp import deploy_llamacpp

    deploy_base()
    if host.data.get("llamacpp_model"):
        deploy_llamacpp()

pyinfra prefixes every operation's name with the deploy's (``llama.cpp | Unit llama-server.service``), and the
usual global arguments apply to a whole deploy: ``deploy_llamacpp(_sudo=True)``. Import the module of the deploy
you use, as above: each imports only what its own deploy needs.
"""


def engine_host(engine: str) -> bool:
    """Whether the current host is one to deploy ``engine`` on, so that ``pyinfra inventories/lab.py
    deploys/tabbyapi.py`` touches the tabbyAPI guests and leaves the Proxmox nodes, desktops and llama.cpp guests of
    the same inventory alone (the shims of the engine deploys call this; a function you call yourself always deploys).

    A host is an ``engine`` host when its data says ``engine: "<engine>"`` (or ``engine: auto`` and its model's
    format picks this engine: :func:`auto_plan`), or has no ``engine`` and carries the
    engine's own data (a ``<engine>`` dict or ``<engine>_*`` keys, e.g. ``--data tabbyapi_model_name=...``). Any
    other host is skipped with one line saying why."""
    from pyinfra import host, logger
    from pyinfra.api.exceptions import DeployError

    from labwright.models.engine_plan import ENGINES

    data = host.data.dict()
    declared = data.get("engine")
    # a value of the wrong type or an unknown engine stops the host: skipping it would report success for a deploy
    # that never ran (sweep at 2b91fd1: engine: ["llamacpp"] was skipped with exit 0)
    if declared is not None and (not isinstance(declared, str) or declared.strip() not in (*ENGINES, "auto")):
        raise DeployError(f"engine: {declared!r} is not one of {', '.join(ENGINES)}, auto; set one of them (a "
                          "single word) in the host's data")
    if declared is not None and str(declared) == "auto":
        plan = auto_plan()
        if plan.engine != engine:
            logger.warning(f"{host.print_prefix}{engine}: not deployed here ({plan.line})")
            return False
        logger.info(f"{host.print_prefix}{plan.line}")
        return True
    if declared is not None:
        chosen = str(declared) == engine
    else:
        chosen = any(key == engine or key.startswith(f"{engine}_") for key in data)
    if not chosen:
        why = f"engine is {declared!r}" if declared is not None else f"no engine and no {engine}_* data"
        logger.warning(f"{host.print_prefix}{engine}: not deployed here ({why}); set engine: {engine!r} in its "
                       "inventory data to deploy it")
    return chosen


_PLANS: dict[str, object] = {}


def auto_plan():  # -> labwright.models.engine_plan.EnginePlan
    """``engine: auto`` for the current host: the engine field note 000's table gives its model's format, checked
    against the host's GPUs and RAM (labwright.models.engine_plan); made once per host and run. A model no engine here
    speaks, or one that fits nowhere, stops the host with one line (DeployError) before anything changes."""
    from pyinfra import host
    from pyinfra.api.exceptions import DeployError
    from pyinfra.facts.hardware import Memory as MemoryFact

    from labwright.errors import LabwrightError
    from labwright.facts.nvidia import NvidiaGpus
    from labwright.models.engine_plan import memory_of, plan_for_data
    from labwright.schema import checks

    if host.name not in _PLANS:
        data = host.data.dict()
        try:
            unified = bool(checks.or_empty(checks.flag)(data.get("unified_memory") or ""))
        except ValueError as exc:
            raise DeployError(f"unified_memory: {exc}") from None
        ram = host.get_fact(MemoryFact)  # None without vmstat: RAM not checked, as kv fit without --ram-gb
        memory = memory_of(host.get_fact(NvidiaGpus), ram, unified)
        try:
            _PLANS[host.name] = plan_for_data(data, memory)
        except LabwrightError as exc:
            raise DeployError(str(exc)) from None
    return _PLANS[host.name]
