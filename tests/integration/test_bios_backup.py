"""labwright bios backup/restore with the REAL flashrom 1.3.0 (Debian) and its dummy programmer.

The "chip" is flashrom's dummy programmer emulating a 16 MiB Winbond W25Q128FV backed by an image file (no board's
SPI flash can be reached here); the image carries a real Intel Flash Descriptor in the seed's X99 layout, checked
against coreboot's ``ifdtool -d``. A flaky read is
``tests/support/doubles/flashrom-glitchy-second-read``, a stand-in that runs the real flashrom and changes one byte
of every second read. These tests run on this machine (``@local``);
test_bios_lab.py runs the same paths through the ``@lxd`` connector and the pyinfra deploy.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from labwright.bios import backup as backup_module
from labwright.bios import ifd
from labwright.bios.target import Target
from labwright.cli import main
from labwright.errors import OperationFailed
from labwright.testing.pyinfra_output import run_pyinfra, tool_env
from labwright.ui import Reporter
from support.bios_image import X99_REGIONS, dummy_programmer, write_x99_image

REPO = Path(__file__).resolve().parents[2]
Cli = Callable[..., subprocess.CompletedProcess[str]]
GLITCHY = REPO / "tests" / "support" / "doubles" / "flashrom-glitchy-second-read"
LOCKED_ME = REPO / "tests" / "support" / "doubles" / "flashrom-locked-me"


def labwright(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as users run it, in its own process."""
    return subprocess.run(["labwright", *args], cwd=REPO, env=env or tool_env(), capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI's main() in this process (exit code, stdout, stderr as a user sees them; no interpreter start)."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        rc = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["labwright", *args], rc, out, err)
    return run


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line (progress lines of steps that ran may precede it on stderr)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1, result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == errors[0], result.stderr
    return errors[0]


@pytest.fixture
def chip(tmp_path: Path) -> Path:
    return write_x99_image(tmp_path / "chip.bin")


def parse_ifdtool(text: str) -> tuple[dict[str, tuple[int, int] | None], dict[str, tuple[set[str], set[str]]]]:
    """``ifdtool -d``: regions (None when unused) and, per master, the regions it may read / write."""
    regions: dict[str, tuple[int, int] | None] = {}
    for name, base, limit, unused in re.findall(r"Flash Region \d+ \(([^)]+)\): ([0-9a-f]{8}) - ([0-9a-f]{8})"
                                               r" ?(\(unused\))?", text):
        regions[name] = None if unused else (int(base, 16), int(limit, 16))
    masters: dict[str, tuple[set[str], set[str]]] = {}
    for master, body in re.findall(r"FLMSTR\d:\s+0x[0-9a-f]+ \(([^)]+)\)\n((?:  .*\n)+)", text):
        read = {m for m in re.findall(r"  (.+?) Region Read Access:\s+enabled", body)}
        read |= {"Flash Descriptor"} if re.search(r"Flash Descriptor Read Access:\s+enabled", body) else set()
        write = {m for m in re.findall(r"  (.+?) Region Write Access:\s+enabled", body)}
        write |= {"Flash Descriptor"} if re.search(r"Flash Descriptor Write Access:\s+enabled", body) else set()
        masters[master] = (read, write)
    return regions, masters


#: ifdtool's names for the regions in its access-rights lines (master section) -> the region table's names.
IFDTOOL_ACCESS_NAMES = {"Host CPU/BIOS": "BIOS", "Intel ME": "Intel ME", "GbE": "GbE", "Platform Data":
                        "Platform Data", "Flash Descriptor": "Flash Descriptor"}


def test_decoder_matches_ifdtool_d(chip: Path) -> None:
    result = subprocess.run(["ifdtool", "-d", str(chip)], capture_output=True, text=True, check=True)
    regions, masters = parse_ifdtool(result.stdout)
    descriptor = ifd.decode(chip.read_bytes())
    ours = {r.name: ((r.base, r.limit) if r.used else None) for r in descriptor.regions}
    assert ours == regions
    assert {k: v for k, v in regions.items() if v} == X99_REGIONS
    theirs = {name: ({IFDTOOL_ACCESS_NAMES[r] for r in read}, {IFDTOOL_ACCESS_NAMES[w] for w in write})
              for name, (read, write) in masters.items()}
    assert {m.name: (set(m.read), set(m.write)) for m in descriptor.masters} == theirs
    assert len(theirs) == 3


@pytest.mark.smoke  # real flashrom (dummy programmer): scripts/test --quick
def test_backup_reads_twice_copies_off_and_verifies(chip: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = labwright("bios", "backup", "@local", "--programmer", dummy_programmer(chip), "--out", str(out), "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    manifest, image = report["manifest"], Path(report["image"])
    assert report["new"] is True
    assert image.read_bytes() == chip.read_bytes()
    assert manifest["sha256"] == sha256(chip) == sha256(image)
    assert manifest["chip"] == {"vendor": "Winbond", "name": "W25Q128.V", "size": 16777216, "bus": "SPI"}
    assert manifest["size"] == 16777216 and manifest["reads"] == 2
    assert "1.3.0" in manifest["flashrom_version"]
    assert {r["name"]: (r["base"], r["limit"]) for r in manifest["regions"] if r["used"]} == X99_REGIONS
    assert manifest["gbe_mac"] == "0c:c4:7a:12:34:56"
    assert any("would lose it" in w for w in manifest["warnings"])
    assert json.loads(Path(report["manifest_file"]).read_text()) == manifest
    assert first.stderr.count("flashrom read") == 4  # two reads, each started and done
    # The same chip again: read again (that is the check), nothing new written.
    stamp = image.stat().st_mtime_ns, Path(report["manifest_file"]).stat().st_mtime_ns
    second = labwright("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(out))
    assert second.returncode == 0, second.stderr
    assert "unchanged:" in second.stdout and "backup written" not in second.stdout
    assert (image.stat().st_mtime_ns, Path(report["manifest_file"]).stat().st_mtime_ns) == stamp
    assert sorted(p.name for p in out.iterdir()) == [image.name, Path(report["manifest_file"]).name]
    # The text report: the regions with their ranges and who may read/write them, and the MAC warning.
    assert re.search(r"3 GbE\s+│ 0x00001000-0x00002fff │ 8 KiB", second.stdout), second.stdout
    assert "GbE MAC address: 0c:c4:7a:12:34:56" in second.stdout


def test_flaky_second_read_aborts_the_backup(chip: Path, tmp_path: Path, cli: Cli,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """flashrom-glitchy-second-read stands in for an SPI glitch: the real flashrom, one byte changed in read 2."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "flashrom").symlink_to(GLITCHY)
    monkeypatch.setenv("FLASHROM_GLITCH_STATE", str(tmp_path / "count"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{tool_env()['PATH']}")
    before = sha256(chip)
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "the two reads differ" in error_line(result) and "nothing was kept" in error_line(result)
    assert (tmp_path / "count").read_text().strip() == "2"
    assert not (tmp_path / "out").exists()  # a failed backup leaves no --out directory behind
    assert sha256(chip) == before


def test_a_locked_me_region_shows_flashrom_s_reason_and_the_region_wise_read_works(
        chip: Path, tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """flashrom-locked-me: the real flashrom (dummy programmer) with flashrom 1.4's lines for a locked ME region."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "flashrom").symlink_to(LOCKED_ME)
    monkeypatch.setenv("PATH", f"{bin_dir}:{tool_env()['PATH']}")
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    line = error_line(result)
    assert "read_flash: cannot read inside Management Engine region (0x003000..0x17ffff)." in line
    assert "FREG2: Management Engine region (0x00003000-0x0017ffff) is locked." in line
    assert not line.endswith("FAILED.") and "nothing was kept" in line
    fallback = re.search(r"`(flashrom [^`]+ --ifd -i fd -i bios -i gbe -r FILE)`", line)
    assert fallback, line
    assert not (tmp_path / "out").exists()  # a failed backup leaves no --out directory behind
    # The fallback, as printed, against the same chip: it reads, and holds the readable regions (the rest zeros).
    part = tmp_path / "part.bin"
    run = subprocess.run(fallback.group(1).replace("FILE", str(part)), shell=True, capture_output=True, text=True,
                         env={**tool_env(), "PATH": f"{bin_dir}:{tool_env()['PATH']}"}, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    data, original = part.read_bytes(), chip.read_bytes()
    for name in ("Flash Descriptor", "GbE", "BIOS"):
        base, limit = X99_REGIONS[name]
        assert data[base:limit + 1] == original[base:limit + 1], name
    assert data[0x3000:0x180000].count(0) == 0x17D000


def test_a_descriptor_of_unknown_version_is_not_restored_on_a_guess(chip: Path, tmp_path: Path, cli: Cli) -> None:
    before = sha256(chip)
    data = bytearray(chip.read_bytes())
    data[0x30:0x34] = (6 << 17).to_bytes(4, "little")  # FLCOMP read clock 17 MHz: not an IFD v1 descriptor
    image = tmp_path / "v2.bin"
    image.write_bytes(bytes(data))
    result = cli("bios", "restore", "@local", str(image), "-p", dummy_programmer(chip), "--yes")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "unknown flash descriptor version: FLCOMP 0x000c0000 read clock (bits 17-19)" in error_line(result)
    assert "--platform" in error_line(result)
    assert sha256(chip) == before
    result = cli("bios", "restore", "@local", str(image), "-p", dummy_programmer(chip), "--platform", "nope")
    assert result.returncode == 2 and "not one of ifdtool's platforms" in error_line(result)
    # With the platform given the layout is known: the plan is made (a dry run writes nothing).
    result = cli("bios", "restore", "@local", str(image), "-p", dummy_programmer(chip), "--platform", "sklkbl")
    assert result.returncode == 0, result.stderr
    assert "IFD v2, platform sklkbl" in result.stdout and sha256(chip) == before


class CorruptingTransfer(Target):
    """Stand-in for a transfer that damages the copy: the real @local copy, then one byte changed."""

    def get_file(self, remote: str, local: Path) -> None:
        super().get_file(remote, local)
        with local.open("r+b") as handle:
            handle.seek(0x200000)
            byte = handle.read(1)
            handle.seek(0x200000)
            handle.write(bytes([byte[0] ^ 0x01]))


def test_a_copy_damaged_in_transfer_is_not_kept(chip: Path, tmp_path: Path) -> None:
    plain = Target.connect("@local")
    target = CorruptingTransfer(plain.host, "@local", owned=True)
    with target, pytest.raises(OperationFailed, match="the transfer corrupted it; nothing was kept"):
        backup_module.backup(target, dummy_programmer(chip), tmp_path / "out", Reporter(quiet=True))
    assert not (tmp_path / "out").exists()  # a failed backup leaves no --out directory behind


def test_backing_file_of_the_wrong_size_reads_all_ff_and_is_refused(tmp_path: Path,
                                                                   cli: Cli) -> None:
    """flashrom's dummy ignores a wrong-size backing file and reads 0xFF with exit 0: not a backup worth keeping."""
    small = write_x99_image(tmp_path / "small.bin", size=8 * 1024 * 1024)
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(small), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "reads as all 0xFF" in error_line(result)
    assert not (tmp_path / "out").exists()  # a failed backup leaves no --out directory behind


def test_restore_dry_run_then_write_with_verify_then_unchanged(chip: Path, tmp_path: Path,
                                                              cli: Cli) -> None:
    new = write_x99_image(tmp_path / "new.bin", marker=b"labwright test BIOS v2", mac=bytes.fromhex("0cc47aabcdef"))
    before = sha256(chip)
    dry = cli("bios", "restore", "@local", str(new), "-p", dummy_programmer(chip))
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing written" in dry.stdout
    assert "the chip's GbE MAC is 0c:c4:7a:12:34:56 but the image carries 0c:c4:7a:ab:cd:ef" in dry.stdout
    assert sha256(chip) == before
    written = cli("bios", "restore", "@local", str(new), "-p", dummy_programmer(chip), "--yes")
    assert written.returncode == 0, written.stderr
    assert "written and verified (Verifying flash... VERIFIED.)" in written.stdout
    assert chip.read_bytes() == new.read_bytes()
    again = cli("bios", "restore", "@local", str(new), "-p", dummy_programmer(chip), "--yes")
    assert again.returncode == 0 and "unchanged: the chip already holds this image" in again.stdout
    plan = json.loads(cli("bios", "restore", "@local", str(new), "-p", dummy_programmer(chip), "--json").stdout)
    assert (plan["outcome"], plan["chip_sha256"], plan["chip_mac"]) == ("unchanged", sha256(new), "0c:c4:7a:ab:cd:ef")
    # A backup of the restored chip is byte-for-byte the image.
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(tmp_path / "o"),
                       "--json")
    assert json.loads(result.stdout)["manifest"]["sha256"] == sha256(new)


def test_restore_refuses_bad_images_and_changes_nothing(chip: Path, tmp_path: Path,
                                                       cli: Cli) -> None:
    before = sha256(chip)
    small = write_x99_image(tmp_path / "small.bin", size=8 * 1024 * 1024)
    result = cli("bios", "restore", "@local", str(small), "-p", dummy_programmer(chip), "--yes")
    assert result.returncode == 2
    assert re.search(r"small.bin: region BIOS ends at 0xffffff, beyond the image's 8388608 bytes", error_line(result))
    big = write_x99_image(tmp_path / "big.bin", size=32 * 1024 * 1024)  # a whole descriptor, the wrong chip
    result = cli("bios", "restore", "@local", str(big), "-p", dummy_programmer(chip), "--yes")
    assert result.returncode == 2
    assert re.search(r"big.bin: 33554432 bytes, not 16777216 \(the chip's size\)", error_line(result))

    nosig = tmp_path / "nosig.bin"
    nosig.write_bytes(b"\xff" * 16 * 1024 * 1024)
    result = cli("bios", "restore", "@local", str(nosig), "-p", dummy_programmer(chip), "--yes")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "no Intel Flash Descriptor (signature 0x0FF0A55A not at 0x10)" in error_line(result)

    # A backup that changed since its manifest was written.
    out = tmp_path / "out"
    backed = json.loads(cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(out),
                                  "--json").stdout)
    image = Path(backed["image"])
    data = bytearray(image.read_bytes())
    data[0x200000] ^= 0xFF
    image.write_bytes(bytes(data))
    result = cli("bios", "restore", "@local", str(image), "-p", dummy_programmer(chip), "--yes")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "is not its manifest's" in error_line(result) and "do not flash it" in error_line(result)

    result = cli("bios", "restore", "@local", str(tmp_path / "missing.bin"), "-p", dummy_programmer(chip))
    assert result.returncode == 2 and "cannot read it" in error_line(result)
    # Image checks come before any host is contacted: a node that does not exist is never reached.
    result = cli("bios", "restore", "@lxd/lwbios-no-such-node", str(nosig))
    assert result.returncode == 2 and "no Intel Flash Descriptor" in error_line(result)
    assert sha256(chip) == before


def test_bad_programmer_and_host_strings_are_one_line(chip: Path, tmp_path: Path,
                                                     cli: Cli) -> None:
    result = cli("bios", "backup", "@local", "-p", "internal;reboot", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--programmer 'internal;reboot': expected flashrom's NAME" in error_line(result)
    result = cli("bios", "backup", "-x", "-p", dummy_programmer(chip), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--data", "ssh_user")
    assert result.returncode == 2 and "--data 'ssh_user': expected KEY=VALUE" in error_line(result)


def test_deploy_on_local_second_run_changes_nothing_and_a_flaky_read_fails_it(chip: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """deploys/bios_backup.py on @local (flashrom already here, so no install op); the glitch is the stand-in."""
    out = tmp_path / "out"
    data = (f"bios_programmer={dummy_programmer(chip)}", f"bios_out={out}")
    first = run_pyinfra("@local", "deploys/bios_backup.py", *data, cwd=REPO)
    assert first.rc == 0, first.output[-3000:]
    assert first.totals.changed == 1  # the backup; the guest lock's take/release ops change nothing
    assert [p.read_bytes() == chip.read_bytes() for p in out.glob("*.bin")] == [True]
    second = run_pyinfra("@local", "deploys/bios_backup.py", *data, cwd=REPO)
    assert second.rc == 0 and second.totals.changed == 0 and second.totals.no_change >= 1, second.output[-3000:]
    assert "unchanged:" in second.output

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "flashrom").symlink_to(GLITCHY)
    monkeypatch.setenv("FLASHROM_GLITCH_STATE", str(tmp_path / "count"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{tool_env()['PATH']}")
    flaky_out = tmp_path / "flaky"
    flaky = run_pyinfra("@local", "deploys/bios_backup.py", f"bios_programmer={dummy_programmer(chip)}",
                        f"bios_out={flaky_out}", cwd=REPO)
    assert flaky.rc != 0
    assert "@local: the two reads differ" in flaky.output and "Traceback" not in flaky.output
    assert not flaky_out.exists()

    bad = run_pyinfra("@local", "deploys/bios_backup.py", "bios_programmer=internal;reboot", cwd=REPO)
    assert bad.rc != 0 and "bios_programmer: --programmer 'internal;reboot'" in bad.output


# --- a chip whose contents change between the two reads; failed runs leave nothing; host data checked locally ---

#: A second writer on the chip between labwright's two reads, as firmware writing its UEFI variable store (or the ME
#: its region) does on a live board. It runs the REAL flashrom for every call; after the first ``-r`` it writes the
#: chip once with the real flashrom too (``-w``, erase + write + verify), a copy of the chip with bytes changed in
#: the BIOS region. The dummy programmer loads ``image=`` at start and saves it at shutdown only when the chip was
#: written (flashrom programmers/dummyflasher.c, b946ca13a2 v1.8.0-rc1: init lines 1421-1433, shutdown 912-916;
#: the same in Debian's 1.3.0), so the second read returns the new contents: two honest reads that differ.
CHIP_WRITER = """#!/bin/sh
set -e
/usr/sbin/flashrom "$@"
out=""; prev=""
for arg in "$@"; do
    if [ "$prev" = "-r" ]; then out="$arg"; fi
    prev="$arg"
done
[ -n "$out" ] || exit 0
[ -e "$CHIP_WRITER_DONE" ] && exit 0
touch "$CHIP_WRITER_DONE"
/usr/sbin/flashrom -p "dummy:emulate=W25Q128FV,image=$CHIP_WRITER_CHIP" -w "$CHIP_WRITER_NEW" >/dev/null
"""


def test_a_chip_written_between_the_two_reads_keeps_no_backup_and_a_rerun_keeps_the_new_contents(
        chip: Path, tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "backups"
    earlier = labwright("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(out), "--json")
    assert earlier.returncode == 0, earlier.stderr
    kept = {p.name: p.read_bytes() for p in out.iterdir()}
    changed = write_x99_image(tmp_path / "nvram-updated.bin", marker=b"labwright test BIOS v1 + NVRAM write")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "flashrom").write_text(CHIP_WRITER)
    (bin_dir / "flashrom").chmod(0o755)
    monkeypatch.setenv("CHIP_WRITER_CHIP", str(chip))
    monkeypatch.setenv("CHIP_WRITER_NEW", str(changed))
    monkeypatch.setenv("CHIP_WRITER_DONE", str(tmp_path / "written"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{tool_env()['PATH']}")

    result = cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(out))
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert "@local: the two reads differ" in line and "nothing was kept" in line
    assert (tmp_path / "written").exists() and chip.read_bytes() == changed.read_bytes()  # the chip did change
    assert {p.name: p.read_bytes() for p in out.iterdir()} == kept  # the earlier backup untouched, nothing added
    fresh = tmp_path / "fresh"
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(fresh))
    assert result.returncode == 0, result.stderr  # the writer is done: the chip is stable again
    [image] = fresh.glob("*.bin")
    assert image.read_bytes() == changed.read_bytes()
    assert json.loads(image.with_suffix(".json").read_text())["sha256"] == sha256(changed)


def test_a_failed_backup_removes_only_the_directories_it_created(tmp_path: Path, cli: Cli) -> None:
    small = write_x99_image(tmp_path / "small.bin", size=8 * 1024 * 1024)  # reads as all 0xFF: refused
    out = tmp_path / "a" / "b" / "c"
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(small), "--out", str(out))
    assert result.returncode == 1 and "reads as all 0xFF" in error_line(result)
    assert not (tmp_path / "a").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept")
    result = cli("bios", "backup", "@local", "-p", dummy_programmer(small), "--out", str(mine / "bios"))
    assert result.returncode == 1
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["127.0.0.1", "--data", "ssh_port=abc"], "--data 'ssh_port=abc': ssh_port is a whole number"),
     (["127.0.0.1", "--data", "ssh_port=70000"], "--data 'ssh_port=70000': ssh_port is a TCP port, 1 to 65535"),
     (["127.0.0.1", "--data", "ssh_prot=2222"], "--data 'ssh_prot=2222': the ssh connector (127.0.0.1) has no "
                                                "ssh_prot (did you mean ssh_port?); it reads "),
     (["127.0.0.1", "--data", "ssh_look_for_keys=maybe"], "ssh_look_for_keys is true or false"),
     (["@local", "--data", "ssh_port=22"], "the local connector (@local) has no ssh_port; it reads no host data"),
     (["@nosuch/x"], "HOST @nosuch/x: no pyinfra connector '@nosuch'; use one of "),
     (["@lxd/$(id)"], "'$(id)' is not a valid container name"),
     (["@local", "--data", "ssh_user"], "--data 'ssh_user': expected KEY=VALUE")],
    ids=["port-word", "port-range", "typo", "bool", "local-data", "connector", "lxd-name", "no-equals"],
)
def test_bad_host_and_host_data_are_one_line_before_any_connection(chip: Path, tmp_path: Path, args: list[str],
                                                                   needle: str) -> None:
    """The sweep: `--data ssh_port=N` (the help's own example), an unknown connector and `@lxd/$(id)` were
    pyinfra tracebacks."""
    out = tmp_path / "out"
    result = labwright("bios", "backup", *args, "-p", dummy_programmer(chip), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr and needle in result.stderr, \
        result.stderr
    assert not out.exists()


def test_the_help_s_own_ssh_port_example_is_typed_not_a_traceback(chip: Path, tmp_path: Path) -> None:
    """`--data ssh_port=N` reaches pyinfra as an int: nothing listens on 127.0.0.1:9 (discard), so the answer is
    the one-line connection error, not pyinfra's ConnectorDataTypeError."""
    out = tmp_path / "out"
    result = labwright("bios", "backup", "127.0.0.1", "--data", "ssh_port=9", "-p", dummy_programmer(chip),
                       "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "HOST 127.0.0.1: cannot connect" in error_line(result) and "port 9" in error_line(result)
    assert "Traceback" not in result.stderr and not out.exists()


def test_an_out_that_is_a_file_is_bad_input(chip: Path, tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("x")
    result = labwright("bios", "backup", "@local", "-p", dummy_programmer(chip), "--out", str(out / "sub"))
    assert result.returncode == 2 and f"--out {out / 'sub'}: {out} is a file, not a directory" in error_line(result)
    assert out.read_text() == "x"


@pytest.mark.parametrize("host", ["n" * 300, "a" * 64 + ".example", "bad-.example", "x..example"])
def test_a_host_name_dns_cannot_hold_is_one_line_before_any_lookup(chip: Path, tmp_path: Path, host: str) -> None:
    """A 300-character host reached the resolver (idna UnicodeError, an internal error) after a paramiko line."""
    for command in (["backup", host, "--out", str(tmp_path / "out")], ["restore", host, str(chip)]):
        result = labwright("bios", *command, "-p", dummy_programmer(chip))
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "not a host name or IP address" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
