"""The built wheel works installed anywhere (issue 14): scripts/wheel-check builds it, installs it with pip into a
clean venv, with `uv tool install` and with `pipx` outside the checkout, and runs the smoke set from another
directory (packaged matrix, templates, verify suites, deploy modules, pyinfra connectors). Downloads from PyPI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "wheel-check"


@pytest.mark.skipif(shutil.which("bash") is None, reason="scripts/wheel-check is bash")
def test_wheel_installs_and_works_from_another_directory(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    run = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    output = run.stdout + run.stderr
    print(output)  # the timings, in pytest's captured output (-rP shows them)
    assert run.returncode == 0, output[-3000:]
    assert "wheel-check passed (pip uv pipx)" in output, output[-3000:]
