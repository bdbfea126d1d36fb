"""deploys/litellm.py's check after the install, run by sh: a venv still without prometheus_client (a wheelhouse made
before labwright added it) stops the deploy in one line instead of a proxy that stops at every start."""

from __future__ import annotations

import subprocess
from pathlib import Path

from labwright.deploys.litellm import metrics_client_check


def venv_with(tmp_path: Path, importable: bool) -> Path:
    """A stand-in venv whose python answers ``import prometheus_client`` as a venv with or without it does."""
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    missing = "echo \"ModuleNotFoundError: No module named 'prometheus_client'\" >&2; exit 1\n"
    python.write_text("#!/bin/sh\n" + ("exit 0\n" if importable else missing))
    python.chmod(0o755)
    return tmp_path


def test_a_venv_without_prometheus_client_is_one_line(tmp_path):
    venv = venv_with(tmp_path, importable=False)
    result = subprocess.run(["sh", "-c", metrics_client_check(str(venv), "/mnt/wheels")], capture_output=True,
                            text=True)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"litellm_metrics: prometheus-client is not in {venv} after the install from /mnt/wheels "
                             "(a wheelhouse made before labwright added it to the lock): make the wheelhouse again "
                             "(labwright wheelhouse litellm --python VERSION), or set litellm_metrics=false (the "
                             "service was not restarted)\n")


def test_a_venv_with_it_is_quiet(tmp_path):
    result = subprocess.run(["sh", "-c", metrics_client_check(str(venv_with(tmp_path, importable=True)), "PyPI")],
                            capture_output=True, text=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
