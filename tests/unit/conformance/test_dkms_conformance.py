"""labwright's reading of DKMS's tree (labwright.gpu.nvidia.upgrade_facts.dkms_tree_builds) against the trees dkms
leaves, rendered from dell/dkms's dkms.in (tests/conformance/dkms/), and the dkms double of tests/support/host_tools
against the same cases.

Each case: the dkms command, its exit and output, what ``/var/lib/dkms/nvidia`` holds afterwards (``tree``), and
what labwright must read from that tree (``builds``: kernel -> versions with a finished build) and what
``dkms status`` lists (``status_kernels``). ``double``: the double run with those simulation switches must exit and
print the same (the mktemp suffix aside), leave the same entries for that kernel, and labwright must read its tree
the same way.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright.gpu.nvidia.upgrade_facts import dkms_builds
from support.host_doubles import TOOLS, make_node, tool_env
from support.host_tree import TreeHost

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "dkms"
CASES = sorted(CASES_DIR.glob("*.toml"))
KNOWN_EXPECTATIONS = {"builds", "status_kernels", "double", "note"}
SUFFIX = re.compile(r"(tmp_\w+?_)[A-Za-z0-9]{6}\b")  # mktemp's XXXXXX


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def normal(text: str) -> str:
    return SUFFIX.sub(r"\1XXXXXX", text)


def test_finished_and_unfinished_builds_are_recorded():
    assert {"build-unfinished-3.2", "build-unfinished-3.1.7", "build-finished-3.2"} <= {p.stem for p in CASES}


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case_names_its_upstream_source(path):
    case = load(path)
    for source in case["provenance"]["sources"]:
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
        assert source["project"] and source["version"] and source["file"] and source["lines"], source
    assert set(case["expect"]) <= KNOWN_EXPECTATIONS, set(case["expect"]) - KNOWN_EXPECTATIONS


def make_tree(root: Path, entries: list[str]) -> None:
    tree = root / "var/lib/dkms/nvidia"
    for entry in entries:
        path = tree / entry
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        elif entry.startswith("kernel-"):  # dkms's kernel-K-ARCH link to the installed build
            kernel, arch = entry.removeprefix("kernel-").rsplit("-", 1)
            version = next(e.split("/")[0] for e in entries if f"/{kernel}/{arch}/" in e)
            path.symlink_to(f"{version}/{kernel}/{arch}")
        elif path.name == "source":
            path.symlink_to(f"/usr/src/nvidia-{entry.split('/')[0]}")
        else:
            path.write_bytes(b"\x7fELF\n")


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_labwright_reads_the_tree_dkms_left(path, tmp_path):
    case = load(path)
    make_tree(tmp_path, case["run"]["tree"])
    assert dkms_builds(TreeHost(tmp_path), None) == {k: tuple(v) for k, v in case["expect"]["builds"].items()}


@pytest.mark.parametrize("path", [p for p in CASES if "double" in load(p)["expect"]], ids=lambda path: path.stem)
def test_the_double_leaves_the_same(path, tmp_path):
    case = load(path)
    run, expect = case["run"], case["expect"]
    argv = shlex.split(run["command"])
    version, kernel = argv[argv.index("-v") + 1], argv[argv.index("-k") + 1]
    running = "6.8.12-4-pve"
    make_node(tmp_path, (running, kernel), (running, kernel), "550.54.14", running)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(running + "\n")
    source = tmp_path / f"usr/src/nvidia-{version}"
    source.mkdir(parents=True)
    (source / "dkms.conf").write_text(f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\n')
    (tmp_path / "labwright-sim").mkdir()
    for switch in expect["double"]["switches"]:
        (tmp_path / "labwright-sim" / switch).write_text("")
    env = tool_env(tmp_path)
    done = subprocess.run([str(TOOLS / "dkms"), *argv[1:]], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, normal(done.stdout), normal(done.stderr)) == (run["exit"], normal(run["stdout"]),
                                                                          normal(run["stderr"]))
    left = sorted(normal(p.name) for p in (tmp_path / "var/lib/dkms/nvidia" / version / kernel).iterdir())
    recorded = sorted({normal(e.split("/")[2]) for e in run["tree"] if e.startswith(f"{version}/{kernel}/")})
    assert left == recorded
    assert dkms_builds(TreeHost(tmp_path), None) == {k: tuple(v) for k, v in expect["builds"].items()}
    status = subprocess.run([str(TOOLS / "dkms"), "status", "-m", "nvidia"], capture_output=True, text=True,
                            env=env, timeout=60).stdout
    assert sorted({line.split(", ")[1] for line in status.splitlines() if ", " in line}) == expect["status_kernels"]
