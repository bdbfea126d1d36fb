"""Root runs only root-owned code (labwright.hostupgrade.trust): what the boot unit would run as root (the
interpreter, its site-packages, the labwright package, the inventory, the installer repository) refused in one line
when anyone but root may write it or any directory above it (sshd's StrictModes, misc.c safe_path), and every
installer verified against the sha256 recorded beside it before it runs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.hostupgrade import trust
from labwright.hostupgrade.plan import Plan, Step
from labwright.hostupgrade.run import Upgrade
from labwright.hostupgrade.trust import check_root_code, recorded_sha256, untrusted, verify_installer
from support.fake_nvidia import fake_run_installer, write_installer
from support.host_tree import TreeHost

from .test_realhost import NEW, NEXT, OLD, dkms_status, host, tree

ME = frozenset({os.getuid()})  # "root" for these trees: the files this test makes are its user's
AS_ROOT = os.getuid() == 0


def code_tree(top: Path) -> dict[str, Path]:
    """An interpreter, a site-packages with a .pth, the labwright package, an inventory and a repository, all owned
    by this test's user with no group/other write bits (umask 022)."""
    previous = os.umask(0o022)
    try:
        return _code_tree(top)
    finally:
        os.umask(previous)


def _code_tree(top: Path) -> dict[str, Path]:
    venv = top / "opt/labwright"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin/python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    site = venv / "lib/python3/site-packages"
    package = site / "labwright"
    (package / "hostupgrade").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "hostupgrade/run.py").write_text("")
    (site / "labwright.pth").write_text(str(site) + "\n")
    inventory = top / "etc/labwright/lab.py"
    inventory.parent.mkdir(parents=True)
    inventory.write_text("pve_nodes = []\n")
    repo = top / "var/cache/labwright/nvidia"
    repo.mkdir(parents=True)
    write_installer(repo, NEW, fake_run_installer(NEW))
    for d in (top, *[p for p in top.rglob("*") if p.is_dir()]):
        d.chmod(0o755)
    return {"python": python, "site": site, "package": package, "inventory": inventory, "repo": repo}


def check(paths: dict[str, Path], top: Path, inventory: bool = True) -> None:
    code = [("the interpreter", paths["python"], False), ("its site-packages", paths["site"], False),
            ("a .pth file of its site-packages", paths["site"] / "labwright.pth", False),
            ("the labwright package", paths["package"], True)]
    check_root_code(paths["inventory"] if inventory else None, paths["repo"], uids=ME, top=top, code=code)


def refused(paths: dict[str, Path], top: Path) -> str:
    with pytest.raises(BadInput) as info:
        check(paths, top)
    said = str(info.value)
    assert "\n" not in said and said.endswith("; nothing was changed")
    return said


def test_a_tree_only_its_owner_can_write_passes(tmp_path):
    check(code_tree(tmp_path), tmp_path)


def test_a_group_writable_interpreter_is_refused_naming_it_and_the_fix(tmp_path):
    paths = code_tree(tmp_path)
    paths["python"].chmod(0o775)
    said = refused(paths, tmp_path)
    assert said.startswith(f"host upgrade: the interpreter {paths['python']} is writable by group (mode 0775), and "
                           "the boot unit runs it as root at the next boot: install labwright where only root can "
                           "write and run it from there (sudo python3 -m venv /opt/labwright")


def test_a_directory_on_the_way_is_checked_as_sshd_does(tmp_path):
    paths = code_tree(tmp_path)
    (tmp_path / "opt").chmod(0o777)
    said = refused(paths, tmp_path)
    assert said.startswith(f"host upgrade: the interpreter {tmp_path / 'opt'} (on the way to {paths['python']}) is "
                           "writable by group and others (mode 0777)")


def test_a_symlinked_interpreter_in_a_writable_directory_is_refused(tmp_path):
    """The link's target is clean, but whoever may write its directory may point it elsewhere."""
    paths = code_tree(tmp_path)
    userbin = tmp_path / "home/user/venv/bin"
    userbin.mkdir(parents=True)
    userbin.chmod(0o777)
    link = userbin / "python3"
    link.symlink_to(paths["python"])
    assert untrusted(paths["python"], ME, tmp_path) is None
    assert untrusted(link, ME, tmp_path) == (userbin, "writable by group and others (mode 0777)")


def test_one_writable_file_in_the_package_is_enough(tmp_path):
    paths = code_tree(tmp_path)
    (paths["package"] / "hostupgrade/run.py").chmod(0o666)
    said = refused(paths, tmp_path)
    assert said.startswith(f"host upgrade: the labwright package {paths['package'] / 'hostupgrade/run.py'} (in "
                           f"{paths['package']}) is writable by group and others (mode 0666)")


def test_the_inventory_and_the_repository_are_checked_with_their_fix(tmp_path):
    paths = code_tree(tmp_path)
    paths["inventory"].chmod(0o664)
    said = refused(paths, tmp_path)
    assert said.startswith(f"host upgrade: the inventory {paths['inventory']} is writable by group (mode 0664), and "
                           f"the boot unit runs it as root at the next boot: make it root's and not group- or "
                           f"other-writable (chown root:root {paths['inventory']}; chmod go-w {paths['inventory']})")
    check(paths, tmp_path, inventory=False)  # read at boot only over HTTPS: through pvesh it is not checked
    paths["inventory"].chmod(0o644)
    installer = paths["repo"] / f"NVIDIA-Linux-x86_64-{NEW}.run"
    installer.chmod(0o646)
    said = refused(paths, tmp_path)
    assert said.startswith(f"host upgrade: the installer repository {installer} (in {paths['repo']}) is writable by "
                           "others (mode 0646)")


