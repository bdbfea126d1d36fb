"""Build the agent into one zipapp, the same bytes for the same sources, and say where it lands on a host.

The archive holds ``labwright/__init__.py``, ``labwright/errors.py``, ``labwright/guestlock.py`` (the run lock: its
top level is standard library only, for the guest) and every module of ``labwright/agent/``, plus a ``__main__.py``
that runs ``labwright.agent.__main__.main``. Entries are sorted, with fixed times and modes, so
its sha256 depends on the sources alone: the controller knows it before it looks at a host, names the file on the
host after it, and a host that already holds that file is not sent it again.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from functools import lru_cache
from pathlib import Path

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
    """The agent as a file under ``cache`` (what pyinfra's upload reads), written once per sha256."""
    data, sha = agent()
    target = cache / f"agent-{sha[:12]}.pyz"
    if not target.is_file() or hashlib.sha256(target.read_bytes()).hexdigest() != sha:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return target
