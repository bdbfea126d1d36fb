"""Intel Flash Descriptor (IFD) decoder: signature, FLMAP0..2, the FLREG regions and FLMSTR access rights.

Layout (Intel SPI programming guides, as coreboot's ``ifdtool -d`` prints it): the signature 0x0FF0A55A sits at
0x10; FLMAP0 (0x14) holds FRBA (region table base, bits 16..23, times 16) and FCBA (component base, bits 0..7,
times 16); FLMAP1 (0x18) holds FMBA (master table base, bits 0..7, times 16) and NM (masters, bits 8..10).
Each FLREG is ``limit >> 12`` in its upper half and ``base >> 12`` in its lower half (12 bits on IFD v1, 15 on v2);
a region whose base is above its limit is unused. Each FLMSTR grants read/write per region: bits 16+r / 24+r on
v1, 8+r / 20+r on v2. The version is told apart as ifdtool does, by FLCOMP's read clock (20 MHz: v1, 17 MHz: v2).

The GbE region starts with the NIC's MAC address: an image that carries only the BIOS region (what vendor
"BIOS update" files are) would leave the board without it when flashed whole, hence the warning in the report.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from typing import Any

from labwright.errors import BadInput

SIGNATURE = 0x0FF0A55A
SIGNATURE_OFFSET = 0x10
#: The chip size the runbook's boards (X99 and most desktop boards since) carry.
SIXTEEN_MIB = 16 * 1024 * 1024

REGION_NAMES = ("Flash Descriptor", "BIOS", "Intel ME", "GbE", "Platform Data", "Device Exp. 1", "Secondary BIOS",
                "Reserved", "EC", "Device Exp. 2", "IE", "10GbE_0", "10GbE_1", "Reserved", "Reserved", "PTT")
MASTER_NAMES = ("Host CPU/BIOS", "Intel ME", "GbE", "Reserved", "EC")
GBE = 3


@dataclass(frozen=True)
class Region:
    index: int
    name: str
    base: int
    limit: int
    raw: int

    @property
    def used(self) -> bool:
        return self.base <= self.limit

    @property
    def size(self) -> int:
        return self.limit - self.base + 1 if self.used else 0

    def span(self) -> str:
        return f"0x{self.base:08x}-0x{self.limit:08x}" if self.used else "unused"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "base": self.base, "limit": self.limit, "used": self.used,
                "size": self.size, "range": self.span(), "flreg": f"0x{self.raw:08x}"}


@dataclass(frozen=True)
class Master:
    index: int  # 1-based, as FLMSTR1..n
    name: str
    raw: int
    read: tuple[str, ...]
    write: tuple[str, ...]
    requester_id: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"flmstr": f"0x{self.raw:08x}", "read": list(self.read), "write": list(self.write)}


@dataclass(frozen=True)
class Descriptor:
    version: int
    flmap0: int
    flmap1: int
    flmap2: int
    flcomp: int
    regions: tuple[Region, ...]
    masters: tuple[Master, ...]
    gbe_mac: str | None = None
    warnings: tuple[str, ...] = field(default=())

    def region(self, name: str) -> Region | None:
        return next((r for r in self.regions if r.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "flmap0": f"0x{self.flmap0:08x}", "flmap1": f"0x{self.flmap1:08x}",
                "flmap2": f"0x{self.flmap2:08x}", "flcomp": f"0x{self.flcomp:08x}",
                "regions": [r.to_json() for r in self.regions], "masters": [m.to_json() for m in self.masters],
                "gbe_mac": self.gbe_mac, "warnings": list(self.warnings)}


def _u32(data: bytes, offset: int) -> int:
    return int(struct.unpack_from("<I", data, offset)[0])


def has_descriptor(data: bytes) -> bool:
    return len(data) >= 0x20 and _u32(data, SIGNATURE_OFFSET) == SIGNATURE


def decode(data: bytes, source: str = "image") -> Descriptor:
    """Decode the descriptor of a whole-chip image; BadInput naming ``source`` when it has none or is malformed."""
    if not has_descriptor(data):
        raise BadInput(f"{source}: no Intel Flash Descriptor (signature 0x0FF0A55A not at 0x10): not a whole-chip "
                       "image of an Intel board (a BIOS-region-only update file?)")
    flmap0, flmap1, flmap2 = _u32(data, 0x14), _u32(data, 0x18), _u32(data, 0x1C)
    fcba = (flmap0 & 0xFF) << 4
    frba = ((flmap0 >> 16) & 0xFF) << 4
    fmba = (flmap1 & 0xFF) << 4
    masters_count = (flmap1 >> 8) & 0x7
    flcomp = _u32(data, fcba) if fcba + 4 <= len(data) else 0
    version = 2 if (flcomp >> 17) & 0x7 == 6 else 1
    mask = 0x7FFF if version == 2 else 0xFFF
    if frba == 0 or frba + 4 * 5 > min(len(data), 0x1000):
        raise BadInput(f"{source}: descriptor's region table (FRBA 0x{frba:x}) lies outside the descriptor")
    regions = []
    for index, name in enumerate(REGION_NAMES):
        offset = frba + 4 * index
        if offset + 4 > 0x1000 or (index >= 5 and fmba and offset >= fmba):
            break
        raw = _u32(data, offset)
        region = Region(index, name, (raw & mask) << 12, ((raw >> 16) & mask) << 12 | 0xFFF, raw)
        # Past the five v1 regions only real entries count (the table is followed by 0xFF or the master table).
        if index < 5 or (raw != 0xFFFFFFFF and region.used):
            regions.append(region)
    masters = []
    for number in range(1, (masters_count or 3) + 1):
        offset = fmba + 4 * (number - 1)
        if fmba == 0 or offset + 4 > 0x1000:
            break
        raw = _u32(data, offset)
        read_shift, write_shift, count = (8, 20, 12) if version == 2 else (16, 24, 5)
        read = tuple(REGION_NAMES[r] for r in range(count) if raw >> (read_shift + r) & 1)
        write = tuple(REGION_NAMES[r] for r in range(count) if raw >> (write_shift + r) & 1)
        name = MASTER_NAMES[number - 1] if number <= len(MASTER_NAMES) else f"Master {number}"
        masters.append(Master(number, name, raw, read, write, raw & 0xFFFF if version == 1 else 0))
    warnings = []
    mac = None
    for region in regions:
        if region.used and region.limit >= len(data):
            raise BadInput(f"{source}: region {region.name} ends at 0x{region.limit:x}, beyond the image's "
                           f"{len(data)} bytes: the image is cut short or not this chip's")
    gbe = next((r for r in regions if r.index == GBE and r.used), None)
    if gbe is not None:
        mac = format_mac(data[gbe.base:gbe.base + 6])
        warnings.append(f"GbE region {gbe.span()} holds the onboard NIC's MAC address ({mac or 'blank'}): an image "
                        "of the BIOS region alone would lose it; restore whole-chip images only")
    return Descriptor(version, flmap0, flmap1, flmap2, flcomp, tuple(regions), tuple(masters), mac, tuple(warnings))


def format_mac(raw: bytes) -> str | None:
    """``aa:bb:..`` or None for an unprogrammed (all 0xFF / all zero) address."""
    if len(raw) != 6 or raw in (b"\xff" * 6, b"\x00" * 6):
        return None
    return ":".join(f"{b:02x}" for b in raw)


def check_image(data: bytes, source: str, chip_size: int | None = None) -> Descriptor:
    """What restore insists on before any write: the chip's size (16 MiB when unknown) and a valid descriptor."""
    expected = chip_size or SIXTEEN_MIB
    if len(data) != expected:
        what = "the chip's size" if chip_size else "16 MiB"
        raise BadInput(f"{source}: {len(data)} bytes, not {expected} ({what}): not a whole-chip image for this "
                       "board; use the image `labwright bios backup` wrote")
    return decode(data, source)
