"""flashrom on a host: programmer specs, preflight checks (flashrom present, /dev/mem for ``internal``), its output.

Measured with Debian's flashrom 1.3.0 (``flashrom --version`` says "unknown" there, so the package version is asked
for as well). The dummy programmer emulates a chip backed by a file: ``dummy:emulate=W25Q128FV,image=PATH`` is a
16 MiB chip ("W25Q128.V"). A backing file of the wrong size is ignored silently and the chip reads all 0xFF, which
the backup refuses to keep.

A read the chipset refuses (checked against flashrom v1.4.0, eace095b15, and master b946ca13a2, v1.8.0-rc1): the
internal programmer prints each descriptor region's access, ``FREGn: NAME region (BASE-LIMIT) is ACCESS.`` with
ACCESS one of read-write, write-only, read-only, locked (ichspi.c ``ich9_handle_region_access``/``access_names``,
v1.4.0 lines 1836-1838, 1926-1927); from 1.4 on ``read_flash`` stops at a read-protected region with
``read_flash: cannot read inside NAME region (START..END).`` (flashrom.c v1.4.0 lines 614-615; ``%#08x``, so 0 is
``00000000``), then ``Read operation failed!`` and ``FAILED.`` (flashrom.c lines 2213-2215), exit 1. Before 1.4 the
hardware sequencer reported ``Transaction error between offset 0x... and 0x... (= 0x... + N)!`` (ichspi.c v1.4.0
lines 1361-1363, the same in 1.3). The CLI never skips such regions (only libflashrom's
FLASHROM_FLAG_SKIP_UNREADABLE_REGIONS does), so the fallback is a layout read of the readable regions:
``--ifd -i fd -i bios ...``, the names being ``layout_from_ich_descriptors``' (ich_descriptors.c v1.4.0 line 1429).
Such a file is not a whole-chip image: what was not read is zeros.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from labwright.bios.target import Target
from labwright.errors import BadInput, OperationFailed
from labwright.shell import quote
from labwright.textio import ascii_digits

#: flashrom's ``NAME[:key=value,...]``: each parameter a key=value pair (a URL such as https://h:1 is none).
PROGRAMMER = re.compile(r"^[a-z0-9_]+(:[a-z0-9_]+=[A-Za-z0-9_./+:-]*(,[a-z0-9_]+=[A-Za-z0-9_./+:-]*)*)?$")
#: "... (16384 kB, SPI) on dummy." and, with the internal programmer, "... (16384 kB, SPI) mapped at physical address".
CHIP_LINE = re.compile(r'(?a)Found (?P<vendor>.+?) flash chip "(?P<name>[^"]+)" '
                       r'\((?P<kb>\d{1,12}) kB, (?P<bus>[^)]+)\)')
#: What the internal programmer says about each descriptor region on the live chipset (field note 002's X99 output).
FREG_LINE = re.compile(r"(?a)^FREG(?P<index>\d{1,3}): (?P<name>.+?) region "
                       r"\((?P<base>0x[0-9a-f]{1,16})-(?P<limit>0x[0-9a-f]{1,16})\) "
                       r"is (?P<access>[^.]+)\.", re.M)


#: flashrom >= 1.4, read_flash(): the region the chipset will not let it read.
CANNOT_READ = re.compile(r"read_flash: cannot read inside (?P<name>.+?) region \((?P<start>(?:0x)?[0-9a-f]+)\.\."
                         r"(?P<end>(?:0x)?[0-9a-f]+)\)\.")
#: The hardware sequencer's error (ichspi.c), before 1.4 the only line a locked region left.
TRANSACTION_ERROR = re.compile(r"Transaction error between offset (?P<start>0x[0-9a-f]+) and "
                               r"(?P<end>0x[0-9a-f]+)[^\n]*")
#: FREG index -> the region name flashrom's --ifd layout gives it (layout_from_ich_descriptors).
IFD_LAYOUT_NAMES = ("fd", "bios", "me", "gbe", "pd", "reg5", "bios2", "reg7", "ec", "reg9", "ie", "10gbe", "reg12",
                    "reg13", "reg14", "reg15")
#: FREG access values under which the host cannot read the region (ichspi.c access_names / ich_get_region).
UNREADABLE = ("write-only", "locked")


@dataclass(frozen=True)
class Chip:
    vendor: str
    name: str
    size: int
    bus: str

    def to_json(self) -> dict[str, Any]:
        return {"vendor": self.vendor, "name": self.name, "size": self.size, "bus": self.bus}


def check_programmer(spec: str) -> str:
    """BadInput unless ``spec`` looks like flashrom's ``NAME[:key=value,...]`` (and nothing a shell would read)."""
    if not PROGRAMMER.match(spec or ""):
        raise BadInput(f"--programmer {spec!r}: expected flashrom's NAME[:key=value,...], e.g. internal or "
                       "dummy:emulate=W25Q128FV,image=/root/chip.bin")
    return spec