@pytest.mark.skipif(not AS_ROOT, reason="making a file another user's needs root")
def test_a_file_another_user_owns_is_refused_even_without_write_bits(tmp_path):
    paths = code_tree(tmp_path)
    os.chown(paths["inventory"], 4242, 4242)
    said = refused(paths, tmp_path)
    assert said.startswith(f"host upgrade: the inventory {paths['inventory']} is owned by uid 4242, not root")


def test_the_real_check_trusts_only_root(tmp_path):
    paths = code_tree(tmp_path)
    expected = 0 if AS_ROOT else os.getuid()
    found = untrusted(paths["inventory"], trust.ROOT_UIDS, tmp_path)
    assert (found is None) == (expected == 0)


# --- installers: the recorded sha256 -----------------------------------------------------------------------------
def test_an_installer_matching_its_recorded_sha256_passes(tmp_path):
    installer = write_installer(tmp_path, NEW, "#!/bin/sh\necho installer\n")
    digest = hashlib.sha256(installer.read_bytes()).hexdigest()
    assert verify_installer(installer, NEW) == digest == recorded_sha256(installer, NEW)
    # NVIDIA's own file: binary mode marker, upper case
    (tmp_path / f"{installer.name}.sha256sum").write_text(f"{digest.upper()} *{installer.name}\n")
    assert verify_installer(installer, NEW) == digest


def test_a_mismatch_is_refused_naming_the_file_and_both_hashes(tmp_path):
    installer = write_installer(tmp_path, NEW, "#!/bin/sh\necho installer\n")
    recorded = recorded_sha256(installer, NEW)
    installer.write_text("#!/bin/sh\necho something else\n")
    actual = hashlib.sha256(installer.read_bytes()).hexdigest()
    with pytest.raises(BadInput) as info:
        verify_installer(installer, NEW)
    assert str(info.value) == (
        f"{installer}: sha256 {actual} does not match {recorded} recorded in {installer.name}.sha256sum; it is not "
        f"the installer NVIDIA published: fetch it again (https://download.nvidia.com/XFree86/Linux-x86_64/{NEW}/"
        f"NVIDIA-Linux-x86_64-{NEW}.run) or record the right sha256; nothing was run")


def test_no_record_or_a_record_without_a_hash_is_refused_with_the_url(tmp_path):
    installer = tmp_path / f"NVIDIA-Linux-x86_64-{NEW}.run"
    installer.write_text("#!/bin/sh\n")
    url = f"https://download.nvidia.com/XFree86/Linux-x86_64/{NEW}/NVIDIA-Linux-x86_64-{NEW}.run.sha256sum"
    with pytest.raises(BadInput) as info:
        verify_installer(installer, NEW)
    assert str(info.value) == (f"{installer}: no recorded sha256 ({installer.name}.sha256sum is not beside it); "
                               f"record NVIDIA's published one: curl -fsSLo {installer}.sha256sum {url}; nothing was "
                               "run")
    (tmp_path / f"{installer.name}.sha256sum").write_text(f"{'0' * 64}  NVIDIA-Linux-x86_64-1.0.run\n")
    with pytest.raises(BadInput, match=r"no sha256 line for NVIDIA-Linux-x86_64-550\.54\.15\.run in it"):
        verify_installer(installer, NEW)


def test_a_tampered_host_installer_is_not_run(tmp_path):
    root = tree(tmp_path)
    installer = root / f"var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-{NEW}.run"
    installer.write_text(installer.read_text() + "# and one more line\n")
    with pytest.raises(BadInput, match=r"does not match .* recorded in NVIDIA-Linux-x86_64-550\.54\.15\.run\."
                                       r"sha256sum; .*nothing was run$"):
        host(root).install_driver(NEW, NEXT)
    assert NEW not in dkms_status(root) and not (root / "var/log/nvidia-installer.log").exists()


def test_a_tampered_put_back_installer_is_not_run(tmp_path):
    root = tree(tmp_path)
    h = host(root)
    h.installed, h.previous = NEW, OLD
    installer = root / f"var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-{OLD}.run"
    (root / f"var/cache/labwright/nvidia/{installer.name}.sha256sum").unlink()
    with pytest.raises(BadInput, match=r"no recorded sha256"):
        h.rollback_driver()


def test_a_tampered_guest_installer_is_not_copied_in(tmp_path):
    """Checked before the guest is asked anything (no LXD daemon here at all)."""
    root = tree(tmp_path)
    installer = root / f"var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-{NEW}.run"
    installer.write_bytes(installer.read_bytes() + b"\n")
    plan = Plan("lwnode1", OLD, NEW, NEXT, [Step("userspace", "g1", "")])
    upgrade = Upgrade(plan, TreeHost(root), root / "var/cache/labwright/nvidia", None, host=host(root))
    with pytest.raises(BadInput, match=r"does not match"):
        upgrade.userspace("g1")
