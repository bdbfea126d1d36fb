"""labwright's reading of a failed NVIDIA installer run (labwright.hostupgrade.installer) against outputs rendered
from NVIDIA/nvidia-installer's own format strings (tests/conformance/nvidia-installer/), and the installer double of
tests/support/host_tools against the same cases.

Each case: where the messages come from (version, commit, file, lines), the run's exit, stdout, stderr and the log it
wrote, and what labwright must make of it: the ERROR messages that say what failed (never the closing "Installation
has failed." every failed run ends with), the WARNING that says it where no ERROR does, the log file the installer
names (none: it wrote none), and how the one-line quote starts. ``double``: the double of that version, in that
situation, run with the case's options, must say the same (its ERRORs, WARNING and log read the same way).
``options``: a version boundary, the option labwright passes that the installer knows from ``since`` and not in
``last_without``: labwright's table (labwright.hostupgrade.installer_options) says the same, and the double refuses
it as the case shows below ``since`` and takes it from there.
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
from labwright.hostupgrade.installer_options import BY_NAME, installer_args
from support.host_doubles import TOOLS, tool_env

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "nvidia-installer"
CASES = sorted(CASES_DIR.glob("*.toml"))
KNOWN_EXPECTATIONS = {"errors", "warning", "log", "quote_starts", "double", "note"}
RUNNING, NEXT = "6.8.12-4-pve", "6.8.12-9-pve"


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def test_the_failures_the_source_shows_are_recorded():
    assert {"module-already-loaded-470", "module-load-failed-590", "module-in-use-590-abort", "build-failed-tty-590",
            "unrecognized-option-535", "unrecognized-option-302"} <= {path.stem for path in CASES}


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
    assert found.log == expect.get("log")
    assert found.commandline == ("log" not in expect)  # no log: it stopped at its command line
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
    args = words[words.index(next(w for w in words if w.endswith(".run"))) + 1:]
    log = next((w.split("=", 1)[1] for w in args if w.startswith("--log-file-name=")),
               "/var/log/nvidia-installer.log")
    if not any(w.startswith("--kernel-name=") for w in args):
        args.append(f"--kernel-name={RUNNING if spec['kernel'] == 'running' else NEXT}")
    if not any(w.startswith("--log-file-name=") for w in args):
        args.append(f"--log-file-name={log}")
    done = run_double(root, spec["version"], *args)
    assert done.returncode == case["run"]["exit"], done.stderr
    if "log" not in expect:  # stopped at its command line: the same stderr, nothing written
        assert done.stderr == case["run"]["stderr"] and done.stdout == case["run"]["stdout"]
        assert not (root / log.lstrip("/")).exists() and not (root / "var/lib/dkms").exists()
    written = (root / log.lstrip("/")).read_text() if "log" in expect else ""
    outputs = [done.stderr + "\n" + done.stdout] + ([""] if "log" in expect else [])  # output, then the log alone
    for output in outputs:
        found = failure(output, written)
        assert list(found.errors) == expect["errors"]
        if "warning" in expect:
            assert found.warning == expect["warning"]
        assert found.log == expect.get("log")


def run_double(root: Path, version: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = tool_env(root)
    env["LW_INSTALLER_VERSION"] = version
    return subprocess.run([sys.executable, str(TOOLS / "nvidia-installer"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


BOUNDARIES = [p for p in CASES if "options" in load(p)]


def test_every_option_labwright_passes_after_the_oldest_tag_has_its_boundary_case():
    """An option newer than nvidia-installer's oldest tag (1.0-6106) is where a version boundary lies: each has a
    case recording the last version without it."""
    newer = {o.name for o in BY_NAME.values() if o.since != "1.0-6106"}
    assert newer == {load(p)["options"]["option"] for p in BOUNDARIES} == {
        "--dkms", "--allow-installation-with-running-driver"}


@pytest.mark.parametrize("path", BOUNDARIES, ids=lambda path: path.stem)
def test_labwright_and_the_double_agree_with_the_boundary(path, tmp_path):
    boundary = load(path)["options"]
    option, since, before = boundary["option"], boundary["since"], boundary["last_without"]
    assert BY_NAME[option].since == since and since in BY_NAME[option].source
    assert option not in installer_args(before, NEXT, "/var/log/nvidia-installer.log")
    assert option in installer_args(since, NEXT, "/var/log/nvidia-installer.log")
    root = installer_tree(tmp_path, {"loaded": False, "switch": ""})
    refused = run_double(root, before, option)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f'./nvidia-installer: unrecognized option: "{option}"\n')
    # from ``since`` the option parses: the run goes on (and fails later for want of what this bare tree lacks)
    assert "unrecognized option" not in run_double(root, since, option, f"--kernel-name={NEXT}").stderr
