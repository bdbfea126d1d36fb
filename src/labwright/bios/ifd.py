"""Intel Flash Descriptor (IFD) decoder: signature, FLMAP0..2, the FLREG regions and FLMSTR access rights.

Layout (Intel SPI programming guides, as coreboot's ``ifdtool -d`` prints it): the signature 0x0FF0A55A sits at
0x10; FLMAP0 (0x14) holds FRBA (region table base, bits 16..23, times 16) and FCBA (component base, bits 0..7,
times 16); FLMAP1 (0x18) holds FMBA (master table base, bits 0..7, times 16) and NM (masters, bits 8..10).
Each FLREG is ``limit >> 12`` in its upper half and ``base >> 12`` in its lower half (12 bits on IFD v1, 15 on v2);
a region whose base is above its limit is unused. Each FLMSTR grants read/write per region: bits 16+r / 24+r on
v1, 8+r / 20+r on v2.

The version. A descriptor has no version field. ifdtool once told v1 from v2 by FLCOMP's read clock (20 MHz: v1,
17 MHz: v2); since coreboot commit 8c082e5fef (June 2021, in 4.15) it no longer looks: without ``-p PLATFORM`` it
decodes IFD v1, with an IFD v2 platform (adl, tgl, mtl, ...) v2, with ``wbg`` (Wellsburg, C610/X99) "v1.5"
(``check_ifd_version``/``is_platform_ifd_2`` in util/ifdtool/ifdtool.c). The read-clock field cannot say it any more:
on 500-series and newer descriptors its value 0 means 100 MHz, not 20. So labwright decodes with the platform when
given one (ifdtool's ``-p`` names), and without one only a descriptor whose own fields place it in the IFD v1
chipsets (FLCOMP read clock 20 MHz, and flashrom's content rules in ``guess_ich_chipset_from_content``: no ICC
register init table and ISL <= 16, or no MIP descriptor table with ICCRIBA < 0x31 and FMSBA < 0x30). Anything else
stops with a
line naming the field: restore never writes on a guessed layout.

Masters are decoded as ``ifdtool -d`` does: FLMSTR1 (Host CPU/BIOS), FLMSTR2 (Intel ME) and FLMSTR3 (GbE) always,
whatever NM says (NM counts from 0 on IFD v1 chipsets, flashrom's ``ich_number_of_masters``), FLMSTR5 (EC) on v2,
and on Denverton (no GbE region) FLMSTR6 (IE) instead of FLMSTR3.

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

#: ifdtool's region names (``region_names`` in util/ifdtool/ifdtool.c).
REGION_NAMES = ("Flash Descriptor", "BIOS", "Intel ME", "GbE", "Platform Data", "Device Exp1", "Secondary BIOS",
                "Reserved", "EC", "Device Exp2", "IE", "10GbE_0", "10GbE_1", "Reserved", "Reserved", "PTT")
#: The masters ``ifdtool -d`` decodes (``dump_fmba``), by FLMSTR number.
MASTER_NAMES = {1: "Host CPU/BIOS", 2: "Intel ME", 3: "GbE", 5: "EC", 6: "IE"}
GBE = 3
#: Regions on IFD v1 (ifdtool's MAX_REGIONS_OLD) and on v1.5/v2 (MAX_REGIONS).
MAX_REGIONS_V1, MAX_REGIONS = 5, 16
#: ifdtool's ``-p`` platforms (main() and is_platform_ifd_2() in util/ifdtool/ifdtool.c): name -> (IFD revision, what).
PLATFORMS = {
    "adl": ("2", "Alder Lake"), "aplk": ("2", "Apollo Lake"), "cnl": ("2", "Cannon Lake"),
    "dnv": ("2", "Denverton"), "ehl": ("2", "Elkhart Lake"), "glk": ("2", "Gemini Lake"), "icl": ("2", "Ice Lake"),
    "ifd2": ("2", "generic IFD v2"), "jsl": ("2", "Jasper Lake"), "lbg": ("2", "Lewisburg PCH"),
    "mtl": ("2", "Meteor Lake"), "nvl": ("2", "Nova Lake"), "ptl": ("2", "Panther Lake"),
    "sklkbl": ("2", "Sky Lake/Kaby Lake"), "tgl": ("2", "Tiger Lake"), "wbg": ("1.5", "Wellsburg (C610/X99)"),
}


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
    version: int  # the bit layout: 1 (IFD v1 and v1.5) or 2
    flmap0: int
    flmap1: int
    flmap2: int
    flcomp: int
    regions: tuple[Region, ...]
    masters: tuple[Master, ...]
    gbe_mac: str | None = None
    warnings: tuple[str, ...] = field(default=())
    revision: str = "1"  # "1", "1.5" (Wellsburg) or "2", as ifdtool names them
    platform: str | None = None  # ifdtool's -p name it was decoded for; None: told from the descriptor (v1)

    def region(self, name: str) -> Region | None:
        return next((r for r in self.regions if r.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "revision": self.revision, "platform": self.platform,
                "flmap0": f"0x{self.flmap0:08x}", "flmap1": f"0x{self.flmap1:08x}",
                "flmap2": f"0x{self.flmap2:08x}", "flcomp": f"0x{self.flcomp:08x}",
                "regions": [r.to_json() for r in self.regions], "masters": [m.to_json() for m in self.masters],
                "gbe_mac": self.gbe_mac, "warnings": list(self.warnings)}


def _u32(data: bytes, offset: int) -> int:
    return int(struct.unpack_from("<I", data, offset)[0])


def has_descriptor(data: bytes) -> bool:
    return len(data) >= 0x20 and _u32(data, SIGNATURE_OFFSET) == SIGNATURE


def check_platform(platform: str) -> str:
    """BadInput unless ``platform`` is one of ifdtool's ``-p`` names."""
    if platform not in PLATFORMS:
        known = ", ".join(f"{name} ({what})" for name, (_, what) in PLATFORMS.items())
        raise BadInput(f"--platform {platform!r}: not one of ifdtool's platforms: {known}")
    return platform


