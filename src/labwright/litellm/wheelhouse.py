"""A cached wheelhouse of litellm[proxy] for guests that cannot reach PyPI (or should not, every time).

    python -m labwright.litellm.wheelhouse --python 3.11.2            # prints the directory
    pyinfra ... deploys/litellm.py --data litellm_find_links=/mnt/wheels   # after making it visible on the guest

Cached under ~/.cache/labwright/litellm/<version>-py<python>/. redis (a proxy dependency) needs async-timeout on
Python < 3.11.3 (Debian bookworm has 3.11.2), a marker pip does not evaluate for the target: it is added explicitly.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from labwright.litellm.config import load_defaults
from labwright.wheelhouse import cache_root, check_versions, cli, download_wheelhouse

EXTRA = ["async-timeout>=4.0.3"]


def wheelhouse(version: str, python: str, root: Path | None = None) -> Path:
    """The cached wheelhouse for ``litellm[proxy]==version`` on CPython ``python`` (e.g. 3.11.2), built if missing."""
    check_versions("litellm", version, "1.80.0", python)
    target = (root or cache_root() / "litellm") / f"{version}-py{python}"
    return download_wheelhouse([f"litellm[proxy]=={version}", *EXTRA], python, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (or find) the cached litellm[proxy] wheelhouse.")
    parser.add_argument("--version", default=str(load_defaults()["service"]["version"]),
                        help="litellm release (default: the deploy's pin)")
    parser.add_argument("--python", required=True, help="the guest's Python version, e.g. 3.11.2")
    args = parser.parse_args(argv)
    return cli(lambda: wheelhouse(args.version, args.python))


if __name__ == "__main__":
    raise SystemExit(main())
