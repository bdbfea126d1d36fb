"""Shared fixtures: the real local LXD lab (see labwright.testing.lab_fixture)."""

from pathlib import Path

import pytest

from labwright.testing.pyinfra_output import tool_env

pytest_plugins = ["labwright.testing.lab_fixture"]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for running the repo's commands (labwright, pyinfra) as subprocesses."""
    return tool_env()
