"""A pytest plugin for ``labwright verify --json``: each test's outcome, written as one JSON document to the file
named by ``LABWRIGHT_VERIFY_REPORT`` when the session ends (loaded with ``-p labwright.verify.report``).

One entry per test (its nodeid): ``passed``, ``failed``, ``skipped``, ``error`` (its setup or teardown failed, or
its file could not be collected), ``xfailed`` or ``xpassed``, with the seconds its call took and, for anything but
a pass, the one line pytest gives as the reason.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

ENV = "LABWRIGHT_VERIFY_REPORT"
OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")

_tests: dict[str, dict[str, Any]] = {}


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or (str(longrepr) if longrepr else "")
    if getattr(report, "wasxfail", ""):
        text = text or str(report.wasxfail)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " ".join(lines[:3])[:500]


def _outcome(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when != "call" and report.failed:
        return "error"
    return str(report.outcome)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "seconds": 0.0,
                                              "reason": ""})
    outcome = _outcome(report)
    if report.when == "call":
        entry["seconds"] = round(report.duration, 3)
    # setup decides first (a skip or an error there: the call does not run); the call then; a teardown that fails
    # turns a pass into an error
    if report.when == "teardown" and (outcome != "error" or entry["outcome"] != "passed"):
        return
    if report.when == "call" and entry["outcome"] != "passed":
        return
    entry["outcome"] = outcome
    if outcome != "passed":
        entry["reason"] = _reason(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _tests[report.nodeid or "<collection>"] = {"nodeid": report.nodeid or "<collection>", "outcome": "error",
                                                   "seconds": 0.0, "reason": _reason(report)}


def document(tests: list[dict[str, Any]]) -> dict[str, Any]:
    totals = {outcome: 0 for outcome in OUTCOMES}
    for test in tests:
        totals[test["outcome"]] = totals.get(test["outcome"], 0) + 1
    return {"tests": tests, "totals": totals}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "w", encoding="utf-8") as out:
        json.dump(document(list(_tests.values())), out)
