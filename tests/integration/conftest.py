"""Markers used by the integration tests (pytest runs with --strict-markers), and fixtures several of them share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labwright.lxd.client import LxdClient


def pytest_configure(config):
    # Registered here until pyproject's [tool.pytest.ini_options] lists it; both may coexist.
    config.addinivalue_line(
        "markers", "slow: builds real venvs, wheels and torch installs (minutes on a fresh machine); CI runs them")
    config.addinivalue_line(
        "markers", "vulkan_build: needs llama.cpp's Vulkan build (labwright build llamacpp --vulkan); cold, the test "
        "builds it in the lab's Debian 13 build box (~10 min on 2 idle cores, much more under load: docs/llamacpp.md); "
        "cached, nothing. -m 'not vulkan_build' leaves it out")
    config.addinivalue_line(
        "markers", "box_build: needs llama-server built in the lab's build boxes of other Debian releases (labwright "
        "build llamacpp --release CODENAME); cold, CPU builds in the trixie and bookworm boxes (~6 min each on 2 idle "
        "cores, 54 min each at load 18); warm, ~1 min. -m 'not box_build' leaves it out")


@pytest.fixture
def client(lab) -> Iterator[LxdClient]:
    """A client of the lab's LXD daemon for one test (a module's own `client` fixture takes precedence)."""
    c = LxdClient()
    yield c
    c.close()


@pytest.fixture
def names(lab) -> Iterator[list[str]]:
    """Append the name of every container a test makes: they are removed after it, whatever happened."""
    made: list[str] = []
    yield made
    for name in made:
        lab.remove(name)
