"""Whole-chip test images with a real Intel Flash Descriptor, and the dummy-programmer spec that serves them.

The layout is the seed's X99 board (Descriptor 0x0-0xFFF, GbE 0x1000-0x2FFF, ME 0x3000-0x17FFFF, BIOS
0x180000-0xFFFFFF); the descriptor words are the ones measured to decode identically in ``ifdtool -d``
(coreboot-utils 4.15). Everything outside the descriptor is 0xFF except the GbE MAC and a marker in the BIOS region.

Two words are as real descriptors have them, not as a first version of this file had them: FLMAP1's NM is 2 (three
masters: flashrom counts NM from 0 on IFD v1 chipsets, ``ich_number_of_masters`` in ich_descriptors.c, flashrom
v1.4.0 lines 76-99), the FREG slots past FREG4 read 0x00007FFF (unused) rather than 0xFFFFFFFF (a 4 KiB region
at 0xFFF000 to ``ifdtool -p wbg``), and FLUMAP1 (0xEFC) points at a one-entry ME VSCC table (VTBA 0xDF0, VTL 2)
holding the W25Q128FV's JEDEC ID; with FLUMAP1 all 0xFF flashrom's ``--ifd`` refuses the descriptor ("Couldn't parse the
descriptor!": the VSCC table would run past 4 KiB, read_ich_descriptors_from_dump, ich_descriptors.c), and the
region-wise read (``--ifd -i REGION``) could not be tried on it.
"""

from __future__ import annotations

import struct
from pathlib import Path

SIZE = 16 * 1024 * 1024
MAC = bytes.fromhex("0cc47a123456")
#: FLMAP0..2 at 0x14, FLCOMP at 0x30, FREG0..4 at 0x40, FLMSTR1..3 at 0x80 (IFD v1, as on X99), the ME VSCC
#: table at 0xDF0 (JID, VSCC) and FLUMAP1 at 0xEFC.
X99_WORDS = {0x10: 0x0FF0A55A, 0x14: 0x04040003, 0x18: 0x13100208, 0x1C: 0x00210120, 0x30: 0x00000005,
             0x40: 0x00000000, 0x44: 0x0FFF0180, 0x48: 0x017F0003, 0x4C: 0x00020001, 0x50: 0x00001FFF,
             0x80: 0x0A0B0000, 0x84: 0x0C0D0000, 0x88: 0x08080118,
             0xDF0: 0x001840EF, 0xDF4: 0x20052005, 0xEFC: 0x000002DF,
             # FREG5..15: 0x00007FFF (base above limit: unused, in v1's 12-bit and v2's 15-bit fields alike)
             **{0x54 + 4 * i: 0x00007FFF for i in range(11)}}
X99_REGIONS = {"Flash Descriptor": (0x0, 0xFFF), "GbE": (0x1000, 0x2FFF), "Intel ME": (0x3000, 0x17FFFF),
               "BIOS": (0x180000, 0xFFFFFF)}


def descriptor_image(words: dict[int, int], size: int = SIZE) -> bytes:
    """An all-0xFF image of ``size`` bytes with these little-endian 32-bit words set (offset -> value)."""
    data = bytearray(b"\xff" * size)
    for offset, value in words.items():
        struct.pack_into("<I", data, offset, value)
    return bytes(data)


def x99_image(marker: bytes = b"labwright test BIOS v1", mac: bytes = MAC, size: int = SIZE) -> bytes:
    data = bytearray(b"\xff" * size)
    for offset, value in X99_WORDS.items():
        struct.pack_into("<I", data, offset, value)
    data[0x1000:0x1006] = mac
    data[0x180000:0x180000 + len(marker)] = marker
    return bytes(data)


def write_x99_image(path: Path, **kwargs: object) -> Path:
    path.write_bytes(x99_image(**kwargs))  # type: ignore[arg-type]
    return path


def dummy_programmer(image: str | Path) -> str:
    """flashrom's dummy programmer emulating a 16 MiB Winbond W25Q128FV backed by ``image`` (a path on the host)."""
    return f"dummy:emulate=W25Q128FV,image={image}"


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "chip.bin")
    write_x99_image(target)
    print(f"{target}: 16 MiB X99-layout image; flashrom -p {dummy_programmer(target.resolve())}")
