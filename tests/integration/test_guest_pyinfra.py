"""The pyinfra side of guests, run by the real pyinfra CLI: deploys/guest.py builds an inventory's guests and a
second run changes nothing; nvidia_userspace installs the host's driver version and is a no-op once it matches."""

from __future__ import annotations

import hashlib
import re
import secrets
import subprocess
import textwrap
from pathlib import Path

import pytest

from labwright.lxd.client import LxdClient
from labwright.testing.lab_fixture import TEMPLATE
from labwright.testing.pyinfra_output import parse_pyinfra_json
from support.fake_nvidia import make_container_libraries, make_fake_nvidia_host


def pyinfra(cli_env, repo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pyinfra", "-y", "@local", *args], capture_output=True, text=True, env=cli_env,
                          cwd=repo, timeout=600)


@pytest.mark.lab
def test_guest_deploy_builds_the_inventory_then_changes_nothing(lab, repo, cli_env, tmp_path):
    names = [f"lwg-{secrets.token_hex(3)}" for _ in range(2)]
    inventory = tmp_path / "guests.py"
    inventory.write_text(textwrap.dedent(f"""
        guests = (
            [("@lxd/{names[0]}", {{"guest": {{"memory": "512M"}}}}),
             ("@lxd/{names[1]}", {{"guest": {{"cores": 1, "features": {{"nesting": True}}}}}})],
            {{"guest": {{}}}},
        )
        # group data can't deep-merge the dicts, so the shared fields are filled in here
        for _, data in guests[0]:
            data["guest"].update({{"backend": "lxd", "clone": "{TEMPLATE}", "profiles": ["lwtest"]}})
        """))
    client = LxdClient()
    try:
        first = pyinfra(cli_env, repo, "deploys/guest.py", "--data", f"guests_inventory={inventory}")
        assert first.returncode == 0, first.stderr[-3000:]
        assert all(client.instance(n)["status"] == "Running" for n in names)
        assert client.instance(names[1])["config"]["security.nesting"] == "true"

        second = pyinfra(cli_env, repo, "--json", "deploys/guest.py", "--data", f"guests_inventory={inventory}")
        assert second.returncode == 0, second.stderr[-3000:]
        # pyinfra's --json results (labwright.testing.pyinfra_output): each guest's operation, no change on @local
        guest_ops = [op for op in parse_pyinfra_json(second.stdout).operations or () if "Guests | Guest " in op.name]
        assert len(guest_ops) == 2 and all(op.no_change == ("@local",) and not op.success and not op.error
                                           for op in guest_ops), guest_ops

        only = pyinfra(cli_env, repo, "deploys/guest.py", "--data", f"guests_inventory={inventory}",
                       "--data", f"guests={names[0]},nope")
        assert only.returncode != 0 and "no guest named nope" in only.stdout + only.stderr
    finally:
        for name in names:
            lab.remove(name)


def test_guest_deploy_refuses_other_targets(repo, cli_env):
    proc = subprocess.run(["pyinfra", "-y", "@lxd/whatever", "deploys/guest.py"], capture_output=True, text=True,
                          env=cli_env, cwd=repo, timeout=120)
    assert proc.returncode != 0


FAKE_INSTALLER = """#!/bin/sh
# Stands in for NVIDIA-Linux-x86_64-{version}.run: records its arguments, leaves the userspace libraries.
echo "$@" > {root}/installer-args
echo "$0" > {root}/installer-path
rm -f {root}/usr/lib/x86_64-linux-gnu/libcuda.so.* {root}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*
mkdir -p {root}/usr/lib/x86_64-linux-gnu
touch {root}/usr/lib/x86_64-linux-gnu/libcuda.so.{version} {root}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}
"""


