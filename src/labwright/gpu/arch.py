"""Compute capability -> which CUDA builds carry kernels for the GPU, as data: ``labwright/data/gpu-arch.toml``,
with its sources.

Pure: no host is touched. ``refuse_build`` is what the matrix calls with a stack's CUDA version and the GPU facts'
``compute_cap``: a Blackwell RTX 50 (12.0) with a CUDA 12.6 stack is refused, naming the stacks that would work.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from labwright.errors import BadInput

_CAPABILITY = re.compile(r"(?a)^\s*(?:sm_?)?(\d{1,2})\.?(\d)\s*$", re.IGNORECASE)
_CUDA = re.compile(r"(?a)^\s*(?:cu(?:da)?\s*)?(\d{1,2})(?:\.(\d{1,2}))?(?:\.\d+)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Architecture:
    capability: str  # "12.0"
    name: str  # "Blackwell (RTX 50, RTX PRO 6000)"
    min_cuda: str  # first toolkit with native kernels (sm_120)
    max_cuda: str | None  # last toolkit that still builds them (None: still supported)

    @property
    def sm(self) -> str:
        major, minor = self.capability.split(".")
        return f"sm_{major}{minor}"


def parse_capability(text: str) -> str:
    """``8.6``, ``86``, ``sm_86`` or ``sm86`` -> ``"8.6"``; ``12.0``/``sm_120`` -> ``"12.0"``."""
    match = _CAPABILITY.match(str(text))
    if not match:
        raise BadInput(f"compute capability {text!r}: not MAJOR.MINOR; give it as nvidia-smi "
                       "--query-gpu=compute_cap prints it (8.6, 12.0) or as sm_86")
    return f"{int(match.group(1))}.{match.group(2)}"


def parse_cuda(text: str) -> tuple[int, int | None]:
    """``12.8``, ``12.8.1`` and the wheel label ``cu128`` -> (12, 8); a major only (``12``, ``cu12``) -> (12, None)."""
    raw = str(text).strip()
    label = re.fullmatch(r"(?a)cu(\d{2})(\d)", raw, re.IGNORECASE)
    if label:
        return int(label.group(1)), int(label.group(2))
    match = _CUDA.match(raw)
    if not match:
        raise BadInput(f"CUDA version {text!r}: not MAJOR.MINOR (12.8) or a wheel label (cu128)")
    return int(match.group(1)), (int(match.group(2)) if match.group(2) is not None else None)


@cache
def table() -> dict[str, Architecture]:
    """Every known compute capability, from the package data ``labwright/data/gpu-arch.toml``."""
    data = tomllib.loads(resources.files("labwright.data").joinpath("gpu-arch.toml").read_text())
    return {cap: Architecture(cap, entry["architecture"], entry["min_cuda"], entry.get("max_cuda"))
            for cap, entry in data["capability"].items()}


@cache
def _models() -> tuple[tuple[re.Pattern[str], str], ...]:
    data = tomllib.loads(resources.files("labwright.data").joinpath("gpu-arch.toml").read_text())
    return tuple((re.compile(entry["pattern"], re.IGNORECASE), parse_capability(entry["capability"]))
                 for entry in data.get("model", ()))


def capability_from_name(name: str) -> str | None:
    """The compute capability of a GPU named as nvidia-smi names it ("NVIDIA GeForce RTX 3090" -> "8.6"), from the
    ``[[model]]`` rows of ``labwright/data/gpu-arch.toml``; None for a name no row matches (never guessed). For an
    nvidia-smi without the ``compute_cap`` field (the 470 branch: labwright.gpu.nvidia.smi)."""
    for pattern, capability in _models():
        if pattern.search(name):
            return capability
    return None


def architecture(capability: str) -> Architecture:
    cap = parse_capability(capability)
    known = table()
    if cap not in known:
        raise BadInput(f"compute capability {cap}: not in labwright/data/gpu-arch.toml (known: {', '.join(known)}); "
                       "add it there with the CUDA release that first supports it")
    return known[cap]


def _at_least(cuda: tuple[int, int | None], floor: str) -> bool:
    want = parse_cuda(floor)
    major, minor = cuda
    if minor is None:  # a major-only label ("12") cannot prove the minor: judged on the major alone
        return major >= want[0]
    return (major, minor) >= (want[0], want[1] or 0)


def _at_most(cuda: tuple[int, int | None], ceiling: str | None) -> bool:
    if ceiling is None:
        return True
    top = parse_cuda(ceiling)
    major, minor = cuda
    if minor is None:
        return major <= top[0]
    return (major, minor) <= (top[0], top[1] or 0)


def has_kernels(cuda: str, capability: str) -> bool:
    """Whether a build made with CUDA ``cuda`` can carry native kernels for ``capability``."""
    arch = architecture(capability)
    version = parse_cuda(cuda)
    return _at_least(version, arch.min_cuda) and _at_most(version, arch.max_cuda)


def why_not(cuda: str, capability: str) -> str | None:
    """None when a CUDA ``cuda`` build can run on the GPU, else the reason in one clause."""
    arch = architecture(capability)
    version = parse_cuda(cuda)
    if not _at_least(version, arch.min_cuda):
        return (f"{arch.name} ({arch.sm}, compute capability {arch.capability}) needs CUDA >= {arch.min_cuda} "
                f"builds; a CUDA {cuda} build has no kernels for it")
    if not _at_most(version, arch.max_cuda):
        return (f"CUDA {cuda} dropped {arch.name} ({arch.sm}); builds for it stop at CUDA {arch.max_cuda}")
    return None


def refusal(cuda: str, capability: str, *, what: str = "this build",
            alternatives: Iterable[tuple[str, str]] = ()) -> str | None:
    """None when ``what`` built with CUDA ``cuda`` has kernels for the GPU, else the one-line refusal: the reason and
    the ``alternatives`` ((name, cuda) pairs, e.g. the matrix's stacks) that do, or the CUDA range to look for."""
    reason = why_not(cuda, capability)
    if reason is None:
        return None
    arch = architecture(capability)
    usable = list(dict.fromkeys(name for name, alt in alternatives if why_not(alt, capability) is None))
    wanted = f"CUDA >= {arch.min_cuda}" + (f" and <= {arch.max_cuda}" if arch.max_cuda else "")
    named = ", ".join(usable[:-1]) + " or " + usable[-1] if len(usable) > 1 else "".join(usable)
    instead = (f"use {named} instead" if usable
               else f"use a {wanted} build instead (none of the known stacks is one)")
    return f"{what} (CUDA {cuda}) cannot run on this GPU: {reason}; {instead}"


def refuse_build(cuda: str, capability: str, *, what: str = "this build",
                 alternatives: Iterable[tuple[str, str]] = ()) -> None:
    """Raise BadInput when ``what`` (a stack, a wheel, a binary) built with CUDA ``cuda`` has no kernels for the GPU
    (the message as ``refusal`` words it)."""
    message = refusal(cuda, capability, what=what, alternatives=alternatives)
    if message is not None:
        raise BadInput(message)


def capabilities_of(gpus: Iterable[dict] | None) -> tuple[str, ...]:
    """The distinct compute capabilities in the ``NvidiaGpus`` fact (``[{"compute_cap": "8.6", ...}]``), in the
    table's spelling; GPUs whose driver cannot say (``None``) are left out, so no GPU facts means no check (pyinfra
    answers None for the whole fact on a host without nvidia-smi)."""
    found = (parse_capability(gpu["compute_cap"]) for gpu in gpus or () if gpu.get("compute_cap"))
    return tuple(sorted(set(found), key=lambda cap: tuple(int(x) for x in cap.split("."))))