def _v1_evidence(data: bytes, flmap0: int, flmap1: int, flmap2: int, flcomp: int) -> str | None:
    """None when the descriptor's own fields place it among the IFD v1 chipsets, else what says otherwise."""
    read_clock = (flcomp >> 17) & 0x7
    if read_clock != 0:
        what = "17 MHz, the IFD v2 marker older ifdtool used" if read_clock == 6 else f"field value {read_clock}"
        return (f"FLCOMP 0x{flcomp:08x} read clock (bits 17-19) is {what}, not the 20 MHz every IFD v1 chipset "
                "uses")
    iccriba, fmsba, isl = (flmap2 >> 16) & 0xFF, flmap2 & 0xFF, (flmap1 >> 24) & 0xFF
    flumap1 = _u32(data, 0xEFC)
    mdtba = (flumap1 >> 24) & 0xFF
    if iccriba == 0 and isl <= 16:
        return None  # ICH8 .. 5 series Ibex Peak
    if iccriba != 0 and mdtba == 0 and iccriba < 0x31 and fmsba < 0x30:
        return None  # Bay Trail, 6 series Cougar Point .. 9 series / Wellsburg (C610/X99)
    return (f"FLMAP2 0x{flmap2:08x} (ICCRIBA 0x{iccriba:02x}, FMSBA 0x{fmsba:02x}), FLMAP1 ISL 0x{isl:02x} and "
            f"FLUMAP1 0x{flumap1:08x} (MDTBA 0x{mdtba:02x}) match no IFD v1 chipset (flashrom's "
            "guess_ich_chipset_from_content)")


