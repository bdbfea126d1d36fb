"""The backend interface every guest backend implements, and the dispatch from a spec to its backend.

A backend instance talks to one endpoint (one LXD daemon, one Proxmox cluster) and serves every
guest of that endpoint, so a run over many guests reuses one connection (see ``BackendPool``).

Contract (tests hold both backends to it):
- ``plan(spec)`` reads only; it raises ``BadInput`` for what the host refuses up front (unknown
  node, missing template, no NVIDIA driver for ``gpu: nvidia``) and returns a ``Plan``.
- ``apply(spec)`` makes the host match and returns the changes it made: an empty list, and no
  write request at all, when nothing differs. A failed create removes what it made.
- ``start``/``stop``/``destroy`` return the changes made (empty when already so).
- ``show(spec)`` returns a JSON-able dict: at least ``name``, ``backend``, ``exists``, ``status``.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

from labwright.errors import OperationFailed
from labwright.guests.model import Change, GuestSpec, Plan


class GuestBackend(ABC):
    """One endpoint's guests. Subclasses provide ``for_spec`` to build themselves from a spec's data."""

    #: "lxd" or "proxmox"; matches ``GuestSpec.backend``.
    name: str = ""

    @classmethod
    @abstractmethod
    def for_spec(cls, spec: GuestSpec, **options: Any) -> GuestBackend:
        """Build the backend serving ``spec`` (endpoint from ``spec.node``, ``spec.host_data``/``node_data``).
        Options another backend takes (``BackendPool`` passes the same to all) must be accepted and ignored."""

    @abstractmethod
    def plan(self, spec: GuestSpec) -> Plan: ...

    @abstractmethod
    def apply(self, spec: GuestSpec) -> list[Change]: ...

    @abstractmethod
    def show(self, spec: GuestSpec) -> dict[str, Any]: ...

    @abstractmethod
    def start(self, spec: GuestSpec) -> list[Change]: ...

    @abstractmethod
    def stop(self, spec: GuestSpec) -> list[Change]: ...

    @abstractmethod
    def destroy(self, spec: GuestSpec) -> list[Change]: ...

    def exists(self, spec: GuestSpec) -> bool:
        """Whether the guest exists (cheap; backends may override the default, which calls ``show``)."""
        return bool(self.show(spec).get("exists"))

    def close(self) -> None:  # noqa: B027 - optional hook; most backends hold nothing to release
        """Release connections."""


#: Backend name -> (module, class). The module is imported on first use so LXD users never import proxmoxer.
BACKEND_CLASSES: dict[str, tuple[str, str]] = {
    "lxd": ("labwright.guests.lxd", "LxdBackend"),
    "proxmox": ("labwright.guests.proxmox", "ProxmoxBackend"),
}


def backend_class(backend: str) -> type[GuestBackend]:
    module_name, class_name = BACKEND_CLASSES[backend]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        module = None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise OperationFailed(f"the {backend} guest backend is not available yet in this labwright; "
                              f"select other guests with --guest")
    return cls


def backend_for(spec: GuestSpec, **options: Any) -> GuestBackend:
    """A fresh backend for ``spec``. ``options`` go to the backend (e.g. ``client=`` or ``gpu_host=``)."""
    return backend_class(spec.backend).for_spec(spec, **options)


class BackendPool:
    """Backends shared per endpoint for a run over many guests; ``close()`` releases them all."""

    def __init__(self, **options: Any):
        self.options = options
        self._backends: dict[tuple[str, str | None], GuestBackend] = {}

    def get(self, spec: GuestSpec) -> GuestBackend:
        key = spec.backend_key
        if key not in self._backends:
            self._backends[key] = backend_for(spec, **self.options)
        return self._backends[key]

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()

    def __enter__(self) -> BackendPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
