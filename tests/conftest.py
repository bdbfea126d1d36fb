"""Shared fixtures: the real local LXD lab (see labwright.testing.lab_fixture)."""

import signal
from pathlib import Path

import pytest

from labwright.testing.pyinfra_output import tool_env

pytest_plugins = ["labwright.testing.lab_fixture"]

REPO = Path(__file__).resolve().parent.parent

# A harness that starts the suite in the background without job control (`cmd &` in a script, nohup) hands it SIGINT
# ignored, and an ignored signal stays ignored across exec: the tests that send a real Ctrl-C (SIGINT) to labwright
# would then see nothing happen. Python's own handler here means every child starts with SIGINT at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for running the repo's commands (labwright, pyinfra) as subprocesses."""
    return tool_env()
