"""Memory sizes as people write them ("2.4GiB", "2.4GB", "2400MiB", "2576980377") and back.

Every unit is binary (1 GB = 1 GiB = 1024^3 bytes): GPU memory is spoken of that way (an "8 GB" card is 8 GiB,
nvidia-smi counts MiB, `ls -lh` prints GiB), and it is the reading that reproduces field note 001's table: a "2.4 GB" KV
budget at 16,384 B/token is 157,286 tokens (~155,000 in the note); the SI reading (2.4e9 bytes) would give 146,484.
A bare number is bytes, so an SI size can still be given exactly: --budget 2400000000.
"""

from __future__ import annotations

import math
import re

from labwright.errors import BadInput

GIB = 1024**3
MIB = 1024**2

_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}
_SIZE = re.compile(r"(?a)^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT])(?:I?B)?|(B))?\s*$", re.IGNORECASE)


# No GPU, RAM or KV budget is a pebibyte: a larger size is a typo (a missing unit, digits too many).
MAX_SIZE = 1024**5


def parse_size(text: str, what: str, bare_unit: str = "B", positive: bool = False) -> int:
    """Bytes in ``text``; a number without a unit is in ``bare_unit`` ("B" or "GiB"). ``what`` names the option.

    ``positive``: 0 is refused too (a memory that holds nothing: "fits in 0 GiB" answers no question).
    """
    match = _SIZE.match(str(text))
    example = "24GiB" if bare_unit.upper() != "B" else "2.4GiB"
    if not match:
        raise BadInput(f"{what} {text!r} is not a size: write one like 2.4GiB, 2.4GB, 2400MiB or a number of "
                       f"{'GiB' if bare_unit.upper() != 'B' else 'bytes'}")
    number, prefix, _ = match.groups()
    if prefix is None:
        prefix = "" if bare_unit.upper() == "B" else bare_unit[0]
    scaled = float(number) * 1024 ** _POWERS[prefix.upper()]  # inf for a run of digits no size has
    value = int(scaled) if math.isfinite(scaled) else MAX_SIZE + 1
    if value > MAX_SIZE:
        raise BadInput(f"{what} {text!r} is more than 1 PiB, larger than any GPU, RAM or cache: write the size with "
                       f"its unit, e.g. {example}")
    if positive and value <= 0:
        raise BadInput(f"{what} {text!r}: give a size above 0, e.g. {example}")
    return value


def gib(value: int | float) -> str:
    """A byte count as GiB with two decimals: 2576980377 -> '2.40 GiB'."""
    return f"{value / GIB:.2f} GiB"


def group(value: int | float) -> str:
    """Thousands separators, the field notes' style: 16384 -> '16,384'."""
    return f"{round(value):,}"
