"""Backup and restore of a host's flash chip with flashrom, with the runbook's safety checks.

Backup: flashrom present (and /dev/mem for ``internal``) → read the whole chip TWICE on the host → the two sha256
must match (a mismatch is an SPI glitch or a partial read: abort, keep nothing) → copy the image off to the
controller → its sha256 there must equal the host's → decode the Intel Flash Descriptor → write the image and its
manifest (chip, size, sha256, regions, flashrom version, date). Files are named after the host and the image's
sha256, so backing up an unchanged chip again writes nothing new.

Restore: the image must have a descriptor, match its manifest's sha256 when one lies beside it, and be exactly the
chip's size; a chip that already holds it is left alone; without ``yes`` it only prints the plan; with it the image
is copied to the host, checked there, and written with flashrom's verify.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labwright.bios import flashrom, ifd
from labwright.bios import manifest as manifest_module
from labwright.bios.manifest import SCHEMA, manifest_path
from labwright.bios.target import Target
from labwright.digest import sha256_file
from labwright.errors import BadInput, OperationFailed
from labwright.shell import quote
from labwright.ui import Reporter


def safe_label(label: str) -> str:
    """A file-name-safe form of a pyinfra target: ``@lxd/node1`` → ``lxd-node1``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-.") or "host"


def check_out_dir(out: Path) -> Path:
    """BadInput unless ``out`` is a writable directory or can become one; creates nothing (``made_out_dir`` does,
    once there is something to keep)."""
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if existing is None:
        raise BadInput(f"--out {out}: no part of this path exists; pick a directory you can write to")
    if not existing.is_dir():
        raise BadInput(f"--out {out}: {existing} is a file, not a directory; pick a directory for the backups")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"--out {out}: {existing} is not writable; pick a directory you can write to")
    return out


@contextmanager
def made_out_dir(out: Path) -> Iterator[Path]:
    """Create ``out`` (and missing parents) for the block; when the block fails, remove what it created, so a failed
    backup leaves no directory behind (the sweep found failed runs leaving their --out)."""
    missing = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out}: cannot create it ({exc.strerror})") from None
    try:
        yield out
    except BaseException:
        for created in missing:  # deepest first
            with suppress(OSError):
                created.rmdir()  # only when empty: never anything a user put there
        raise


@contextmanager
def workdir(target: Target) -> Iterator[str]:
    """A private temp directory on the host, removed afterwards whatever happens."""
    path = target.check("mktemp -d /tmp/labwright-bios.XXXXXX", "mktemp").stdout.strip()
    try:
        yield path
    finally:
        target.run(f"rm -rf {quote(path)}")


@dataclass
class Backup:
    image: Path
    manifest_file: Path
    manifest: dict[str, Any]
    new: bool
    descriptor: ifd.Descriptor | None = None
    notes: list[str] = field(default_factory=list)


def read_twice(target: Target, programmer: str, work: str,
               reporter: Reporter) -> tuple[flashrom.Chip, str, int, list[dict[str, Any]]]:
    """Two whole-chip reads on the host: their common sha256 and size, and the region access flashrom reported;
    OperationFailed when they differ."""
    first, second = f"{work}/read1.bin", f"{work}/read2.bin"
    with reporter.step(f"{target.label}: flashrom read 1 of 2"):
        chip, output = flashrom.read(target, programmer, first)
    with reporter.step(f"{target.label}: flashrom read 2 of 2"):
        chip_again, _ = flashrom.read(target, programmer, second)
    if chip_again != chip:
        raise OperationFailed(f"{target.label}: the two reads found different chips ({chip.name}, {chip_again.name})"
                              ": check the clip/cable and run again; nothing was kept")
    out = target.check(f"sha256sum {quote(first)} {quote(second)}; stat -c %s {quote(first)}",
                       "hashing the reads").stdout.split()
    sha1, sha2, size = out[0], out[2], int(out[4])
    if sha1 != sha2:
        raise OperationFailed(f"{target.label}: the two reads differ (sha256 {sha1[:16]}… vs {sha2[:16]}…): an SPI "
                              "glitch or a partial read; nothing was kept; reseat the clip / stop what else uses the "
                              "chip and run the backup again")
    if size != chip.size:
        raise OperationFailed(f"{target.label}: read {size} bytes but the chip {chip.name} has {chip.size}: a partial "
                              "read; nothing was kept")
    return chip, sha1, size, flashrom.parse_access(output)


