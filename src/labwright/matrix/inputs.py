"""Parse what a user types for torch, CUDA, Python, driver and pins: one BadInput line naming the input and the fix."""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from labwright.errors import BadInput
from labwright.matrix.wheelname import cuda_from_label

PLATFORMS = ("linux_x86_64", "linux_aarch64", "win_amd64")


def parse_torch(text: str) -> Version:
    """`2.11.0`, `2.11` (newest 2.11.x) or `2.11.0+cu130` (the label also names the CUDA)."""
    try:
        version = Version(text.strip())
    except InvalidVersion:
        raise BadInput(f"--torch {text!r} is not a torch version: give one like 2.11.0") from None
    if len(version.release) < 2:
        raise BadInput(f"--torch {text!r} needs at least major.minor: give one like 2.11.0")
    return version


def parse_cuda(text: str) -> str:
    """`13.0`, `13`, `cu130` -> `13.0` / `13`."""
    raw = text.strip().lower()
    if re.fullmatch(r"(?a)cu\d{2,4}", raw):
        return cuda_from_label(raw[2:])
    if re.fullmatch(r"(?a)\d{1,2}(\.\d{1,2})?", raw):
        major, _, minor = raw.partition(".")
        return f"{int(major)}.{int(minor)}" if minor else str(int(major))
    raise BadInput(f"--cuda {text!r} is not a CUDA version: give one like 13.0 (or cu130)")


def parse_python(text: str) -> str:
    """`3.12`, `3.14t` (free-threaded), `cp312` -> `3.12`."""
    raw = text.strip().lower()
    match = re.fullmatch(r"(?a)(?:cp3(\d{1,2})|3\.(\d{1,2})(?:\.\d+)?)(t?)", raw)
    if not match:
        raise BadInput(f"--python {text!r} is not a CPython version: give one like 3.12")
    return f"3.{int(match[1] or match[2])}{match[3]}"


def parse_driver(text: str) -> tuple[int, ...]:
    """`580.65.06` -> (580, 65, 6)."""
    if not re.fullmatch(r"(?a)\d{2,4}(\.\d{1,3}){0,2}", text.strip()):
        raise BadInput(f"--driver {text!r} is not an NVIDIA driver version: give one like 580.65.06 (nvidia-smi)")
    return tuple(int(p) for p in text.strip().split("."))


def driver_at_least(driver: tuple[int, ...], floor: str) -> bool:
    wanted = tuple(int(p) for p in floor.split("."))
    width = max(len(driver), len(wanted))
    return driver + (0,) * (width - len(driver)) >= wanted + (0,) * (width - len(wanted))


def parse_pin(text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0]
        raise BadInput(f"--pin {text!r} is not a requirement ({first}): write one like exllamav3==0.0.37") from None


def parse_platform(text: str) -> str:
    if text not in PLATFORMS:
        raise BadInput(f"--platform {text!r} is unknown: use one of {', '.join(PLATFORMS)}")
    return text
