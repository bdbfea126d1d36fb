"""labwright's readers of ``pct`` output against recorded outputs of the real tool (tests/conformance/pct/).

Each case is one TOML file: where the output comes from (upstream project, version, commit, file, lines),
the command, its exit code, stdout and stderr, and what labwright must make of it. The connector's
transfer check must see every failure pct reports, and must report none for a silent failure, which
only size-and-sha256 verification can catch (tests/integration/test_pct_connector.py).
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright.connectors.pct_commands import (
    CT_SCRIPT_TOOLS,
    parse_pct_status,
    pct_says_missing,
    pct_says_not_running,
    pct_task_warnings,
    pct_transfer_failure,
)

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "pct"
CASES = sorted(CASES_DIR.glob("*.toml"))
KNOWN_EXPECTATIONS = {"status", "missing", "not_running", "transfer_failure", "warnings", "exec_path", "note"}


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def test_every_failure_mode_the_source_shows_is_recorded():
    names = {path.stem for path in CASES}
    assert {"status-running", "status-stopped", "status-missing-ct", "push-ok", "push-copy-failed-silently",
            "push-missing-directory", "push-stopped-ct", "pull-ok", "pull-missing-file", "pull-copy-failed-silently",
            "pull-stopped-ct", "exec-stopped-ct", "exec-stopped-ct-before-4.0-2", "exec-path", "task-warnings",
            "task-error"} <= names


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case_names_its_upstream_source(path):
    case = load(path)
    sources = case["provenance"]["sources"]
    assert sources, path
    for source in sources:
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
        assert source["project"] and source["version"] and source["file"] and source["lines"], source
    assert set(case["expect"]) <= KNOWN_EXPECTATIONS, set(case["expect"]) - KNOWN_EXPECTATIONS
    assert set(case["expect"]) - {"note"}, f"{path.name} checks nothing"


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_labwright_reads_the_recorded_output(path):
    case = load(path)
    run, expect = case["run"], case["expect"]
    code, stdout, stderr = run["exit"], run["stdout"], run["stderr"]
    if "status" in expect:
        wanted = None if expect["status"] == "none" else expect["status"]
        assert parse_pct_status(stdout) == wanted
    if "missing" in expect:
        assert pct_says_missing(stderr) is expect["missing"]
    if "not_running" in expect:
        assert pct_says_not_running(stderr) is expect["not_running"]
    if "warnings" in expect:
        assert pct_task_warnings(stderr) == expect["warnings"]
    if "transfer_failure" in expect:
        failure = pct_transfer_failure(code, stderr)
        if expect["transfer_failure"] is False:
            assert failure is None
        else:
            assert failure is not None and expect["transfer_failure"] in failure
            assert "\n" not in failure
    if "exec_path" in expect:
        assert stdout.strip() == expect["exec_path"]
        # The connector's in-CT verification scripts must work with the PATH pct exec gives them.
        for tool in CT_SCRIPT_TOOLS:
            assert shutil.which(tool, path=expect["exec_path"]), f"{tool} not on pct exec's PATH"
