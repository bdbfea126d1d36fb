"""Get every wheel of a plan onto local disk and check its sha256 before anything is installed (stdlib only).

A wheel from a local wheelhouse is hashed where it lies; a URL is streamed into the new environment's
``wheels/`` directory, hashed on the way. Every wheel carries the sha256 the matrix recorded from its index or
release (a plan without one is refused before anything is fetched); one that differs stops the switch here, long
before the running stack could be touched. A download is a progress
step on stderr (labwright.ui): megabytes of the total and the rate while it comes, the size, time and rate at the end.
"""

from __future__ import annotations

import errno
import hashlib
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labwright import ui
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.stacks.plan import PlannedWheel
from labwright.textio import ascii_digits

CHUNK = 1 << 20
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LocalWheel:
    wheel: PlannedWheel
    path: Path
    sha256: str
    size: int
    checked: bool  # True when the matrix knew the sha256 and it matched


class NoSpace(OperationFailed):
    """The disk filled up while building (ENOSPC): the caller names the directory and cleans up."""


def sha256_of(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def fetch_all(wheels: tuple[PlannedWheel, ...], download_dir: Path,
              log: Callable[[str], None] = lambda _: None) -> list[LocalWheel]:
    return [fetch(wheel, download_dir, log) for wheel in wheels]


def fetch(wheel: PlannedWheel, download_dir: Path, log: Callable[[str], None]) -> LocalWheel:
    if not wheel.sha256:
        # Never hashed on arrival: a hash taken from the file itself proves nothing about where it came from.
        raise BadInput(f"{wheel.filename}: no sha256 in the plan (from {wheel.source}): record it with `labwright "
                       "matrix refresh` and plan again; nothing was downloaded")
    if wheel.source.startswith("file://"):
        path = Path(urllib.parse.unquote(urllib.parse.urlparse(wheel.source).path))
        sha, size = _local(wheel, path)
    elif wheel.is_url:
        path = download_dir / wheel.filename
        sha, size = _download(wheel, path, log)
    else:
        path = Path(wheel.source)
        sha, size = _local(wheel, path)
    if wheel.sha256 and sha != wheel.sha256:
        raise SafetyCheckFailed(f"{wheel.filename}: sha256 is {sha}, the matrix says {wheel.sha256} (from "
                                f"{wheel.source}): the file is not the one recorded; nothing was installed, the "
                                "running stack is untouched")
    return LocalWheel(wheel=wheel, path=path, sha256=sha, size=size, checked=bool(wheel.sha256))


def local_path(wheel: PlannedWheel) -> Path | None:
    """Where a wheel lies on this host (a wheelhouse path or a file:// URL); None for a download."""
    if wheel.source.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(wheel.source).path))
    return None if wheel.is_url else Path(wheel.source)


def check_local_source(wheel: PlannedWheel) -> None:
    """Refuse a wheel that should lie on this host and does not (before anything is written)."""
    path = local_path(wheel)
    if path is not None:
        _check_file(wheel, path)


def _check_file(wheel: PlannedWheel, path: Path) -> None:
    if not path.is_file():
        where = path.parent
        hint = (f"put {wheel.filename} there" if where.is_dir()
                else f"the wheelhouse {where} does not exist on this host")
        raise BadInput(f"{wheel.package} {wheel.version}: {path} not found; {hint} (or drop --wheelhouse to "
                       "download it)")


def _local(wheel: PlannedWheel, path: Path) -> tuple[str, int]:
    _check_file(wheel, path)
    return sha256_of(path)


def _download(wheel: PlannedWheel, path: Path, log: Callable[[str], None]) -> tuple[str, int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    log(f"download {wheel.source}")
    digest = hashlib.sha256()
    request = urllib.request.Request(wheel.source, headers={"User-Agent": "labwright-stack-switch"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response, open(path, "wb") as out, \
                ui.progress(f"download {wheel.filename}") as step:
            length = response.headers.get("Content-Length")
            total = int(length) if length and ascii_digits(length) else None
            size = ui.copy_with_progress(response, out, step, total=total, chunk=CHUNK, each=digest.update)
    except urllib.error.HTTPError as exc:
        raise BadInput(f"{wheel.package} {wheel.version}: {wheel.source} answered HTTP {exc.code} {exc.reason}; "
                       "the matrix row is stale: refresh it (labwright matrix refresh) or pass --wheelhouse with "
                       "the file") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, OSError) and reason.errno == errno.ENOSPC:
            raise NoSpace(str(reason)) from None
        raise OperationFailed(f"{wheel.package} {wheel.version}: cannot download {wheel.source} ({reason}); "
                              "check the network or pass --wheelhouse with the file") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise NoSpace(str(exc)) from None
        raise OperationFailed(f"{wheel.package} {wheel.version}: download of {wheel.source} failed ({exc}); "
                              "try again or pass --wheelhouse with the file") from None
    return digest.hexdigest(), size


def free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free
