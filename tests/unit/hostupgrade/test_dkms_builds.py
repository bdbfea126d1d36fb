"""Only a finished DKMS build counts (labwright.gpu.nvidia.upgrade_facts.dkms_tree_builds): dkms 3.x builds into
``/var/lib/dkms/MODULE/VERSION/KERNEL/.tmp_ARCH_XXXXXX`` (3.1.7: ``tmp_ARCH_XXXXXX``) and renames it to ``ARCH`` only
once every module of the package is in it (dell/dkms dkms.in do_build, tests/conformance/dkms/), so a build that
failed or was cut off leaves that directory, nvidia.ko perhaps in it, and no build. The plan must not boot a kernel on
it, and the driver step must not take it for the build it asked for."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import OperationFailed, SafetyCheckFailed
from labwright.gpu.nvidia.upgrade_facts import dkms_builds, dkms_tree_builds, kernel_headers
from labwright.hosts import Result
from labwright.hostupgrade.plan import GuestFacts, NodeFacts, make_plan
from labwright.hostupgrade.realhost import CommandHost
from support.fake_nvidia import make_upgrade_host
from support.host_doubles import TOOLS, make_node, tool_env
from support.host_tree import TreeHost

OLD, NEW = "550.54.14", "550.54.15"
RUNNING, NEXT = "6.8.12-4-pve", "6.8.12-9-pve"


def node_facts(root: Path) -> NodeFacts:
    return NodeFacts("lwnode1", OLD, RUNNING, NEXT, (NEW,), dkms_builds(TreeHost(root), OLD),
                     (GuestFacts("gpu1", True, OLD, True, "btrfs"),), "/var/cache/labwright/nvidia",
                     kernel_headers(TreeHost(root)))


def test_an_unfinished_build_for_the_new_kernel_is_no_build_for_the_plan(tmp_path):
    root = make_upgrade_host(tmp_path, built={RUNNING: [OLD]}, unfinished={NEXT: [NEW]}, repository=(NEW,))
    assert (root / f"var/lib/dkms/nvidia/{NEW}/{NEXT}/.tmp_x86_64_Q7fz2K/module/nvidia.ko").is_file()
    assert dkms_builds(TreeHost(root), OLD) == {RUNNING: (OLD,)}
    with pytest.raises(SafetyCheckFailed) as info:  # no build, no headers: refused, not "has a DKMS build"
        make_plan(node_facts(root))
    assert f"the new kernel {NEXT} has no nvidia {NEW} module build (DKMS builds for it: none)" in str(info.value)
    finished = make_upgrade_host(tmp_path / "finished", built={RUNNING: [OLD], NEXT: [NEW]}, repository=(NEW,))
    kernel_step = make_plan(node_facts(finished)).steps[1]
    assert kernel_step.detail == f"kernel {NEXT} has a DKMS build of nvidia {NEW}: boots into it"


def dkms(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOLS / "dkms"), *args], env=tool_env(root), capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize(("switch", "leftover"), [("", r"\.tmp_x86_64_[A-Za-z0-9]{6}"),
                                                  ("dkms-3.1.7", r"tmp_x86_64_[A-Za-z0-9]{6}")])
def test_what_the_dkms_double_leaves_after_a_build_that_did_not_finish(tmp_path, switch, leftover):
    """`dkms install` for the new kernel (its autoinstall after the kernel package) stops at "Missing module"
    (die 7): the temporary directory stays, nvidia.ko in it. dkms status lists no build for that kernel (3.1.7's
    undotted name it lists, as that release's own architecture glob did); labwright counts none either way."""
    make_node(tmp_path, (RUNNING, NEXT), (RUNNING, NEXT), OLD, RUNNING)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(RUNNING + "\n")
    (tmp_path / "labwright-sim").mkdir()
    (tmp_path / "labwright-sim/dkms-module-missing").write_text("")
    if switch:
        (tmp_path / "labwright-sim" / switch).write_text("")
    done = dkms(tmp_path, "install", "-m", "nvidia", "-v", OLD, "-k", NEXT)
    assert done.returncode == 7
    assert re.search(rf"Error! Missing module 'nvidia-uvm' in /var/lib/dkms/nvidia/{OLD}/{NEXT}/{leftover}/module",
                     done.stderr)
    left = [p.name for p in (tmp_path / f"var/lib/dkms/nvidia/{OLD}/{NEXT}").iterdir()]
    assert len(left) == 1 and re.fullmatch(leftover, left[0]) and \
        (tmp_path / f"var/lib/dkms/nvidia/{OLD}/{NEXT}" / left[0] / "module/nvidia.ko").is_file()
    status = dkms(tmp_path, "status", "-m", "nvidia").stdout
    assert (f", {NEXT}, " in status) is bool(switch)
    assert dkms_builds(TreeHost(tmp_path), OLD) == {RUNNING: (OLD,)}
    assert [b.kernel for b in dkms_tree_builds(TreeHost(tmp_path))] == [RUNNING]
    (tmp_path / "labwright-sim/dkms-module-missing").unlink()  # the next try finishes: renamed, a build
    assert dkms(tmp_path, "install", "-m", "nvidia", "-v", OLD, "-k", NEXT).returncode == 0
    assert dkms_builds(TreeHost(tmp_path), OLD) == {RUNNING: (OLD,), NEXT: (OLD,)}
    assert f"nvidia/{OLD}, {NEXT}, x86_64: installed" in dkms(tmp_path, "status", "-m", "nvidia").stdout


class _Installed:
    """An installer run that exits 0 and builds nothing (what only checking the tree catches)."""

    label = "stub"

    def run(self, command: str, timeout: float | None = None) -> Result:
        return Result(0, "", "")


def test_the_driver_step_does_not_take_a_leftover_for_its_build(tmp_path):
    root = make_upgrade_host(tmp_path, built={RUNNING: [OLD]}, unfinished={NEXT: [NEW]}, repository=(NEW,))
    host = CommandHost(TreeHost(root), root / "var/cache/labwright/nvidia", runner=_Installed())
    assert host.dkms_module(NEW, NEXT) is None and host.dkms_module(OLD, RUNNING) is not None
    with pytest.raises(OperationFailed, match=f"no DKMS build of nvidia/{NEW} for {NEXT} in /var/lib/dkms"):
        host.install_driver(NEW, NEXT)


_MKTEMP = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=6, max_size=6)
_ARCH = st.sampled_from(["x86_64", "aarch64", "ppc64le"])
_KERNELS = st.sampled_from([RUNNING, NEXT, "6.11.0-2-pve", "6.1.0-27-amd64"])
_VERSIONS = st.sampled_from([OLD, NEW, "570.172.08"])
_LEFTOVER = st.one_of(st.builds(lambda a, x: f".tmp_{a}_{x}", _ARCH, _MKTEMP),
                      st.builds(lambda a, x: f"tmp_{a}_{x}", _ARCH, _MKTEMP),
                      st.from_regex(r"\A\.[A-Za-z0-9_.-]{1,16}\Z"))