def test_nvidia_userspace_follows_the_host_driver(repo, cli_env, tmp_path):
    root = tmp_path / "root"
    make_fake_nvidia_host(root, driver="550.54.14")
    make_container_libraries(root, "545.29.06")  # an older userspace: mismatch
    for version in ("550.54.14", "570.133.07"):
        publish(tmp_path / f"fake-{version}.run", FAKE_INSTALLER.format(version=version, root=root), version)
    deploy = tmp_path / "nvidia.py"
    deploy.write_text(textwrap.dedent(f"""
        from labwright.operations import guests
        guests.nvidia_userspace(name="NVIDIA userspace", root="{root}",
                                installer_url="file://{tmp_path}/fake-{{version}}.run")
        """))
    libdir = root / "usr/lib/x86_64-linux-gnu"

    proc = pyinfra(cli_env, repo, str(deploy))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (libdir / "libcuda.so.550.54.14").exists() and not (libdir / "libcuda.so.545.29.06").exists()
    assert (root / "installer-args").read_text().split()[:2] == ["--no-kernel-module", "--silent"]
    # run from a fresh mktemp -d directory (not a /tmp name a guest user could predict), removed afterwards
    ran_from = Path((root / "installer-path").read_text().strip())
    assert re.fullmatch(r"/tmp/labwright-nvidia\.\w{10}/NVIDIA-Linux-x86_64-550\.54\.14\.run", str(ran_from))
    assert not ran_from.parent.exists()

    (root / "installer-args").unlink()
    again = pyinfra(cli_env, repo, str(deploy))
    assert again.returncode == 0 and not (root / "installer-args").exists()  # matched: nothing ran
    assert "No changes" in again.stdout + again.stderr

    # The host driver is upgraded: the next run brings the userspace along.
    (root / "proc/driver/nvidia/version").write_text(
        (root / "proc/driver/nvidia/version").read_text().replace("550.54.14", "570.133.07"))
    upgraded = pyinfra(cli_env, repo, str(deploy))
    assert upgraded.returncode == 0, upgraded.stderr[-3000:]
    assert (libdir / "libcuda.so.570.133.07").exists() and not (libdir / "libcuda.so.550.54.14").exists()


def publish(installer: Path, text: str, version: str, sha256: str | None = None) -> None:
    """The installer and, beside it, its ``.sha256sum`` as NVIDIA publishes it (``HASH  NAME``)."""
    installer.write_text(text)
    digest = sha256 or hashlib.sha256(text.encode()).hexdigest()
    installer.with_name(installer.name + ".sha256sum").write_text(f"{digest}  NVIDIA-Linux-x86_64-{version}.run\n")


def nvidia_deploy(tmp_path: Path, root: Path, extra: str = "") -> Path:
    deploy = tmp_path / "nvidia.py"
    deploy.write_text(textwrap.dedent(f"""
        from labwright.operations import guests
        guests.nvidia_userspace(name="NVIDIA userspace", root="{root}",
                                installer_url="file://{tmp_path}/fake-{{version}}.run"{extra})
        """))
    return deploy


def temp_dirs() -> set[str]:
    return {p.name for p in Path("/tmp").glob("labwright-nvidia.*")}


def test_nvidia_userspace_refuses_an_installer_that_is_not_the_published_one(repo, cli_env, tmp_path):
    root = tmp_path / "root"
    make_fake_nvidia_host(root, driver="550.54.14")
    make_container_libraries(root, "545.29.06")
    text = FAKE_INSTALLER.format(version="550.54.14", root=root)
    publish(tmp_path / "fake-550.54.14.run", text, "550.54.14", sha256="0" * 64)  # a different installer's hash
    before = temp_dirs()

    proc = pyinfra(cli_env, repo, str(nvidia_deploy(tmp_path, root)))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert not (root / "installer-args").exists()  # not run
    actual = hashlib.sha256(text.encode()).hexdigest()
    line = next(line for line in out.splitlines() if "does not match" in line)
    assert f"NVIDIA-Linux-x86_64-550.54.14.run: sha256 {actual} does not match {'0' * 64} published at " in line
    assert "the installer was not run" in line
    assert temp_dirs() <= before  # its directory removed

    # no line for this installer in the sums file: refused, not run
    (tmp_path / "fake-550.54.14.run.sha256sum").write_text(f"{actual}  NVIDIA-Linux-x86_64-999.1.run\n")
    proc = pyinfra(cli_env, repo, str(nvidia_deploy(tmp_path, root)))
    assert proc.returncode != 0 and not (root / "installer-args").exists()
    assert "no sha256 line for NVIDIA-Linux-x86_64-550.54.14.run in it" in proc.stdout + proc.stderr

    # a pinned sha256 is used instead of the published one (no sums file needed) ...
    (tmp_path / "fake-550.54.14.run.sha256sum").unlink()
    proc = pyinfra(cli_env, repo, str(nvidia_deploy(tmp_path, root, f", installer_sha256='{actual.upper()}'")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (root / "installer-args").exists()

    # ... and one that is not a sha256 is refused in one line before anything
    proc = pyinfra(cli_env, repo, str(nvidia_deploy(tmp_path, root, ", installer_sha256='abc;reboot'")))
    assert proc.returncode != 0
    assert "installer_sha256: 'abc;reboot' is not a sha256 (64 hex digits)" in proc.stdout + proc.stderr


def test_nvidia_userspace_without_a_host_driver_is_an_error(repo, cli_env, tmp_path):
    deploy = tmp_path / "nvidia.py"
    deploy.write_text(f'from labwright.operations import guests\nguests.nvidia_userspace(root="{tmp_path}")\n')
    proc = pyinfra(cli_env, repo, str(deploy))
    assert proc.returncode != 0
    assert "no NVIDIA kernel module" in proc.stdout + proc.stderr
