"""Guest snapshots on the real local LXD daemon (the test lab's ``dir`` pool: copy-based snapshots).

Each test copies the lab template into a fresh running container, snapshots it, breaks it (a package's binary
removed, a file deleted, a file added), and restores; what is checked is what the guest has afterwards
(``dpkg --verify`` of the package, the files), never only what labwright said. The CLI is run as a subprocess
for the refusals: exit 2, one line on stderr naming the input and the fix, no traceback, nothing changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labwright import snapshots
from labwright.errors import BadInput
from labwright.hostnames import parse_lxd_target
from labwright.lab.lab import wait_ready
from labwright.snapshots.lxd import LxdSnapshots
from support.snapshot_cli import assert_one_line_refusal, run_cli

pytestmark = pytest.mark.lab



def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(env, *args)


def sh(lab, name: str, script: str) -> tuple[int, str]:
    result = lab.client.exec(name, ["sh", "-c", script])
    return result.exit_code, (result.stdout + result.stderr).decode(errors="replace")


def status(lab, name: str) -> str:
    return str(lab.client.instance(name)["status"])


def names(lab, name: str) -> list[str]:
    return [s.name for s in snapshots.list_snapshots(f"@lxd/{name}", client=lab.client)]


def break_guest(lab, name: str) -> None:
    """Remove tar's binary and /root/before.txt, add /root/after.txt: what a half-done upgrade might leave."""
    code, out = sh(lab, name, "rm /usr/bin/tar /root/before.txt && echo after > /root/after.txt && ! tar --version")
    assert code == 0, out


def assert_as_snapshotted(lab, name: str) -> None:
    code, out = sh(lab, name, "dpkg --verify tar && tar --version >/dev/null && cat /root/before.txt "
                              "&& test ! -e /root/after.txt")
    assert code == 0 and "before" in out, f"the guest is not as it was when snapshotted: {out}"


def test_restore_puts_a_broken_running_guest_back(lab, lab_container):
    guest = f"@lxd/{lab_container}"
    assert sh(lab, lab_container, "echo before > /root/before.txt")[0] == 0
    taken = snapshots.take(guest, "stack-switch", client=lab.client)
    assert taken.name.startswith("labwright-stack-switch-") and len(taken.name) <= 40
    driver = pool_driver(lab)  # btrfs where the host allows (lab_pool_driver auto), else dir
    assert taken.storage == f"pool {lab.spec.pool} ({driver})" and taken.how == POOL_SNAPSHOTS[driver]
    break_guest(lab, lab_container)

    done = snapshots.restore(guest, force=True, client=lab.client)

    assert done.name == taken.name and done.steps == ["stop", "restore", "start"]
    assert status(lab, lab_container) == "Running"
    wait_ready(lab.client, lab_container)
    assert_as_snapshotted(lab, lab_container)
    assert names(lab, lab_container) == [taken.name]  # restoring keeps the snapshot


