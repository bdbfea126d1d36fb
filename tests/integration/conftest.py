"""Markers used by the integration tests (pytest runs with --strict-markers)."""


def pytest_configure(config):
    # Registered here until pyproject's [tool.pytest.ini_options] lists it; both may coexist.
    config.addinivalue_line(
        "markers", "slow: builds real venvs, wheels and torch installs (minutes on a fresh machine); CI runs them")
