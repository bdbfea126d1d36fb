"""The suite's property tests time nothing: no example has a deadline (tests/conftest.py loads the "suite" profile).

A deadline fails a test under load for the time alone: a CI-style run (2026-11-28) failed
test_dkms_builds.py's property with 252 ms against hypothesis's default 200 ms, 15 ms when re-run. Speed is held to
in benchmarks/, never in a test."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parents[1]


def test_the_loaded_profile_has_no_deadline():
    assert settings().deadline is None


def test_no_test_sets_a_deadline_of_its_own():
    found = []
    for path in TESTS.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bdeadline\s*=\s*(?!None\b)[\w.(]", line) and "settings" in line:
                found.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    assert found == []