def backup(target: Target, programmer: str, out: Path, reporter: Reporter | None = None,
           platform: str | None = None) -> Backup:
    """``platform``: ifdtool's ``-p`` name, for descriptors that cannot say their version (see labwright.bios.ifd)."""
    reporter = reporter or Reporter()
    flashrom.check_programmer(programmer)
    if platform is not None:
        ifd.check_platform(platform)
    out = check_out_dir(out)
    version = flashrom.preflight(target, programmer)
    with workdir(target) as work:
        chip, sha, size, access = read_twice(target, programmer, work, reporter)
        name = f"{safe_label(target.label)}-{chip.name.replace('/', '_')}-{sha[:12]}"
        image, meta = out / f"{name}.bin", manifest_path(out / f"{name}.bin")
        if image.exists() and meta.exists() and sha256_file(image) == sha:
            existing = manifest_module.load(meta)
            descriptor = _decode(image.read_bytes(), str(image), platform)
            return Backup(image, meta, existing, False, descriptor,
                          [f"unchanged: {image} already holds this chip's contents (sha256 {sha[:16]}…)"])
        with made_out_dir(out):
            descriptor, notes = _copy_off(target, work, image, sha, size, platform, reporter)
            warnings = (list(descriptor.warnings) if descriptor else notes) + flashrom.access_warnings(access)
            manifest = {
                "schema": SCHEMA, "host": target.label, "programmer": programmer, "chip": chip.to_json(),
                "size": size, "sha256": sha, "reads": 2, "image": image.name, "flashrom_version": version,
                "platform": platform, "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "descriptor": descriptor.to_json() if descriptor else None,
                "regions": [r.to_json() for r in descriptor.regions] if descriptor else [],
                "gbe_mac": descriptor.gbe_mac if descriptor else None,
                "flashrom_region_access": access, "warnings": warnings,
            }
            try:
                manifest_module.write(meta, manifest)
            except BaseException:
                image.unlink(missing_ok=True)  # an image without its manifest is not a backup to trust
                raise
    return Backup(image, meta, manifest, True, descriptor, notes)


def _copy_off(target: Target, work: str, image: Path, sha: str, size: int, platform: str | None,
              reporter: Reporter) -> tuple[ifd.Descriptor | None, list[str]]:
    """Copy the host's read to ``image`` through a hidden partial file (fsynced, then renamed), checking its sha256
    and that it is not all 0xFF; nothing is left under the final name unless every check passed."""
    partial = image.with_name(f".{image.stem}.bin.partial")
    try:
        with reporter.step(f"{target.label}: copying the {size // 1024} KiB image to {image.parent}"):
            target.get_file(f"{work}/read1.bin", partial)
        copied = sha256_file(partial)
        if copied != sha:
            raise OperationFailed(f"{target.label}: the copy's sha256 {copied[:16]}… is not the host's "
                                  f"{sha[:16]}…: the transfer corrupted it; nothing was kept, run again")
        data = partial.read_bytes()
        if data.count(0xFF) == len(data):
            raise OperationFailed(f"{target.label}: the chip reads as all 0xFF (erased, or a programmer that "
                                  "reads nothing, e.g. a dummy image file of the wrong size); nothing was kept")
        descriptor, notes = _decode_kept(data, str(image), platform)
        with partial.open("rb") as handle:
            os.fsync(handle.fileno())  # on disk before its name says it is a backup
        os.replace(partial, image)
        return descriptor, notes
    finally:
        with suppress(FileNotFoundError):
            partial.unlink()


def _decode(data: bytes, source: str, platform: str | None = None) -> ifd.Descriptor | None:
    return _decode_kept(data, source, platform)[0]


def _decode_kept(data: bytes, source: str, platform: str | None = None) -> tuple[ifd.Descriptor | None, list[str]]:
    """The descriptor of what was read, or None and why: a backup is kept as read either way."""
    if not ifd.has_descriptor(data):
        return None, ["no Intel Flash Descriptor: not an Intel board's whole chip; kept as read"]
    try:
        return ifd.decode(data, source, platform), []
    except BadInput as exc:
        return None, [f"the Intel Flash Descriptor does not decode ({exc}); kept as read"]