def programmer_name(spec: str) -> str:
    return spec.split(":", 1)[0]


def parse_chip(output: str) -> Chip | None:
    match = CHIP_LINE.search(output)
    if match is None or int(match["kb"]) == 0:  # a chip of 0 kB is no chip flashrom could read
        return None
    return Chip(match["vendor"], match["name"], int(match["kb"]) * 1024, match["bus"])


def parse_access(output: str) -> list[dict[str, Any]]:
    """flashrom's ``FREGn: NAME region (BASE-LIMIT) is read-write.`` lines (internal programmer on Intel)."""
    return [{"index": int(m["index"]), "name": m["name"], "base": int(m["base"], 16), "limit": int(m["limit"], 16),
             "access": m["access"]} for m in FREG_LINE.finditer(output)
            if int(m["base"], 16) <= int(m["limit"], 16)]  # a region that ends before it starts is no region


def access_warnings(access: list[dict[str, Any]]) -> list[str]:
    return [f"flashrom reports the {a['name']} region ({a['base']:#010x}-{a['limit']:#010x}) as {a['access']}: "
            "the chipset restricts it, so a whole-chip read or write from this host may not cover it (use an "
            "external programmer for a complete image)" for a in access if a["access"] != "read-write"]


def unreadable_regions(output: str) -> list[str]:
    """flashrom's own lines saying which region a read could not get, as it printed them."""
    lines = [m.group(0) for m in CANNOT_READ.finditer(output)]
    lines += [m.group(0) for m in TRANSACTION_ERROR.finditer(output)]
    lines += [f"FREG{a['index']}: {a['name']} region ({a['base']:#010x}-{a['limit']:#010x}) is {a['access']}."
              for a in parse_access(output) if a["access"] in UNREADABLE]
    return lines


def region_fallback(spec: str, output: str, path: str = "FILE") -> str | None:
    """The ``flashrom --ifd -i REGION ... -r`` command that reads only the regions flashrom reported readable."""
    access = parse_access(output)
    refused = {m["name"] for m in CANNOT_READ.finditer(output)}
    readable = [IFD_LAYOUT_NAMES[a["index"]] for a in access if a["access"] not in UNREADABLE
                and a["name"] not in refused and a["index"] < len(IFD_LAYOUT_NAMES)]
    if not readable:
        return None
    return command(spec, "--ifd", *[arg for name in readable for arg in ("-i", name)], "-r", path)


def read_failure(label: str, spec: str, rc: int, output: str) -> str:
    """The message for a failed ``flashrom -r``: flashrom's own reason lines, and for a region the chipset refused,
    the region-wise read that would work."""
    reasons = unreadable_regions(output)
    if not reasons:
        return f"{label}: flashrom -r failed (exit {rc}): {_reason(output)}"
    message = (f"{label}: flashrom -r failed (exit {rc}): the chipset does not let this host read the whole chip; "
               f"flashrom says: {' / '.join(reasons)}; nothing was kept.")
    fallback = region_fallback(spec, output)
    if fallback:
        message += (f" Region-wise fallback, the readable regions only: `{fallback}` (not a whole-chip image: what "
                    "it does not read is zeros, never restore it whole);")
    return message + (" for a complete image read the chip with an external programmer (or with the ME disabled, "
                      "https://flashrom.org/ME)")


