"""The suite's pyinfra runs forked from a pre-imported pyinfra (labwright.testing.pyinfra_fork), loaded from
tests/conftest.py.

Every ``subprocess.run`` in a test process that runs this venv's ``pyinfra`` (a deploy run, a dry run, a refusal)
goes to :func:`labwright.testing.pyinfra_fork.run`: the same pyinfra with the same argv, environment, directory and
streams, without its ~1 s of imports per run. Anything else, and every run when ``LABWRIGHT_TEST_PYINFRA_SPAWN=1``,
is spawned by subprocess.run itself. ``Popen`` is left alone (the tests that signal a pyinfra process they started,
or read it line by line, keep a real child of their own)."""

from __future__ import annotations

import subprocess

import pytest

from labwright.testing import pyinfra_fork


def pytest_configure(config: pytest.Config) -> None:
    subprocess.run = pyinfra_fork.run  # type: ignore[assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    subprocess.run = pyinfra_fork._spawn
