"""The Intel Flash Descriptor decoder, flashrom output parsing and the programmer check (pure logic, no host)."""

from __future__ import annotations

import struct

import pytest

from labwright.bios import flashrom, ifd
from labwright.bios.backup import safe_label
from labwright.errors import BadInput
from support.bios_image import MAC, X99_REGIONS, x99_image


def test_x99_layout_regions_rights_and_mac() -> None:
    descriptor = ifd.decode(x99_image())
    assert descriptor.version == 1
    used = {r.name: (r.base, r.limit) for r in descriptor.regions if r.used}
    assert used == X99_REGIONS
    assert [r.name for r in descriptor.regions if not r.used] == ["Platform Data"]
    cpu, me, gbe = descriptor.masters
    assert (cpu.name, cpu.read, cpu.write) == ("Host CPU/BIOS", ("Flash Descriptor", "BIOS", "GbE"), ("BIOS", "GbE"))
    assert (me.read, me.write) == (("Flash Descriptor", "Intel ME", "GbE"), ("Intel ME", "GbE"))
    assert (gbe.read, gbe.write, gbe.requester_id) == (("GbE",), ("GbE",), 0x118)
    assert descriptor.gbe_mac == ":".join(f"{b:02x}" for b in MAC)
    assert any("BIOS region alone would lose it" in w and descriptor.gbe_mac in w for w in descriptor.warnings)


def test_blank_gbe_mac_is_reported_as_missing() -> None:
    descriptor = ifd.decode(x99_image(mac=b"\xff" * 6))
    assert descriptor.gbe_mac is None
    assert "blank" in descriptor.warnings[0]


def test_no_signature_is_bad_input() -> None:
    data = bytearray(x99_image())
    data[0x10:0x14] = b"\xff\xff\xff\xff"
    with pytest.raises(BadInput, match=r"bios.bin: no Intel Flash Descriptor \(signature 0x0FF0A55A"):
        ifd.decode(bytes(data), "bios.bin")


def test_wrong_size_is_refused_before_the_descriptor() -> None:
    with pytest.raises(BadInput, match=r"img: 8388608 bytes, not 16777216 \(16 MiB\)"):
        ifd.check_image(x99_image(size=8 * 1024 * 1024), "img")
    with pytest.raises(BadInput, match=r"not 33554432 \(the chip's size\)"):
        ifd.check_image(x99_image(), "img", chip_size=32 * 1024 * 1024)


def test_region_past_the_end_of_a_cut_image() -> None:
    data = bytearray(x99_image())
    with pytest.raises(BadInput, match="region BIOS ends at 0xffffff, beyond the image's 8388608 bytes"):
        ifd.decode(bytes(data[: 8 * 1024 * 1024]), "cut.bin")


def test_ifd_v2_bit_layout_with_the_platform() -> None:
    data = bytearray(x99_image())
    struct.pack_into("<I", data, 0x30, 6 << 17)  # FLCOMP read clock 17 MHz: what ifdtool before 4.15 took for v2
    struct.pack_into("<I", data, 0x80, (0b10011 << 20) | (0b11011 << 8))  # FLMSTR1 v2: write 20+, read 8+
    descriptor = ifd.decode(bytes(data), platform="sklkbl")
    assert (descriptor.version, descriptor.revision, descriptor.platform) == (2, "2", "sklkbl")
    assert descriptor.masters[0].read == ("Flash Descriptor", "BIOS", "GbE", "Platform Data")
    assert descriptor.masters[0].write == ("Flash Descriptor", "BIOS", "Platform Data")
    # v2: FLMSTR5 (EC) is decoded too, FLMSTR4 is not (ifdtool's dump_fmba)
    assert [m.index for m in descriptor.masters] == [1, 2, 3, 5]


def test_the_gbe_master_flmstr3_is_decoded_whatever_nm_says() -> None:
    """Real IFD v1 descriptors have NM=2 for three masters (flashrom counts NM from 0 there); ifdtool -d prints
    FLMSTR1..3 regardless. The GbE master's own rights must be there."""
    assert (ifd.decode(x99_image()).flmap1 >> 8) & 7 == 2
    for nm in (0, 1, 2, 3):
        data = bytearray(x99_image())
        struct.pack_into("<I", data, 0x18, 0x13100008 | nm << 8)
        masters = ifd.decode(bytes(data)).masters
        assert [(m.index, m.name) for m in masters] == [(1, "Host CPU/BIOS"), (2, "Intel ME"), (3, "GbE")]
        assert (masters[2].read, masters[2].write, masters[2].requester_id) == (("GbE",), ("GbE",), 0x118)


def test_17mhz_read_clock_without_a_platform_is_refused_naming_the_field() -> None:
    data = bytearray(x99_image())
    struct.pack_into("<I", data, 0x30, 6 << 17)
    with pytest.raises(BadInput, match=r"img: unknown flash descriptor version: FLCOMP 0x000c0000 read clock "
                                       r"\(bits 17-19\) is 17 MHz.*--platform \(adl, .*nothing was decoded on a guess"):
        ifd.decode(bytes(data), "img")