def preflight(target: Target, spec: str) -> str:
    """Check flashrom can run there for ``spec``; return its version. OperationFailed naming the fix otherwise."""
    check_programmer(spec)
    script = ("command -v flashrom >/dev/null || { echo missing; exit 0; }; flashrom --version 2>/dev/null | head -n1;"
              " dpkg-query -W -f='${Version}\\n' flashrom 2>/dev/null; true")
    lines = target.check(script, "looking for flashrom").stdout.splitlines()
    if lines[:1] == ["missing"]:
        raise OperationFailed(f"{target.label}: flashrom is not installed; run `pyinfra {target.label} "
                              "deploys/bios_backup.py` (installs it) or `apt-get install flashrom` there")
    if programmer_name(spec) == "internal":
        probe = target.run("[ \"$(id -u)\" = 0 ] || { echo 'not root'; exit 1; }; "
                           "[ -c /dev/mem ] || { echo '/dev/mem does not exist'; exit 1; }; "
                           "dd if=/dev/mem of=/dev/null bs=1 count=1 skip=$((0xF0000)) 2>/dev/null "
                           "|| { echo '/dev/mem cannot be read'; exit 1; }")
        if not probe.ok:
            raise OperationFailed(f"{target.label}: the internal programmer needs root and /dev/mem, and here "
                                  f"{probe.last_line()}; run on the board itself as root (not in a container), with "
                                  "iomem=relaxed on the kernel command line if the kernel locks /dev/mem")
    return _version(lines)


def _version(lines: list[str]) -> str:
    banner = lines[0] if lines else ""
    match = re.search(r"(?a)flashrom (v?\d[\w.\-+~]*)", banner)
    package = lines[1].strip() if len(lines) > 1 else ""
    if match:
        return match.group(1).lstrip("v") + (f" (Debian {package})" if package else "")
    return f"{package} (Debian package)" if package else banner or "unknown"


def command(spec: str, *args: str) -> str:
    return " ".join(["flashrom", "-p", quote(spec), *(quote(a) for a in args)])


def read(target: Target, spec: str, path: str) -> tuple[Chip, str]:
    """``flashrom -r PATH``: the whole chip into a file on the host; the chip flashrom found and its output."""
    result = target.run(command(spec, "-r", path) + " 2>&1")
    if not result.ok:
        raise OperationFailed(read_failure(target.label, spec, result.rc, result.stdout))
    chip = parse_chip(result.stdout)
    if chip is None:
        raise OperationFailed(f"{target.label}: flashrom read without naming a chip; its output ends: "
                              f"{_reason(result.stdout)}")
    return chip, result.stdout


def flash_size(target: Target, spec: str) -> int:
    result = target.run(command(spec, "--flash-size") + " 2>&1")
    numbers = [line.strip() for line in result.stdout.splitlines() if ascii_digits(line.strip())]
    if not result.ok or not numbers:
        raise OperationFailed(f"{target.label}: flashrom --flash-size failed (exit {result.rc}): "
                              f"{_reason(result.stdout)}")
    return int(numbers[-1])


def write(target: Target, spec: str, path: str) -> str:
    """``flashrom -w PATH`` (flashrom verifies after writing unless told not to); the verify line it printed."""
    result = target.run(command(spec, "-w", path) + " 2>&1", timeout=1800)
    verified = [line.strip() for line in result.stdout.splitlines() if "VERIFIED" in line]
    if not result.ok or not verified:
        raise OperationFailed(f"{target.label}: flashrom -w failed (exit {result.rc}): {_reason(result.stdout)}; "
                              "do NOT power off: keep the backup and retry, or recover with an external programmer")
    return verified[-1]


def _reason(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"fail|error|no eeprom|not found|couldn't|denied", line, re.I)]
    return (errors or lines or ["no output"])[-1]
