"""Every option labwright passes to NVIDIA's installer is chosen by the target installer's version
(labwright.hostupgrade.installer_options): no version gets an option it does not know (an unknown one stops the
installer at once: tests/conformance/nvidia-installer/unrecognized-option-*), and a version that cannot do the host
install is refused in one line before anything changes (the plan), or before its installer runs (the host side)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput, OperationFailed
from labwright.hostupgrade.installer_options import BY_NAME, OPTIONS, installer_args, knows, refusal, version_key
from labwright.hostupgrade.plan import make_plan
from labwright.hostupgrade.realhost import INSTALLER_LOG, installer_command
from support.fake_nvidia import fake_run_installer, write_installer
from support.host_doubles import TOOLS, tool_env

from .test_plan import facts, guest
from .test_realhost import NEXT, RUNNING, dkms_status, host, tree

ALLOW = "--allow-installation-with-running-driver"
OLD_535 = "535.216.01"

# driver versions as NVIDIA numbers them since 71.86.01 (after 1.0-9762): 2 or 3 parts, the minor and patch often
# zero-padded ("535.54.03")
versions = st.builds(lambda major, rest, pad: ".".join([str(major)] + [f"{p:02d}" if pad else str(p) for p in rest]),
                     st.integers(71, 999), st.lists(st.integers(0, 300), min_size=1, max_size=2), st.booleans())
# the ones near a boundary, so each side of each is tried every run
near = st.sampled_from(["302.17", "304.22", "304.137", "470.256.02", "535.216.01", "545.23.05", "545.23.06",
                        "545.29.06", "550.54.14", "590.48.01"])


def command_options(command: str) -> list[str]:
    """The option names in a shell command line (``--name`` of ``--name=value``)."""
    return [word.partition("=")[0] for word in shlex.split(command) if word.startswith("-")]


@given(version=versions | near, kernel=st.sampled_from([RUNNING, NEXT]))
def test_the_command_never_holds_an_option_newer_than_its_version(version, kernel):
    command = installer_command(Path(f"/var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-{version}.run"), version,
                                kernel)
    used = command_options(command)
    assert used == [o.name for o in OPTIONS if version_key(o.since) <= version_key(version)]  # each one it knows
    assert all(version_key(BY_NAME[name].since) <= version_key(version) for name in used)
    assert f"--kernel-name={kernel}" in shlex.split(command) and f"--log-file-name={INSTALLER_LOG}" in command
    assert (ALLOW in used) == (version_key(version) >= (545, 23, 6))
    assert ("--dkms" in used) == (version_key(version) >= (304, 22))


@given(version=versions | near, loaded=st.sampled_from([None, "470.256.02", "550.54.14"]))
def test_a_version_is_refused_exactly_when_its_installer_cannot_do_the_host_install(version, loaded):
    said = refusal(version, loaded)
    key = version_key(version)
    assert (said is None) == (key >= (304, 22) and (loaded is None or key >= (545, 23, 6)))
    if said is not None:
        assert said.startswith(f"NVIDIA's installer {version} ") and "\n" not in said
        assert ("304.22" if key < (304, 22) else "545.23.06") in said


@settings(max_examples=20, deadline=None)
@given(version=versions | near)
def test_the_installer_double_of_any_version_knows_every_option_of_its_command(version):
    """The double's option table (tests/support/host_tools/nvidia-installer: each option from the tag that added it)
    never finds an unknown option in the command labwright builds for that version."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "proc/sys/kernel").mkdir(parents=True)
        (root / "proc/sys/kernel/osrelease").write_text(RUNNING + "\n")
        env = tool_env(root)
        env["LW_INSTALLER_VERSION"] = version
        args = installer_args(version, NEXT, INSTALLER_LOG)
        done = subprocess.run([sys.executable, str(TOOLS / "nvidia-installer"), *args], capture_output=True,
                              text=True, env=env, timeout=60)
        assert "unrecognized option" not in done.stderr and "Invalid commandline" not in done.stderr
        # the options labwright leaves out are unknown to it: the table keeps nothing a version could take back
        for option in OPTIONS:
            if not knows(version, option.name):
                refused = subprocess.run([sys.executable, str(TOOLS / "nvidia-installer"), option.name],
                                         capture_output=True, text=True, env=env, timeout=60)
                assert refused.stderr.startswith(f'./nvidia-installer: unrecognized option: "{option.name}"')


def test_each_option_cites_where_it_comes_from():
    for option in OPTIONS:
        assert option.source.startswith(option.since) and "L" in option.source and option.before
    assert [o.name for o in OPTIONS] == ["--silent", "--dkms", "--kernel-name", ALLOW, "--log-file-name"]


def test_versions_are_compared_as_numbers():
    assert version_key("535.216.01") < version_key("545.23.06") < version_key("545.29.06") < version_key("550.54.14")
    assert version_key("1.0-6106") < version_key("71.86.01") and version_key("545.23") < version_key("545.23.06")


# --- the plan: refused before anything ----------------------------------------------------------------------------
def test_a_target_before_545_with_a_module_loaded_is_refused_in_one_line():
    with pytest.raises(BadInput) as info:
        make_plan(facts(available=(OLD_535, "550.54.14")), OLD_535)
    said = str(info.value)
    assert said.startswith(f"host upgrade to {OLD_535}: NVIDIA's installer {OLD_535} refuses to install while an "
                           "NVIDIA module is loaded (nvidia 550.54.14 is, the GPU guests' engines hold it): it has "
                           f"no {ALLOW} (added in 545.23.06); nothing was changed. Give --to a driver of 545.23.06 or "
                           "later")
    assert ("modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia; sh NVIDIA-Linux-x86_64-535.216.01.run --silent "
            "--dkms) and reboot") in said
    assert "\n" not in said


