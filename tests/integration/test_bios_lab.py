"""deploys/bios_backup.py and `labwright bios` through the @lxd connector, in a fresh lab container.

The container gets Debian's flashrom 1.3.0 from the deploy itself (apt, from the Debian mirror) and a 16 MiB chip
emulated by flashrom's dummy programmer, backed by an X99-layout image pushed to /root/chip.bin (no real SPI flash
can be reached from a container). The flaky read is tests/support/doubles/flashrom-glitchy-second-read, installed as
/usr/local/sbin/flashrom for one test: a stand-in that runs the real flashrom and changes a byte of read 2.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import Deployed, DeployRun, run_pyinfra, tool_env
from support.bios_image import X99_REGIONS, dummy_programmer, x99_image

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
CHIP = "/root/chip.bin"
PROGRAMMER = dummy_programmer(CHIP)
GLITCHY = REPO / "tests" / "support" / "doubles" / "flashrom-glitchy-second-read"


def labwright(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["labwright", *args], cwd=REPO, env=tool_env(), capture_output=True, text=True,
                          timeout=180)


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1 and result.stderr.rstrip().splitlines()[-1] == errors[0], result.stderr
    return errors[0]


def deploy(name: str, out: Path) -> DeployRun:
    return run_pyinfra(f"@lxd/{name}", "deploys/bios_backup.py", f"bios_programmer={PROGRAMMER}",
                       f"bios_out={out}", cwd=REPO, timeout=600)


def pull(lab: Lab, name: str, path: str) -> bytes:
    buffer = io.BytesIO()
    lab.client.pull_file(name, path, buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bios-out")


@pytest.fixture(scope="module")
def deployed(lab: Lab, out_dir: Path) -> Iterator[Deployed]:
    """One container: the CLI tried before flashrom is there, then the deploy's first run."""
    name = lab.fresh("lwbios")
    try:
        lab.client.push_file(name, CHIP, x99_image(), mode=0o644)
        before = labwright("bios", "backup", f"@lxd/{name}", "-p", PROGRAMMER, "--out", str(out_dir))
        first = deploy(name, out_dir)
        yield Deployed(name, "", before, first)
    finally:
        lab.remove(name)


def test_host_without_flashrom_is_one_line_and_nothing_is_written(deployed: Deployed, out_dir: Path) -> None:
    before = deployed.before
    assert before.returncode == 1
    assert f"@lxd/{deployed.name}: flashrom is not installed; run `pyinfra @lxd/{deployed.name} " \
           "deploys/bios_backup.py`" in error_line(before)
    assert before.stderr.count("\n") == 1


def test_deploy_installs_flashrom_reads_twice_and_copies_off(deployed: Deployed, out_dir: Path) -> None:
    first = deployed.first
    assert first.rc == 0, first.output[-4000:]
    assert "Install flashrom" in first.output and first.totals.changed == 2
    images = sorted(out_dir.glob("*.bin"))
    assert [p.name for p in images] == [f"lxd-{deployed.name}-W25Q128.V-"
                                        f"{hashlib.sha256(x99_image()).hexdigest()[:12]}.bin"]
    assert images[0].read_bytes() == x99_image()
    manifest = json.loads(images[0].with_suffix(".json").read_text())
    assert manifest["host"] == f"@lxd/{deployed.name}" and manifest["reads"] == 2
    assert manifest["sha256"] == hashlib.sha256(x99_image()).hexdigest()
    assert {r["name"]: (r["base"], r["limit"]) for r in manifest["regions"] if r["used"]} == X99_REGIONS
    assert "1.3.0" in manifest["flashrom_version"] and manifest["gbe_mac"] == "0c:c4:7a:12:34:56"
    assert "would lose it" in first.output