def test_running_guest_without_force_is_refused_and_untouched(lab, lab_container, cli_env):
    guest = f"@lxd/{lab_container}"
    assert sh(lab, lab_container, "echo before > /root/before.txt")[0] == 0
    taken = snapshots.take(guest, "tabbyapi-ref", client=lab.client)
    break_guest(lab, lab_container)

    result = cli(cli_env, "guest", "restore", guest, "-y")

    assert_one_line_refusal(result, guest, "is running", "--force")
    assert status(lab, lab_container) == "Running"
    code, _ = sh(lab, lab_container, "test -e /root/after.txt && test ! -e /usr/bin/tar")
    assert code == 0, "a refused restore changed the guest"
    assert names(lab, lab_container) == [taken.name]

    forced = cli(cli_env, "guest", "restore", guest, taken.name, "--force", "-y", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["steps"] == ["stop", "restore", "start"]
    wait_ready(lab.client, lab_container)
    assert_as_snapshotted(lab, lab_container)


def test_stopped_guest_is_restored_and_stays_stopped(lab, lab_container, cli_env):
    guest = f"@lxd/{lab_container}"
    assert sh(lab, lab_container, "echo before > /root/before.txt")[0] == 0
    made = cli(cli_env, "guest", "snapshot", guest, "--json")
    assert made.returncode == 0, made.stderr
    taken = json.loads(made.stdout)["name"]
    break_guest(lab, lab_container)
    lab.client.set_state(lab_container, "stop", force=True)

    dry = cli(cli_env, "guest", "restore", guest, "--dry")
    assert dry.returncode == 0 and "would restore" in dry.stdout and taken in dry.stdout, dry.stdout + dry.stderr
    restored = cli(cli_env, "guest", "restore", guest, "-y")

    assert restored.returncode == 0, restored.stderr
    assert status(lab, lab_container) == "Stopped"
    lab.client.set_state(lab_container, "start")
    wait_ready(lab.client, lab_container)
    assert_as_snapshotted(lab, lab_container)


def test_keep_last_n_prunes_only_labwrights_own(lab, lab_container, cli_env):
    guest = f"@lxd/{lab_container}"
    mine = cli(cli_env, "guest", "snapshot", guest, "--name", "mine-before-upgrade")
    assert mine.returncode == 0, mine.stderr
    taken = [snapshots.take(guest, "pkg-upgrade", keep=2, client=lab.client) for _ in range(3)]

    assert len({t.name for t in taken}) == 3  # same-second takes still get distinct names
    assert taken[2].pruned == [taken[0].name]
    assert sorted(names(lab, lab_container)) == sorted(["mine-before-upgrade", taken[1].name, taken[2].name])

    listed = cli(cli_env, "guest", "snapshots", guest, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row["labwright"] for row in json.loads(listed.stdout)}
    assert rows == {"mine-before-upgrade": False, taken[1].name: True, taken[2].name: True}


def test_a_name_that_exists_is_refused_and_nothing_is_taken(lab, lab_container, cli_env):
    guest = f"@lxd/{lab_container}"
    assert cli(cli_env, "guest", "snapshot", guest, "--name", "mine").returncode == 0
    before = names(lab, lab_container)

    again = cli(cli_env, "guest", "snapshot", guest, "--name", "mine")
    assert_one_line_refusal(again, guest, "'mine'", "exists already", "--name")
    reserved = cli(cli_env, "guest", "snapshot", guest, "--name", "labwright-x")
    assert_one_line_refusal(reserved, "'labwright-x'", "--name")
    missing = cli(cli_env, "guest", "restore", guest, "nosuch", "--force", "-y")
    assert_one_line_refusal(missing, "'nosuch'", "mine")
    dry = cli(cli_env, "guest", "snapshot", guest, "--dry")
    assert dry.returncode == 0 and "would take" in dry.stdout, dry.stdout + dry.stderr

    assert names(lab, lab_container) == before == ["mine"]
    with pytest.raises(BadInput, match="no labwright snapshot to restore; name one of its snapshots: mine"):
        snapshots.restore(guest, client=lab.client)


def test_missing_guest_is_one_line(lab, cli_env):
    result = cli(cli_env, "guest", "snapshots", "@lxd/lws-does-not-exist")
    assert_one_line_refusal(result, "@lxd/lws-does-not-exist", "lxc list")


#: What labwright says of a snapshot on each pool the test lab can have (LXD: a dir pool copies the rootfs,
#: lxd/storage/drivers/driver_dir_volumes.go; btrfs makes a subvolume snapshot, driver_btrfs_volumes.go).
POOL_SNAPSHOTS = {
    "dir": "copy (dir pool: each snapshot is a full copy of the root filesystem; slower, and as large as it)",
    "btrfs": "native (btrfs subvolume snapshot)",
}


def pool_driver(lab) -> str:
    return str(lab.client.get_or_none(f"/1.0/storage-pools/{lab.spec.pool}")["driver"])


def test_lab_pool_is_reported_with_its_driver_and_how_it_snapshots(lab, lab_container):
    support = LxdSnapshots(parse_lxd_target(lab_container), lab.client).support()
    driver = pool_driver(lab)
    assert support.supported and support.storage == f"pool {lab.spec.pool} ({driver})"
    assert support.how == POOL_SNAPSHOTS[driver]
    assert support.how.startswith("copy" if driver == "dir" else "native")



RISKY_DEPLOY = """
from pyinfra import host
from pyinfra.api import operation

from labwright.snapshots.deploy import snapshot_command


@operation(is_idempotent=False)
def risky():
    yield from snapshot_command(host, "stack-switch")
    yield "echo changed >> /root/risky.log"


risky(name="risky step")
"""


def test_a_pyinfra_step_snapshots_first_when_it_runs(lab, lab_container, cli_env, tmp_path):
    """The command a risky operation yields: no snapshot under --dry or with snapshot_before=false; on a real
    run the snapshot is taken before the change, and restoring it undoes exactly that run's change."""
    deploy = tmp_path / "risky.py"
    deploy.write_text(RISKY_DEPLOY)
    target = f"@lxd/{lab_container}"

    def pyinfra(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", *extra, target, str(deploy)],
                              capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=600)

    def changes() -> int:
        code, out = sh(lab, lab_container, "cat /root/risky.log 2>/dev/null || true")
        return out.count("changed")

    dry = pyinfra("--dry")
    assert dry.returncode == 0, dry.stderr
    assert names(lab, lab_container) == [] and changes() == 0
    off = pyinfra("--data", "snapshot_before=false")
    assert off.returncode == 0, off.stderr
    assert names(lab, lab_container) == [] and changes() == 1

    run = pyinfra("--data", "snapshot_keep=1")

    assert run.returncode == 0, run.stderr
    taken = names(lab, lab_container)
    assert len(taken) == 1 and taken[0].startswith("labwright-stack-switch-"), taken
    assert changes() == 2
    snapshots.restore(f"@lxd/{lab_container}", force=True, client=lab.client)
    wait_ready(lab.client, lab_container)
    assert changes() == 1  # the snapshot was taken before the change, after the earlier run's

    chained = tmp_path / "chained.py"
    chained.write_text("from labwright.snapshots.deploy import snapshot\n"
                       "snapshot(name='Snapshot before the desktop packages', step='desktop')\n")
    second = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", target, str(chained)],
                            capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=600)
    assert second.returncode == 0, second.stderr
    assert [n for n in names(lab, lab_container) if n.startswith("labwright-desktop-")], names(lab, lab_container)