def test_a_target_before_545_is_planned_where_no_module_is_loaded():
    plan = make_plan(facts(driver=None, available=(OLD_535,), builds={NEXT: (OLD_535,)},
                           guests=(guest("llm1", userspace=None),)))
    assert plan.to_version == OLD_535 and any(s.action == "host-driver" for s in plan.steps)


def test_a_target_without_dkms_is_refused_naming_the_version_that_added_it():
    with pytest.raises(BadInput) as info:
        make_plan(facts(driver=None, available=("302.17",)))
    assert str(info.value).startswith("host upgrade to 302.17: NVIDIA's installer 302.17 has no --dkms (added in "
                                      "304.22): the upgrade builds the module through DKMS for the kernel the node "
                                      "boots next; nothing was changed. Give --to a driver of 304.22 or later")


def test_the_plan_says_when_the_previous_driver_cannot_be_put_back_by_its_installer():
    plan = make_plan(facts(driver=OLD_535, guests=(guest("llm1", userspace=OLD_535),),
                           builds={NEXT: ("550.54.15",)}, available=(OLD_535, "550.54.15")))
    assert plan.to_version == "550.54.15"
    assert plan.notes == [f"nvidia {OLD_535}'s installer has no {ALLOW} (added in 545.23.06) and refuses to install "
                          "while a module is loaded: should the upgrade fail after the host-driver step, the guests "
                          f"are restored but on a real node {OLD_535} goes back on the host by hand (stop the GPU "
                          "guests, modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia, sh "
                          f"NVIDIA-Linux-x86_64-{OLD_535}.run --silent --dkms, reboot)"]
    assert make_plan(facts()).notes == []  # 550.54.14's installer can put it back


# --- the host side: the command each version gets ---------------------------------------------------------------
def test_a_535_driver_installs_with_the_options_its_installer_knows(tmp_path):
    """The regression: the 535 installer was handed 545's option and stopped at once ("unrecognized option"). With
    no module loaded it installs, built by DKMS for the next kernel."""
    root = tree(tmp_path, new=OLD_535)
    (root / "proc/driver/nvidia/version").unlink()
    h = host(root)
    said = h.install_driver(OLD_535, NEXT)
    assert said.startswith(f"nvidia {OLD_535} built by DKMS for {NEXT} (nvidia.ko), host userspace {OLD_535}")
    log = (root / "var/log/nvidia-installer.log").read_text()
    assert ALLOW not in log and "--dkms" in log and "is now complete." in log


def test_a_535_driver_is_not_run_while_a_module_is_loaded(tmp_path):
    root = tree(tmp_path, new=OLD_535)
    before = dkms_status(root)
    with pytest.raises(OperationFailed) as info:
        host(root).install_driver(OLD_535, NEXT)
    assert str(info.value) == (f"NVIDIA-Linux-x86_64-{OLD_535}.run not run: NVIDIA's installer {OLD_535} refuses to "
                               "install while an NVIDIA module is loaded (nvidia 550.54.14 is, the GPU guests' "
                               f"engines hold it): it has no {ALLOW} (added in 545.23.06)")
    assert not (root / "var/log/nvidia-installer.log").exists() and dkms_status(root) == before


def test_putting_back_a_535_driver_while_a_module_is_loaded_says_how_by_hand(tmp_path):
    root = tree(tmp_path, old=OLD_535)
    h = host(root)
    h.install_driver("550.54.15", NEXT)  # 545+: allowed with the 535 module loaded
    with pytest.raises(OperationFailed) as info:
        h.rollback_driver()
    said = str(info.value)
    repo = root / "var/cache/labwright/nvidia"
    assert said.startswith(f"NVIDIA-Linux-x86_64-{OLD_535}.run not run: NVIDIA's installer {OLD_535} refuses to "
                           f"install while an NVIDIA module is loaded (nvidia {OLD_535} is")
    assert said.endswith(f"; put {OLD_535} back by hand: stop the GPU guests, modprobe -r nvidia_uvm nvidia_drm "
                         f"nvidia_modeset nvidia, sh {repo}/NVIDIA-Linux-x86_64-{OLD_535}.run --silent --dkms "
                         f"--kernel-name={RUNNING} --log-file-name=/var/log/nvidia-installer.log, then reboot")
    assert h.installed == "550.54.15"  # still there: the report's left says so


def test_an_installer_older_than_its_name_is_quoted_by_its_option_parser(tmp_path):
    """A .run whose installer does not know an option stops before anything and writes no log: the step quotes
    nvgetopt's line and the ERROR, and says no log was written (not an old log's)."""
    root = tree(tmp_path)
    (root / "var/log").mkdir(parents=True, exist_ok=True)
    (root / "var/log/nvidia-installer.log").write_text("ERROR: an earlier run's error\n")
    # mislabelled, with its sha256 recorded as it is (the checksum proves the bytes, not what the name says)
    write_installer(root / "var/cache/labwright/nvidia", "550.54.15", fake_run_installer(OLD_535))
    with pytest.raises(OperationFailed) as info:
        host(root).install_driver("550.54.15", NEXT)
    said = str(info.value)
    assert said.endswith(f'the installer says: unrecognized option: "{ALLOW}"; Invalid commandline, please run '
                         "`./nvidia-installer --help` for usage information. (it stopped at its options and wrote "
                         "no log)")
    assert "earlier run" not in said