def test_second_deploy_run_installs_nothing_and_writes_nothing(deployed: Deployed, out_dir: Path) -> None:
    assert deployed.first.rc == 0
    stamps = {p.name: p.stat().st_mtime_ns for p in out_dir.iterdir()}
    second = deploy(deployed.name, out_dir)
    assert second.rc == 0, second.output[-4000:]
    assert "Install flashrom" not in second.output
    # The backup op reads the chip again (that is the check), keeps nothing new and reports no change.
    assert second.totals.changed == 0 and second.totals.no_change >= 1  # the guest lock adds no-change ops
    assert "unchanged:" in second.output and "backup written" not in second.output
    assert {p.name: p.stat().st_mtime_ns for p in out_dir.iterdir()} == stamps


def test_flaky_read_through_lxd_aborts(lab: Lab, deployed: Deployed, tmp_path: Path) -> None:
    """flashrom-glitchy-second-read (a stand-in for an SPI glitch) ahead of the real flashrom in the container."""
    assert deployed.first.rc == 0
    lab.client.push_file(deployed.name, "/usr/local/sbin/flashrom", GLITCHY.read_bytes(), mode=0o755)
    try:
        result = labwright("bios", "backup", f"@lxd/{deployed.name}", "-p", PROGRAMMER, "--out", str(tmp_path))
    finally:
        lab.client.delete_file(deployed.name, "/usr/local/sbin/flashrom")
    assert result.returncode == 1
    assert "the two reads differ" in error_line(result)
    assert list(tmp_path.iterdir()) == []
    assert pull(lab, deployed.name, CHIP) == x99_image()


def test_restore_through_lxd_writes_and_verifies(lab: Lab, deployed: Deployed, tmp_path: Path) -> None:
    assert deployed.first.rc == 0
    new = tmp_path / "v2.bin"
    new.write_bytes(x99_image(marker=b"labwright test BIOS v2"))
    dry = labwright("bios", "restore", f"@lxd/{deployed.name}", str(new), "-p", PROGRAMMER)
    assert dry.returncode == 0 and "dry run: nothing written" in dry.stdout, dry.stderr
    assert pull(lab, deployed.name, CHIP) == x99_image()
    try:
        done = labwright("bios", "restore", f"@lxd/{deployed.name}", str(new), "-p", PROGRAMMER, "--yes")
        assert done.returncode == 0, done.stderr
        assert "VERIFIED" in done.stdout
        assert pull(lab, deployed.name, CHIP) == new.read_bytes()
    finally:
        lab.client.push_file(deployed.name, CHIP, x99_image())


def test_backup_over_real_ssh(lab: Lab, deployed: Deployed, tmp_path: Path) -> None:
    """The same container reached by address over SSH (pyinfra's @ssh connector, the lab key, its host key known)."""
    assert deployed.first.rc == 0
    address = instance_address(lab.client, deployed.name)
    assert address
    key_type, key = lab.client.exec(deployed.name, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.decode() \
        .split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{address} {key_type} {key}\n")
    result = labwright("bios", "backup", address, "-p", PROGRAMMER, "--out", str(tmp_path / "out"), "--json",
                       "--data", "ssh_user=root", "--data", f"ssh_key={lab.private_key_path}",
                       "--data", f"ssh_known_hosts_file={known_hosts}")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["manifest"]["host"] == address
    assert Path(report["image"]).read_bytes() == x99_image()


def test_internal_programmer_without_dev_mem_is_one_line(deployed: Deployed, tmp_path: Path) -> None:
    assert deployed.first.rc == 0
    result = labwright("bios", "backup", f"@lxd/{deployed.name}", "--out", str(tmp_path))  # default: internal
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "the internal programmer needs root and /dev/mem, and here /dev/mem" in error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_node_that_does_not_exist_is_one_line(lab: Lab, tmp_path: Path) -> None:
    result = labwright("bios", "backup", "@lxd/lwbios-no-such-node", "-p", PROGRAMMER, "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "HOST @lxd/lwbios-no-such-node: cannot connect (lwbios-no-such-node: no such container" \
        in error_line(result)
    assert not (tmp_path / "o").exists()
