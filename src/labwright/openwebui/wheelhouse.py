"""A cached wheelhouse of open-webui for guests that cannot reach PyPI (or should not, every time).

    labwright wheelhouse openwebui --python 3.11.2                 # prints the directory
    labwright wheelhouse openwebui --python 3.11.2 --torch-find-links DIR
    pyinfra ... deploys/openwebui.py --data openwebui_find_links=/mnt/openwebui-wheels   # once the guest sees it

Cached under ~/.cache/labwright/openwebui/<version>-py<python>/. open-webui pulls ~240 wheels; torch comes in through
sentence-transformers and accelerate. PyPI's Linux torch depends on NVIDIA's CUDA wheels (several GB);
``--torch-find-links`` takes a directory or index page holding a CPU torch wheel (PyTorch's
https://download.pytorch.org/whl/cpu/torch/, or a copy of it) and pip then picks that one, which keeps the
wheelhouse near 0.7 GB. Open WebUI as deployed never loads torch at start (no embedding model; docs/openwebui.md).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from labwright.errors import BadInput
from labwright.wheelhouse import cache_root, check_versions, download_wheelhouse

# redis (an open-webui dependency) needs async-timeout on Python < 3.11.3 (Debian bookworm has 3.11.2), a marker pip
# does not evaluate for the target Python: it is added explicitly (as for litellm's wheelhouse).
EXTRA = ["async-timeout>=4.0.3"]


def plan(version: str, python: str, root: Path | None = None, torch_find_links: str = "") -> tuple[list[str], Path]:
    """The requirements and the cached directory of ``open-webui==version`` on CPython ``python``; BadInput for a
    version, Python or --torch-find-links that is not one."""
    check_versions("open-webui", version, "0.12.4", python)
    if torch_find_links and not (re.match(r"^https?://", torch_find_links) or Path(torch_find_links).is_dir()):
        raise BadInput(f"--torch-find-links {torch_find_links!r}: not a directory or http(s) URL")
    return [f"open-webui=={version}", *EXTRA], (root or cache_root() / "openwebui") / f"{version}-py{python}"


def wheelhouse(version: str, python: str, root: Path | None = None, torch_find_links: str = "") -> Path:
    """The cached wheelhouse for ``open-webui==version`` on CPython ``python`` (e.g. 3.11.2), built if missing."""
    requirements, target = plan(version, python, root, torch_find_links)
    # Only the CPU torch page counts, never the machine's own PIP_FIND_LINKS: a local directory of wheels publishes
    # no sha256, so the hashed lock cannot pin what pip would take from it (this machine's PIP_FIND_LINKS=/opt/wheels
    # holds torch-2.13.0+cpu: the lock refused it and every Open WebUI test errored at setup, 2026-11-28).
    previous = os.environ.pop("PIP_FIND_LINKS", None)
    if torch_find_links:
        os.environ["PIP_FIND_LINKS"] = torch_find_links
    try:
        return download_wheelhouse(requirements, python, target)
    finally:
        os.environ.pop("PIP_FIND_LINKS", None)
        if previous is not None:
            os.environ["PIP_FIND_LINKS"] = previous


def main(argv: list[str] | None = None) -> int:
    """``python -m labwright.openwebui.wheelhouse``: ``labwright wheelhouse openwebui`` under its old name, with one
    deprecation line on stderr (kept for one release)."""
    from labwright.cli import main as cli_main
    from labwright.cli.vocab import deprecated

    deprecated("python -m labwright.openwebui.wheelhouse", "labwright wheelhouse openwebui")
    return cli_main(["wheelhouse", "openwebui", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