@dataclass
class RestorePlan:
    image: Path
    sha256: str
    size: int
    descriptor: ifd.Descriptor
    chip_size: int = 0
    chip_sha256: str = ""
    chip_mac: str | None = None

    def warnings(self) -> list[str]:
        found = list(self.descriptor.warnings)
        if self.descriptor.gbe_mac and self.chip_mac and self.chip_mac != self.descriptor.gbe_mac:
            found.append(f"the chip's GbE MAC is {self.chip_mac} but the image carries {self.descriptor.gbe_mac}: "
                         "this image was taken from another board (or another NIC setting); flashing it gives "
                         "this board that MAC")
        return found

    @property
    def unchanged(self) -> bool:
        return self.chip_sha256 == self.sha256


def check_restore_image(image: Path, platform: str | None = None) -> tuple[bytes, str, ifd.Descriptor]:
    """Local checks before touching any host: readable, a descriptor, 16 MiB, its manifest's sha256 if present."""
    if image.exists() and not image.is_file() and not image.is_dir():
        # a pipe or device: read once to check and again to hash and copy, it would not be the same bytes (and a
        # pipe nobody writes to blocks the read for ever)
        raise BadInput(f"IMAGE {image} is not a regular file (a pipe, socket or device); give the path of the image "
                       "file `labwright bios backup` wrote")
    try:
        data = image.read_bytes()
    except OSError as exc:
        raise BadInput(f"IMAGE {image}: cannot read it ({exc.strerror})") from None
    descriptor = ifd.decode(data, f"IMAGE {image}", platform)
    sha = sha256_file(image)
    meta = manifest_path(image)
    if meta.exists():
        recorded = manifest_module.load(meta).get("sha256")
        if recorded != sha:
            raise BadInput(f"IMAGE {image}: sha256 {sha[:16]}… is not its manifest's {str(recorded)[:16]}…: the "
                           "backup changed since it was taken; do not flash it")
    return data, sha, descriptor


def plan_restore(target: Target, image: Path, programmer: str, work: str, reporter: Reporter,
                 platform: str | None = None) -> RestorePlan:
    data, sha, descriptor = check_restore_image(image, platform)
    flashrom.preflight(target, programmer)
    with reporter.step(f"{target.label}: asking flashrom for the chip's size"):
        chip_size = flashrom.flash_size(target, programmer)
    ifd.check_image(data, f"IMAGE {image}", chip_size, platform)
    with reporter.step(f"{target.label}: reading the chip's current contents"):
        flashrom.read(target, programmer, f"{work}/current.bin")
    current = target.sha256(f"{work}/current.bin")
    gbe = next((r for r in descriptor.regions if r.index == ifd.GBE and r.used), None)
    mac = None
    if gbe is not None:
        # The chip's MAC where the image's descriptor puts the GbE region: 6 bytes, read on the host.
        raw = target.check(f"od -An -tx1 -j {gbe.base} -N6 {quote(work)}/current.bin", "reading the MAC")
        mac = ifd.format_mac(bytes.fromhex("".join(raw.stdout.split())))
    return RestorePlan(image, sha, len(data), descriptor, chip_size, current, mac)


def restore(target: Target, image: Path, programmer: str, yes: bool,
            reporter: Reporter | None = None, platform: str | None = None) -> tuple[RestorePlan, str]:
    """Returns the plan and what happened: "unchanged", "dry run" or the flashrom verify line. An image whose
    descriptor version cannot be told (and no ``platform`` given) is refused before anything is read or written."""
    reporter = reporter or Reporter()
    flashrom.check_programmer(programmer)
    check_restore_image(image, platform)  # bad images are refused before connecting work starts
    with workdir(target) as work:
        plan = plan_restore(target, image, programmer, work, reporter, platform)
        if plan.unchanged:
            return plan, "unchanged"
        if not yes:
            return plan, "dry run"
        remote = f"{work}/restore.bin"
        with reporter.step(f"{target.label}: copying {image.name} to the host"):
            target.put_file(image, remote)
        if target.sha256(remote) != plan.sha256:
            raise OperationFailed(f"{target.label}: the image's copy on the host does not match its sha256; "
                                  "nothing was written")
        with reporter.step(f"{target.label}: flashrom -w (erase, write, verify)"):
            verified = flashrom.write(target, programmer, remote)
        return plan, verified