_FILES = st.sampled_from(["nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst"])


@given(finished=st.sets(st.tuples(_VERSIONS, _KERNELS, _ARCH, _FILES), max_size=5),
       leftovers=st.lists(st.tuples(_VERSIONS, _KERNELS, _LEFTOVER, _FILES), max_size=5))
def test_only_finished_builds_count_whatever_dkms_left_beside_them(finished, leftovers):
    """Any mix of finished builds and what unfinished ones leave (dkms 3.1.8+'s .tmp_ARCH_XXXXXX, 3.1.7's
    tmp_ARCH_XXXXXX, any other dot directory), even holding nvidia.ko: the facts are the finished builds."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for version, kernel, arch, name in [*finished, *leftovers]:
            module = root / "var/lib/dkms/nvidia" / version / kernel / arch / "module"
            module.mkdir(parents=True, exist_ok=True)
            (module / name).write_bytes(b"\x7fELF\n")
        want: dict[str, set[str]] = {}
        for version, kernel, _, _ in finished:
            want.setdefault(kernel, set()).add(version)
        assert dkms_builds(TreeHost(root), None) == {k: tuple(sorted(v)) for k, v in want.items()}
        assert {(b.version, b.kernel, b.arch) for b in dkms_tree_builds(TreeHost(root))} == {f[:3] for f in finished}