def _max_regions(flmap0: int, flmap1: int, cap: int) -> int:
    """How many FLREG entries fit before the next section (ifdtool's max_regions_from_fdbar)."""
    fcba, frba = (flmap0 & 0xFF) << 4, ((flmap0 >> 16) & 0xFF) << 4
    fmba, fpsba = (flmap1 & 0xFF) << 4, ((flmap1 >> 16) & 0xFF) << 4
    after = sorted(x for x in (fcba, fmba, fpsba, 4096 - 256 - 4) if x > frba)
    return min(((after[0] - frba) // 4) if after else cap, cap)


def decode(data: bytes, source: str = "image", platform: str | None = None) -> Descriptor:
    """Decode the descriptor of a whole-chip image; BadInput naming ``source`` when it has none, is malformed, or
    (without ``platform``, ifdtool's ``-p`` name) its version cannot be told from its own fields."""
    if not has_descriptor(data):
        raise BadInput(f"{source}: no Intel Flash Descriptor (signature 0x0FF0A55A not at 0x10): not a whole-chip "
                       "image of an Intel board (a BIOS-region-only update file?)")
    if len(data) < 0x1000:
        raise BadInput(f"{source}: {len(data)} bytes, shorter than the 4 KiB flash descriptor")
    flmap0, flmap1, flmap2 = _u32(data, 0x14), _u32(data, 0x18), _u32(data, 0x1C)
    fcba = (flmap0 & 0xFF) << 4
    frba = ((flmap0 >> 16) & 0xFF) << 4
    fmba = (flmap1 & 0xFF) << 4
    flcomp = _u32(data, fcba) if fcba + 4 <= 0x1000 else 0
    if platform is not None:
        revision = PLATFORMS[check_platform(platform)][0]
    else:
        why = _v1_evidence(data, flmap0, flmap1, flmap2, flcomp)
        if why is not None:
            raise BadInput(f"{source}: unknown flash descriptor version: {why}; the descriptor cannot say which "
                           "layout it has (ifdtool needs -p for IFD v2 chipsets): give the board's platform with "
                           f"--platform ({', '.join(PLATFORMS)}); nothing was decoded on a guess")
        revision = "1"
    version = 2 if revision == "2" else 1
    mask = 0x7FFF if version == 2 else 0xFFF
    if frba == 0 or frba + 4 * MAX_REGIONS_V1 > 0x1000:
        raise BadInput(f"{source}: descriptor's region table (FRBA 0x{frba:x}) lies outside the descriptor")
    if fmba == 0 or fmba + 4 * 6 > 0x1000:
        raise BadInput(f"{source}: descriptor's master table (FMBA 0x{fmba:x}) lies outside the descriptor")
    count = _max_regions(flmap0, flmap1, MAX_REGIONS_V1 if revision == "1" else MAX_REGIONS)
    regions = []
    for index in range(max(count, 1)):
        raw = _u32(data, frba + 4 * index)
        region = Region(index, REGION_NAMES[index], (raw & mask) << 12, ((raw >> 16) & mask) << 12 | 0xFFF, raw)
        if region.used or REGION_NAMES[index] != "Reserved":  # ifdtool's dump_frba skips unused Reserved ones
            regions.append(region)
    has_gbe = platform != "dnv"
    numbers = [1, 2] + ([3] if has_gbe else [6]) + ([5] if version == 2 and has_gbe else [])
    read_shift, write_shift, rights = (8, 20, 12) if version == 2 else (16, 24, 5)
    masters = []
    for number in numbers:
        raw = _u32(data, fmba + 4 * (number - 1))
        read = tuple(REGION_NAMES[r] for r in range(rights) if raw >> (read_shift + r) & 1)
        write = tuple(REGION_NAMES[r] for r in range(rights) if raw >> (write_shift + r) & 1)
        masters.append(Master(number, MASTER_NAMES[number], raw, read, write, raw & 0xFFFF if version == 1 else 0))
    warnings = []
    mac = None
    for region in regions:
        if region.used and region.limit >= len(data):
            raise BadInput(f"{source}: region {region.name} ends at 0x{region.limit:x}, beyond the image's "
                           f"{len(data)} bytes: the image is cut short or not this chip's")
    gbe = next((r for r in regions if r.index == GBE and r.used), None) if has_gbe else None
    if gbe is not None:
        mac = format_mac(data[gbe.base:gbe.base + 6])
        warnings.append(f"GbE region {gbe.span()} holds the onboard NIC's MAC address ({mac or 'blank'}): an image "
                        "of the BIOS region alone would lose it; restore whole-chip images only")
    return Descriptor(version, flmap0, flmap1, flmap2, flcomp, tuple(regions), tuple(masters), mac, tuple(warnings),
                      revision, platform)


def format_mac(raw: bytes) -> str | None:
    """``aa:bb:..`` or None for an unprogrammed (all 0xFF / all zero) address."""
    if len(raw) != 6 or raw in (b"\xff" * 6, b"\x00" * 6):
        return None
    return ":".join(f"{b:02x}" for b in raw)


def check_image(data: bytes, source: str, chip_size: int | None = None, platform: str | None = None) -> Descriptor:
    """What restore insists on before any write: the chip's size (16 MiB when unknown) and a valid descriptor."""
    expected = chip_size or SIXTEEN_MIB
    if len(data) != expected:
        what = "the chip's size" if chip_size else "16 MiB"
        raise BadInput(f"{source}: {len(data)} bytes, not {expected} ({what}): not a whole-chip image for this "
                       "board; use the image `labwright bios backup` wrote")
    return decode(data, source, platform)
