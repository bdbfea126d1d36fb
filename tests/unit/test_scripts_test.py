"""scripts/test's own input: the worker count from LABWRIGHT_TEST_WORKERS is checked before anything is installed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
GOOD = re.compile(r"^[1-9][0-9]?$")


def run(command: list[str], workers: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LABWRIGHT_TEST_WORKERS": workers}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=8),
                 st.integers(min_value=-5, max_value=200).map(str)))
def test_a_worker_count_that_is_not_1_to_99_is_one_line_exit_2(workers):
    if GOOD.match(workers) or workers == "":
        # a good value goes on to set-up and pytest: only the script's own check is run here (empty: the default)
        check = run(["bash", "-c", 'set -eu; source <(sed -n "/^workers=/,/^fi$/p" scripts/test); echo "ok $workers"'],
                    workers)
        assert check.returncode == 0 and check.stdout == f"ok {workers or 4}\n", check
        return
    result = run([str(REPO / "scripts" / "test")], workers)  # the real script: it stops before installing anything
    assert result.returncode == 2 and result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("✗ test: LABWRIGHT_TEST_WORKERS=") and "set 1-99" in lines[0], lines


def test_a_test_that_waits_for_ever_is_failed_by_the_suites_own_bound(tmp_path):
    """pyproject's [tool.pytest.ini_options] timeout (pytest-timeout) holds in xdist workers too: a test blocked on
    something that never comes fails with its stack, and the run goes on to the next test."""
    import sys
    import tomllib

    bound = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"]
    assert 60 <= int(bound) <= 3600
    (tmp_path / "test_stuck.py").write_text(
        "import threading\n\n"
        "def test_waits_for_ever():\n    threading.Event().wait()\n\n"
        "def test_after_it():\n    assert True\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 1\n")  # the suite's key, at a bound a test can wait
    for parallel in ([], ["-n", "2"]):
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel,
                              str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 1, run.stdout[-2000:]
        assert "Timeout" in run.stdout and "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
