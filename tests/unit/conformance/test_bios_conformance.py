"""labwright's flash-descriptor decoder and flashrom output parsers against recorded outputs of the real tools.

tests/conformance/ifdtool/: ``ifdtool -d`` (coreboot-utils, run here) on images built from each case's descriptor
words; labwright's ``ifd.decode`` must find the regions and master rights ifdtool prints (for the platform the case
names), or refuse where the descriptor cannot say its version. tests/conformance/flashrom/: flashrom's output (run
here with the dummy programmer, or rendered from flashrom 1.3/1.4's format strings for a locked region);
labwright must name the chip and, for a refused read, quote flashrom's reason and give the region-wise read.
Each case carries its provenance (upstream file, version/commit, lines, or the command run here).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright.bios import flashrom, ifd
from labwright.errors import BadInput
from support.bios_image import descriptor_image

ROOT = Path(__file__).resolve().parents[2] / "conformance"
IFDTOOL_CASES = sorted((ROOT / "ifdtool").glob("*.toml"))
FLASHROM_CASES = sorted((ROOT / "flashrom").glob("*.toml"))
#: ifdtool's names in the master section's access lines -> its region names.
ACCESS_NAMES = {"Host CPU/BIOS": "BIOS", "Intel ME": "Intel ME", "GbE": "GbE", "Platform Data": "Platform Data",
                "Flash Descriptor": "Flash Descriptor", "EC": "EC"}


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def image_of(case: dict[str, Any]) -> bytes:
    words = {int(k, 16): v for k, v in case["image"]["words"].items()}
    return descriptor_image(words, case["image"]["size"])


def parse_ifdtool(text: str) -> tuple[dict[str, tuple[int, int] | None], dict[str, tuple[set[str], set[str]]]]:
    regions: dict[str, tuple[int, int] | None] = {}
    for name, base, limit, unused in re.findall(r"Flash Region \d+ \(([^)]+)\): ([0-9a-f]{8}) - ([0-9a-f]{8})"
                                               r" ?(\(unused\))?", text):
        regions[name] = None if unused else (int(base, 16), int(limit, 16))
    masters: dict[str, tuple[set[str], set[str]]] = {}
    for master, body in re.findall(r"FLMSTR\d:\s+0x[0-9a-f]+ \(([^)]+)\)\n((?:  .*\n)+)", text):
        read = {ACCESS_NAMES[m] for m in re.findall(r"  (.+?) (?:Region )?Read Access:\s+enabled", body)}
        write = {ACCESS_NAMES[m] for m in re.findall(r"  (.+?) (?:Region )?Write Access:\s+enabled", body)}
        printed = {ACCESS_NAMES[m] for m in re.findall(r"  (.+?) (?:Region )?Read Access:", body)}
        masters[master] = (read, write | {"printed:" + p for p in printed})
    return regions, masters


def test_cases_carry_provenance() -> None:
    assert len(IFDTOOL_CASES) >= 4 and len(FLASHROM_CASES) >= 4
    for path in IFDTOOL_CASES + FLASHROM_CASES:
        case = load(path)
        assert case["provenance"]["how"] and case["provenance"]["upstream"], path.name
        assert re.search(r"[0-9a-f]{10}|run here", case["provenance"]["how"] + case["provenance"]["upstream"])


@pytest.mark.parametrize("path", IFDTOOL_CASES, ids=lambda p: p.stem)
def test_decoder_agrees_with_ifdtool(path: Path) -> None:
    case = load(path)
    data, platform = image_of(case), case["image"]["platform"] or None
    if "refused" in case["expect"]:
        with pytest.raises(BadInput, match=re.escape(case["expect"]["refused"])):
            ifd.decode(data, path.stem, platform)
        return
    descriptor = ifd.decode(data, path.stem, platform)
    assert descriptor.version == case["expect"]["version"]
    regions, masters = parse_ifdtool(case["run"]["stdout"])
    ours_regions = {r.name: ((r.base, r.limit) if r.used else None) for r in descriptor.regions}
    assert {name: ours_regions.get(name, "missing") for name in regions} == regions
    # ifdtool before 4.19 (98ecaa4a55) called slots 5-7 and 9-15 "Reserved" and skipped them when unused; today's
    # names them (Device Exp1, ...) as labwright does. Whatever it lists is ours; what only we list is unused.
    assert {name: span for name, span in ours_regions.items() if name not in regions and span is not None} == {}
    ours = {}
    for master in descriptor.masters:
        printed = {w[len("printed:"):] for w in masters.get(master.name, (set(), set()))[1] if w.startswith("printed:")}
        ours[master.name] = ({r for r in master.read if r in printed},
                             {w for w in master.write if w in printed} | {"printed:" + p for p in printed})
    assert ours == masters
    assert "GbE" in ours  # FLMSTR3, whatever NM says


@pytest.mark.skipif(shutil.which("ifdtool") is None, reason="coreboot-utils' ifdtool is not installed")
@pytest.mark.parametrize("path", IFDTOOL_CASES, ids=lambda p: p.stem)
def test_recording_matches_the_installed_ifdtool(path: Path, tmp_path: Path) -> None:
    case = load(path)
    image = tmp_path / "image.bin"
    image.write_bytes(image_of(case))
    args = [*case["run"]["command"].split()[:-1], str(image)]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != case["run"]["exit"] and "Unknown platform" in result.stderr:
        pytest.skip(f"this ifdtool is older than the recording: {result.stderr.strip()}")
    first_line = re.compile(r"^File \S+ is", re.M)
    assert first_line.sub("File IMAGE is", result.stdout) == first_line.sub("File IMAGE is", case["run"]["stdout"])


@pytest.mark.parametrize("path", FLASHROM_CASES, ids=lambda p: p.stem)
def test_flashrom_output_is_understood(path: Path) -> None:
    case = load(path)
    output, expect = case["run"]["stdout"] + case["run"]["stderr"], case["expect"]
    chip = flashrom.parse_chip(output)
    assert chip is not None and f"{chip.vendor} {chip.name} {chip.size} {chip.bus}" == expect["chip"]
    if case["run"]["exit"] == 0:
        assert flashrom.unreadable_regions(output) == [] and expect.get("failure", "") == ""
        return
    message = flashrom.read_failure("host", "internal", case["run"]["exit"], output)
    assert expect["reason"] in message and f"`{expect['fallback']}`" in message
    assert flashrom.region_fallback("internal", output) == expect["fallback"]
