"""Shared fixtures: the real local LXD lab (see labwright.testing.lab_fixture)."""

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["labwright.testing.lab_fixture"]

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for running the repo's commands (labwright, pyinfra) as subprocesses."""
    return {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}
