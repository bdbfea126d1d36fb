"""Build the agent into one zipapp, the same bytes for the same sources, and say where it lands on a host.

The archive holds ``labwright/__init__.py``, ``labwright/errors.py``, ``labwright/guestlock.py`` (the run lock: its
top level is standard library only, for the guest) and every module of ``labwright/agent/``, plus a ``__main__.py``
that runs ``labwright.agent.__main__.main``. Entries are sorted, with fixed times and modes, so
its sha256 depends on the sources alone: the controller knows it before it looks at a host, names the file on the
host after it, and a host that already holds that file is not sent it again.

The controller's copy under the cache (``local_file``) is a cache, never trusted for being there: its bytes are
compared with the agent's and anything else is written again; something there that is no file (a directory, a link
loop) is one BadInput line naming it (``read_cached``, which the stack bundle's cache uses too).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import zipfile
from functools import lru_cache
from pathlib import Path

from labwright.errors import BadInput

REMOTE_DIR = "/usr/local/lib/labwright"
MAIN = "import sys\n\nfrom labwright.agent.__main__ import main\n\nsys.exit(main(sys.argv[1:]))\n"
FIXED_TIME = (2026, 1, 1, 0, 0, 0)
_PACKAGE = Path(__file__).resolve().parents[1]  # src/labwright


def sources() -> list[tuple[str, Path]]:
    """(archive name, source file) for everything the agent holds, sorted."""
    files = [(f"labwright/{name}", _PACKAGE / name) for name in ("__init__.py", "errors.py", "guestlock.py")]
    agent = _PACKAGE / "agent"
    files += [(f"labwright/agent/{path.name}", path) for path in agent.iterdir() if path.suffix == ".py"]
    return sorted(files)


def build(files: list[tuple[str, bytes]] | None = None) -> bytes:
    """The zipapp's bytes for ``files`` ((archive name, content); default: the agent's own sources)."""
    if files is None:
        files = [(name, path.read_bytes()) for name, path in sources()]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [("__main__.py", MAIN.encode()), *sorted(files)]:
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


@lru_cache(maxsize=1)
def agent() -> tuple[bytes, str]:
    """This labwright's agent: (zipapp bytes, sha256 hex)."""
    data = build()
    return data, hashlib.sha256(data).hexdigest()


def sha256() -> str:
    """This labwright's agent's sha256 (hex)."""
    return agent()[1]


def remote_path(sha256: str | None = None) -> str:
    """Where the agent with ``sha256`` (default: this labwright's) lands on a host: root's, 0644 in a 0755 dir."""
    return f"{REMOTE_DIR}/agent-{(sha256 or agent()[1])[:12]}.pyz"


def local_file(cache: Path) -> Path:
    """The agent as a file under ``cache`` (what pyinfra's upload reads): used when its bytes are the agent's, else
    written again (atomically, no temporary file left on any failure); a directory or link loop there is BadInput."""
    data, sha = agent()
    target = cache / f"agent-{sha[:12]}.pyz"
    kept = read_cached(target, "the agent zipapp", max_bytes=len(data))
    if kept is None or hashlib.sha256(kept).hexdigest() != sha:
        write_cached(target, data, "the agent zipapp")
    return target


#: What to do about something in a cache file's place that is no file: labwright makes the file again once it is gone.
CACHE_FIX = "remove it and run again (labwright builds it anew)"


def read_cached(path: Path, what: str, *, max_bytes: int, fix: str = CACHE_FIX,
                kind_of_file: str = "a cache file") -> bytes | None:
    """The bytes of the file ``path`` (``what`` labwright made there, ``kind_of_file``), or None where there is none
    (a dangling link included) or one longer than ``max_bytes`` (not what was made: made again). Something there that
    is no regular file (a directory, a link loop, a device, a pipe) or cannot be read is one BadInput line naming it
    and ``fix``."""
    expected = f"{what}, {kind_of_file}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a pipe must not block the open
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadInput(describe_cache_error(path, exc, expected, fix)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise BadInput(f"{path} is {kind} (expected {expected}); {fix}")
    with open(fd, "rb") as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise BadInput(describe_cache_error(path, exc, expected, fix)) from None
    return data if len(data) <= max_bytes else None


def write_cached(path: Path, data: bytes, what: str) -> None:
    """Put ``data`` at ``path`` atomically (a temporary file beside it, fsynced, renamed over it; the temporary file
    is removed on every failure), or one BadInput line naming ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = Path(exc.filename or path.parent)
        raise BadInput(describe_cache_error(where, exc, f"a directory for {what}")) from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise BadInput(describe_cache_error(path, exc, f"{what}, a cache file")) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def describe_cache_error(path: Path, exc: OSError, expected: str, otherwise: str = CACHE_FIX) -> str:
    """One line for an OSError at the cache file (or directory) ``path``: the path, the reason, the fix."""
    reason = exc.strerror or type(exc).__name__
    fix = {errno.ENOSPC: "free space there and run again",
           errno.EROFS: "set LABWRIGHT_CACHE to a writable directory and run again"}.get(exc.errno or 0, otherwise)
    return f"{path}: {reason[:1].lower() + reason[1:]} (expected {expected}); {fix}"
