"""Shared fixtures: the real local LXD lab (see labwright.testing.lab_fixture)."""

import signal
from pathlib import Path

import pytest

from labwright.testing.pyinfra_output import tool_env

pytest_plugins = ["labwright.testing.lab_fixture", "support.parallel",  # parallel: xdist scheduling, shared locks
                  "support.report_fallback",  # a report CPython 3.11's ast bug would turn into an INTERNALERROR
                  "support.pyinfra_fork_plugin"]  # pyinfra runs forked from a pre-imported pyinfra (~1 s CPU less each)

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


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true", help="the unit tests and the tests marked smoke (one real "
                     "component each): the developers' loop, scripts/test --quick")


def pytest_configure(config):
    config.addinivalue_line("markers", "smoke: the one real-component test of its kind that --quick runs")
    from hypothesis import settings

    from support.hypothesis_budget import DEEP_DEFAULT, PROFILE, PROFILES

    if PROFILE not in PROFILES:
        raise pytest.UsageError(f"LABWRIGHT_HYPOTHESIS_PROFILE={PROFILE}: give one of {', '.join(PROFILES)}")
    # No deadline on any example: a test that times its examples fails under load for the time alone (CI-style run,
    # 2026-11-28: a dkms property example took 252 ms against hypothesis's default 200 ms, 15 ms when re-run).
    # Speed is held to in benchmarks/, never in a test (docs/testing.md).
    settings.register_profile("suite", deadline=None)
    settings.register_profile("deep", parent=settings.get_profile("suite"), max_examples=DEEP_DEFAULT)
    settings.load_profile("suite" if PROFILE == "default" else PROFILE)


def pytest_collection_modifyitems(config, items):
    if config.getoption("quick"):
        keep = [i for i in items if not i.nodeid.startswith("tests/integration/") or i.get_closest_marker("smoke")]
        if len(keep) != len(items):
            kept = {id(i) for i in keep}
            config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
            items[:] = keep

