"""A read the chipset refuses: flashrom's own reason lines in the message, and the region-wise read that works.

The outputs are flashrom 1.4+'s (rendered from its format strings, see tests/conformance/flashrom/ for provenance).
"""

from __future__ import annotations

from labwright.bios import flashrom

SPEC = "internal"
LOCKED_ME_1_4 = """FREG0: Flash Descriptor region (0x00000000-0x00000fff) is read-only.
FREG1: BIOS region (0x00180000-0x00ffffff) is read-write.
FREG2: Management Engine region (0x00003000-0x0017ffff) is locked.
FREG3: Gigabit Ethernet region (0x00001000-0x00002fff) is read-write.
Found Winbond flash chip "W25Q128.V" (16384 kB, SPI) mapped at physical address 0x00000000ff000000.
Reading flash... read_flash: cannot read inside Management Engine region (0x003000..0x17ffff).
Read operation failed!
FAILED.
"""
TRANSACTION_1_3 = """FREG2: Management Engine region (0x00003000-0x0017ffff) is write-only.
Reading flash... Transaction error between offset 0x00003000 and 0x0000303f (= 0x00003000 + 63)!
Read operation failed!
FAILED.
"""


def test_the_locked_region_reason_is_shown_not_just_failed() -> None:
    message = flashrom.read_failure("box", SPEC, 1, LOCKED_ME_1_4)
    assert message.startswith("box: flashrom -r failed (exit 1): the chipset does not let this host read")
    assert "read_flash: cannot read inside Management Engine region (0x003000..0x17ffff)." in message
    assert "FREG2: Management Engine region (0x00003000-0x0017ffff) is locked." in message
    assert "nothing was kept" in message
    assert message != "box: flashrom -r failed (exit 1): FAILED."


def test_the_region_wise_fallback_reads_only_the_readable_regions() -> None:
    assert flashrom.region_fallback(SPEC, LOCKED_ME_1_4, "/root/part.bin") == (
        "flashrom -p internal --ifd -i fd -i bios -i gbe -r /root/part.bin")
    message = flashrom.read_failure("box", SPEC, 1, LOCKED_ME_1_4)
    assert "`flashrom -p internal --ifd -i fd -i bios -i gbe -r FILE`" in message
    assert "never restore it whole" in message


def test_before_1_4_the_transaction_error_is_the_reason() -> None:
    message = flashrom.read_failure("box", SPEC, 1, TRANSACTION_1_3)
    assert "Transaction error between offset 0x00003000 and 0x0000303f (= 0x00003000 + 63)!" in message
    assert "FREG2: Management Engine region (0x00003000-0x0017ffff) is write-only." in message
    assert "--ifd" not in message  # no FREG line says which regions are readable


def test_other_failures_keep_the_last_error_line() -> None:
    assert flashrom.read_failure("box", SPEC, 1, "No EEPROM/flash device found.\n") == (
        "box: flashrom -r failed (exit 1): No EEPROM/flash device found.")