def test_a_500_series_descriptor_is_not_taken_for_v1_by_its_read_clock() -> None:
    """On 500-series+ descriptors the read-clock field 0 means 100 MHz (ifdtool.h spi_frequency_500_series): the
    old rule called it 20 MHz, i.e. v1, and decoded v2 FLREG/FLMSTR bits with v1 masks."""
    data = bytearray(x99_image())
    struct.pack_into("<I", data, 0xEFC, 0x01000210)  # FLUMAP1 with a MIP descriptor table (MDTBA), 300 series on
    struct.pack_into("<I", data, 0x44, 0x1FFF0180 | 0)  # BIOS limit 0x1FFFFFF: bit 12 of the limit is v2-only
    with pytest.raises(BadInput, match=r"FLUMAP1 0x01000210 \(MDTBA 0x01\) match no IFD v1 chipset"):
        ifd.decode(bytes(data) + b"\xff" * len(data), "img")
    descriptor = ifd.decode(bytes(data) + b"\xff" * len(data), "img", platform="adl")
    assert descriptor.version == 2 and descriptor.region("BIOS") is not None
    assert descriptor.region("BIOS").limit == 0x1FFFFFF  # type: ignore[union-attr]


def test_an_unknown_platform_is_refused() -> None:
    with pytest.raises(BadInput, match=r"--platform 'x99': not one of ifdtool's platforms: adl \(Alder Lake\)"):
        ifd.decode(x99_image(), platform="x99")


def test_wellsburg_is_ifd_1_5_with_v1_bits() -> None:
    descriptor = ifd.decode(x99_image(), platform="wbg")
    assert (descriptor.version, descriptor.revision) == (1, "1.5")
    assert {r.name: (r.base, r.limit) for r in descriptor.regions if r.used} == X99_REGIONS
    assert [m.name for m in descriptor.masters] == ["Host CPU/BIOS", "Intel ME", "GbE"]


def test_parse_chip_line_from_flashrom_1_3() -> None:
    chip = flashrom.parse_chip('Found Winbond flash chip "W25Q128.V" (16384 kB, SPI) on dummy.\n')
    assert chip == flashrom.Chip("Winbond", "W25Q128.V", 16 * 1024 * 1024, "SPI")
    assert flashrom.parse_chip("No EEPROM/flash device found.") is None


@pytest.mark.parametrize("spec", ["internal", "dummy:emulate=W25Q128FV,image=/root/chip.bin",
                                  "ch341a_spi", "linux_spi:dev=/dev/spidev0.0,spispeed=1000"])
def test_programmer_specs_accepted(spec: str) -> None:
    assert flashrom.check_programmer(spec) == spec


@pytest.mark.parametrize("spec", ["", "internal; reboot", "dummy:image=$(id)", "-w", "internal x"])
def test_programmer_specs_refused(spec: str) -> None:
    with pytest.raises(BadInput, match="--programmer .*expected flashrom's NAME"):
        flashrom.check_programmer(spec)


def test_version_from_banner_or_debian_package() -> None:
    assert flashrom._version(["flashrom v1.2 on Linux 6.1", "1.2-5"]) == "1.2 (Debian 1.2-5)"
    assert flashrom._version(["flashrom unknown on Linux 6.18 (x86_64)", "1.3.0-2.1"]) == "1.3.0-2.1 (Debian package)"


def test_safe_label() -> None:
    assert safe_label("@lxd/node1") == "lxd-node1"
    assert safe_label("@local") == "local"


#: The internal programmer's output on the seed's ASUS X99-E WS (seed 002), plus one locked region.
SEED_OUTPUT = """Found chipset "Intel C610/X99 (Wellsburg)".
FREG0: Flash Descriptor region (0x00000000-0x00000fff) is read-write.
FREG1: BIOS region (0x00180000-0x00ffffff) is read-write.
FREG2: Management Engine region (0x00003000-0x0017ffff) is locked.
FREG3: Gigabit Ethernet region (0x00001000-0x00002fff) is read-write.
Found Winbond flash chip "W25Q128.V" (16384 kB, SPI) mapped at physical address 0x00000000ff000000.
Reading flash... done.
"""


def test_internal_programmer_output_chip_and_region_access() -> None:
    assert flashrom.parse_chip(SEED_OUTPUT) == flashrom.Chip("Winbond", "W25Q128.V", 16 * 1024 * 1024, "SPI")
    access = flashrom.parse_access(SEED_OUTPUT)
    assert [(a["name"], a["base"], a["limit"], a["access"]) for a in access] == [
        ("Flash Descriptor", 0, 0xFFF, "read-write"), ("BIOS", 0x180000, 0xFFFFFF, "read-write"),
        ("Management Engine", 0x3000, 0x17FFFF, "locked"), ("Gigabit Ethernet", 0x1000, 0x2FFF, "read-write")]
    (warning,) = flashrom.access_warnings(access)
    assert warning.startswith("flashrom reports the Management Engine region (0x00003000-0x0017ffff) as locked")


def test_rc_marker_survives_output_without_a_final_newline() -> None:
    from labwright.bios.target import Target

    with Target.connect("@local") as target:
        result = target.run("printf abc; exit 3")
        assert (result.rc, result.stdout) == (3, "abc")
        assert target.run("echo out; echo err >&2").stderr == "err"


def test_a_backup_keeps_an_image_whose_descriptor_does_not_decode() -> None:
    from labwright.bios.backup import _decode_kept

    data = bytearray(x99_image())
    struct.pack_into("<I", data, 0x14, 0x04FF0003)  # FRBA 0xff0: the region table would run past the descriptor
    descriptor, notes = _decode_kept(bytes(data), "img")
    assert descriptor is None and "does not decode" in notes[0] and "FRBA 0xff0" in notes[0]
    assert _decode_kept(b"\xff" * 4096, "img") == (None, [
        "no Intel Flash Descriptor: not an Intel board's whole chip; kept as read"])
