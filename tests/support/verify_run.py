"""Run a shipped verify suite (labwright/verify/test_NAME.py) in a subprocess, with the plugins it runs with.

A user's ``labwright[verify]`` brings pytest and pytest-testinfra. This venv also holds the development plugins
pytest loads from their entry points at every start (hypothesis, anyio, xdist, typeguard): none of them takes part in
a verify run, yet they were most of its start-up: ``pytest --co`` of test_base.py took 1.42 s of CPU with every
plugin, 0.30 s with testinfra and pytest-timeout alone; a whole verify of a deployed base guest 2.25-2.53 s of CPU
before, 1.05-1.15 s after (3 runs each, the 2-core test machine at load 17-22). So the suite starts with entry-point
autoloading off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) and names testinfra's plugin, plus pytest-timeout because this
repository's pytest settings (``timeout``, ``-ra``), which apply to the run as before, name it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from labwright.paths import verify_suite
from labwright.testing.pyinfra_output import tool_env

REPO = Path(__file__).resolve().parents[2]
#: testinfra's pytest plugin (its ``pytest11`` entry point), and pytest-timeout for the repository's ``timeout``.
PLUGINS = ("-p", "testinfra.plugin", "-p", "pytest_timeout")


def verify_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`tool_env` with pytest's plugin autoloading off and ``extra`` added."""
    return {**tool_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(extra or {})}


def run_verify(suite: str, host: str, *options: str, env: Mapping[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m pytest -p testinfra.plugin -p pytest_timeout labwright/verify/test_SUITE.py --hosts=HOST -q -p
    no:cacheprovider OPTIONS`` from the repository, plugin autoloading off (see the module docstring); stdout and
    stderr captured."""
    cmd = [sys.executable, "-m", "pytest", *PLUGINS, str(verify_suite(suite)), f"--hosts={host}", "-q",
           "-p", "no:cacheprovider", *options]
    return subprocess.run(cmd, cwd=REPO, env=verify_env(env), capture_output=True, text=True, timeout=timeout)
