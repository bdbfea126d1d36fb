"""A cached wheelhouse of litellm[proxy] for guests that cannot reach PyPI (or should not, every time).

    python -m labwright.litellm.wheelhouse --python 3.11.2            # prints the directory
    pyinfra ... deploys/litellm.py --data litellm_find_links=/mnt/wheels   # after making it visible on the guest

Cached under ~/.cache/labwright/litellm/<version>-py<python>/. redis (a proxy dependency) needs async-timeout on
Python < 3.11.3 (Debian bookworm has 3.11.2), a marker pip does not evaluate for the target: it is added explicitly.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from labwright.errors import BadInput, LabwrightError
from labwright.litellm.config import load_defaults
from labwright.wheelhouse import cache_root, download_wheelhouse

EXTRA = ["async-timeout>=4.0.3"]


def wheelhouse(version: str, python: str, root: Path | None = None) -> Path:
    """The cached wheelhouse for ``litellm[proxy]==version`` on CPython ``python`` (e.g. 3.11.2), built if missing."""
    if not re.fullmatch(r"\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?", version):
        raise BadInput(f"--version {version!r}: not a litellm release, e.g. 1.80.0")
    if not re.fullmatch(r"3\.\d{1,2}(\.\d{1,3})?", python):
        raise BadInput(f"--python {python!r}: not a CPython 3 version; give the guest's, e.g. 3.11.2")
    target = (root or cache_root() / "litellm") / f"{version}-py{python}"
    return download_wheelhouse([f"litellm[proxy]=={version}", *EXTRA], python, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (or find) the cached litellm[proxy] wheelhouse.")
    parser.add_argument("--version", default=str(load_defaults()["service"]["version"]),
                        help="litellm release (default: the deploy's pin)")
    parser.add_argument("--python", required=True, help="the guest's Python version, e.g. 3.11.2")
    args = parser.parse_args(argv)
    try:
        print(wheelhouse(args.version, args.python))
    except LabwrightError as exc:
        print(f"labwright: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("labwright: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
