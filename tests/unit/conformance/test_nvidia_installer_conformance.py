"""labwright's reading of a failed NVIDIA installer run (labwright.hostupgrade.installer) against outputs rendered
from NVIDIA/nvidia-installer's own format strings (tests/conformance/nvidia-installer/), and the installer double of
tests/support/host_tools against the same cases.

Each case: where the messages come from (version, commit, file, lines), the run's exit, stdout, stderr and the log it
wrote, and what labwright must make of it: the ERROR messages that say what failed (never the closing "Installation
has failed." every failed run ends with), the WARNING that says it where no ERROR does, the log file the installer
names, and how the one-line quote starts. ``double``: the double of that version, in that situation, must say the
same (its ERRORs, WARNING and log read the same way).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright.hostupgrade.installer import failure
from support.host_doubles import TOOLS, tool_env

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "nvidia-installer"
CASES = sorted(CASES_DIR.glob("*.toml"))
KNOWN_EXPECTATIONS = {"errors", "warning", "log", "quote_starts", "double", "note"}
RUNNING, NEXT = "6.8.12-4-pve", "6.8.12-9-pve"


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def test_the_failures_the_source_shows_are_recorded():
    assert {"module-already-loaded-470", "module-load-failed-590", "module-in-use-590-abort",
            "build-failed-tty-590"} <= {path.stem for path in CASES}


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case_names_its_upstream_source(path):
    case = load(path)
    for source in case["provenance"]["sources"]:
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
        assert source["project"] and source["version"] and source["file"] and source["lines"], source
    assert set(case["expect"]) <= KNOWN_EXPECTATIONS, set(case["expect"]) - KNOWN_EXPECTATIONS


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_labwright_quotes_what_failed(path):
    case = load(path)
    run, expect = case["run"], case["expect"]
    found = failure(run["stderr"] + "\n" + run["stdout"], run["log"])
    assert list(found.errors) == expect["errors"]
    if "warning" in expect:
        assert found.warning == expect["warning"]
    assert found.log == expect["log"]
    quote = found.said()
    assert quote.startswith(expect["quote_starts"]) and "Installation has failed" not in quote
    assert "\n" not in quote and len(quote) <= 2 * 240 + 2


def installer_tree(root: Path, spec: dict[str, Any]) -> Path:
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(RUNNING + "\n")
    for kernel in (RUNNING, NEXT):
        (root / "lib/modules" / kernel / "build/include").mkdir(parents=True)
    if spec["loaded"]:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14\n")
    if spec["switch"]:
        (root / "labwright-sim").mkdir()
        (root / "labwright-sim" / spec["switch"]).write_text("")
    return root


@pytest.mark.parametrize("path", [p for p in CASES if "double" in load(p)["expect"]], ids=lambda path: path.stem)
def test_the_double_fails_the_same_way(path, tmp_path):
    case = load(path)
    spec, expect = case["expect"]["double"], case["expect"]
    root = installer_tree(tmp_path, spec)
    words = shlex.split(case["run"]["command"].split("#")[0])
    log = next((w.split("=", 1)[1] for w in words if w.startswith("--log-file-name=")),
               "/var/log/nvidia-installer.log")
    env = tool_env(root)
    env["LW_INSTALLER_VERSION"] = spec["version"]
    done = subprocess.run([sys.executable, str(TOOLS / "nvidia-installer"), "--silent", "--dkms",
                           f"--kernel-name={RUNNING if spec['kernel'] == 'running' else NEXT}",
                           f"--log-file-name={log}"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == case["run"]["exit"], done.stderr
    written = (root / log.lstrip("/")).read_text()
    for found in (failure(done.stderr + "\n" + done.stdout, written), failure("", written)):  # output, then log
        assert list(found.errors) == expect["errors"]
        if "warning" in expect:
            assert found.warning == expect["warning"]
        assert found.log == expect["log"]
