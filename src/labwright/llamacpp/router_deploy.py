"""deploys/llamacpp.py's router mode on the host: each model of ``llamacpp_models`` found, readable and fit-checked
while pyinfra prepares (nothing installed before), then the preset file (labwright.llamacpp.router)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from io import StringIO
from typing import Any

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.hardware import Memory as MemoryFact
from pyinfra.operations import files

from labwright.facts.gguf import GgufHead
from labwright.facts.llamacpp import ReadableBy
from labwright.facts.nvidia import NvidiaGpus
from labwright.llamacpp import router
from labwright.models.engine_plan import memory_of
from labwright.schema import checks


@dataclass(frozen=True)
class RouterPlan:
    models: tuple[router.RouterModel, ...]
    fits: tuple[router.ModelFit, ...]
    count: int
    unit: str

    @property
    def names(self) -> list[str]:
        return [model.name for model in self.models]


def plan(models: Sequence[router.RouterModel], settings: Any, data: dict[str, Any]) -> RouterPlan:
    """Every model there, readable by the service user and fitting (``kv fit`` against this host's largest GPU and
    RAM), checked before anything changes; one line each when not."""
    try:
        unified = bool(checks.or_empty(checks.flag)(data.get("unified_memory") or ""))
    except ValueError as exc:
        raise DeployError(f"unified_memory: {exc}") from None
    memory = memory_of(host.get_fact(NvidiaGpus), host.get_fact(MemoryFact), unified)
    cache = f"{settings.flags['cache_type_k']},{settings.flags['cache_type_v']}"
    context = int(settings.flags.get("ctx_size") or 0)
    overhead = router.overhead_of(data)
    fits = []
    for model in models:
        head = host.get_fact(GgufHead, path=model.path, limit=router.HEAD_BYTES)
        if head is None:
            raise router.fail(f"{model.name}: {model.path} does not exist on {host.name}; copy the GGUF there first")
        if not host.get_fact(ReadableBy, path=model.path, user=settings.user):
            raise router.fail(f"{model.name}: {model.path} is not readable by the service user {settings.user} on "
                              f"{host.name}; make the file and its directories world-readable or group-readable by it")
        fits.append(router.fit_one(model, head[0], head[1], memory, context, cache, overhead))
    count, why = router.models_max(fits, memory)
    for fit in fits:
        logger.info(f"{host.print_prefix}llamacpp_models: {fit.line}")
    logger.info(f"{host.print_prefix}llamacpp_models: --models-max {count} ({why}); the others load on demand")
    return RouterPlan(tuple(models), tuple(fits), count, router.render_unit(settings, models, count))


def preset(p: RouterPlan, settings: Any) -> Any:
    """The preset file, root's and readable by the service's group only (it names the models' paths)."""
    path = router.preset_path(settings.service)
    files.directory(name=f"Directory of {path}", path=path.rsplit("/", 1)[0], user="root", group=settings.user,
                    mode="750")
    return files.put(name=f"Router models ({', '.join(p.names)}): {path}", src=StringIO(router.render_preset(p.models)),
                     dest=path, user="root", group=settings.user, mode="640")
