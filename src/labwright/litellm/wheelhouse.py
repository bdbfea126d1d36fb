"""A cached wheelhouse of litellm[proxy] for guests that cannot reach PyPI (or should not, every time).

    labwright wheelhouse litellm --python 3.11.2            # prints the directory
    pyinfra ... deploys/litellm.py --data litellm_find_links=/mnt/wheels   # after making it visible on the guest

Cached under ~/.cache/labwright/litellm/<version>-py<python>/. redis (a proxy dependency) needs async-timeout on
Python < 3.11.3 (Debian bookworm has 3.11.2), a marker pip does not evaluate for the target: it is added explicitly.
prometheus-client is added too (METRICS): LiteLLM's prometheus callback imports it (litellm 1.80.0's wheel,
litellm/integrations/prometheus.py lines 42 and 2209) but ``litellm[proxy]`` does not require it (the wheel's METADATA
has no ``Requires-Dist: prometheus-client``); the pin is the one LiteLLM's own requirements.txt gives for its proxy
("prometheus_client==0.20.0 # for /metrics endpoint on proxy"). docs/monitoring.md "LiteLLM".
"""

from __future__ import annotations

import sys
from pathlib import Path

from labwright.wheelhouse import cache_root, check_versions, download_wheelhouse

#: the gateway's /metrics (deploys/litellm.py, litellm_metrics): installed with the proxy whether or not it is on
METRICS = ["prometheus-client==0.20.0"]
EXTRA = ["async-timeout>=4.0.3", *METRICS]


def plan(version: str, python: str, root: Path | None = None) -> tuple[list[str], Path]:
    """The requirements and the cached directory of ``litellm[proxy]==version`` on CPython ``python``; BadInput for
    a version or Python that is not one."""
    check_versions("litellm", version, "1.80.0", python)
    return [f"litellm[proxy]=={version}", *EXTRA], (root or cache_root() / "litellm") / f"{version}-py{python}"


def wheelhouse(version: str, python: str, root: Path | None = None) -> Path:
    """The cached wheelhouse for ``litellm[proxy]==version`` on CPython ``python`` (e.g. 3.11.2), built if missing."""
    requirements, target = plan(version, python, root)
    return download_wheelhouse(requirements, python, target)


def main(argv: list[str] | None = None) -> int:
    """``python -m labwright.litellm.wheelhouse``: ``labwright wheelhouse litellm`` under its old name, with one
    deprecation line on stderr (kept for one release)."""
    from labwright.cli import main as cli_main
    from labwright.cli.vocab import deprecated

    deprecated("python -m labwright.litellm.wheelhouse", "labwright wheelhouse litellm")
    return cli_main(["wheelhouse", "litellm", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
