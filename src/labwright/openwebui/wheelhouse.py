"""A cached wheelhouse of open-webui for guests that cannot reach PyPI (or should not, every time).

    python -m labwright.openwebui.wheelhouse --python 3.11.2                 # prints the directory
    python -m labwright.openwebui.wheelhouse --python 3.11.2 --torch-find-links DIR
    pyinfra ... deploys/openwebui.py --data openwebui_find_links=/mnt/openwebui-wheels   # once the guest sees it

Cached under ~/.cache/labwright/openwebui/<version>-py<python>/. open-webui pulls ~240 wheels; torch comes in through
sentence-transformers and accelerate. PyPI's Linux torch depends on NVIDIA's CUDA wheels (several GB);
``--torch-find-links`` takes a directory or index page holding a CPU torch wheel (PyTorch's
https://download.pytorch.org/whl/cpu/torch/, or a copy of it) and pip then picks that one, which keeps the
wheelhouse near 0.7 GB. Open WebUI as deployed never loads torch at start (no embedding model; docs/openwebui.md).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from labwright.errors import BadInput
from labwright.openwebui.config import load_defaults
from labwright.wheelhouse import cache_root, check_versions, cli, download_wheelhouse

# redis (an open-webui dependency) needs async-timeout on Python < 3.11.3 (Debian bookworm has 3.11.2), a marker pip
# does not evaluate for the target Python: it is added explicitly (as for litellm's wheelhouse).
EXTRA = ["async-timeout>=4.0.3"]


def wheelhouse(version: str, python: str, root: Path | None = None, torch_find_links: str = "") -> Path:
    """The cached wheelhouse for ``open-webui==version`` on CPython ``python`` (e.g. 3.11.2), built if missing."""
    check_versions("open-webui", version, "0.12.4", python)
    if torch_find_links and not (re.match(r"^https?://", torch_find_links) or Path(torch_find_links).is_dir()):
        raise BadInput(f"--torch-find-links {torch_find_links!r}: not a directory or http(s) URL")
    target = (root or cache_root() / "openwebui") / f"{version}-py{python}"
    previous = os.environ.get("PIP_FIND_LINKS")
    if torch_find_links:
        os.environ["PIP_FIND_LINKS"] = " ".join(filter(None, [previous, torch_find_links]))
    try:
        return download_wheelhouse([f"open-webui=={version}", *EXTRA], python, target)
    finally:
        if torch_find_links:
            if previous is None:
                os.environ.pop("PIP_FIND_LINKS", None)
            else:
                os.environ["PIP_FIND_LINKS"] = previous


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (or find) the cached open-webui wheelhouse.")
    parser.add_argument("--version", default=str(load_defaults()["service"]["version"]),
                        help="open-webui release (default: the deploy's pin)")
    parser.add_argument("--python", required=True, help="the guest's Python version, e.g. 3.11.2")
    parser.add_argument("--torch-find-links", default="",
                        help="a directory or URL with a CPU torch wheel (else PyPI's CUDA torch and its NVIDIA wheels)")
    args = parser.parse_args(argv)
    return cli(lambda: wheelhouse(args.version, args.python, torch_find_links=args.torch_find_links))


if __name__ == "__main__":
    raise SystemExit(main())
