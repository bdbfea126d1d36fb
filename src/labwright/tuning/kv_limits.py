"""The one check every number read from a model's metadata passes (config.json keys, GGUF header values): an integer,
not a bool, not negative, and within a bound no real model comes near, so a broken or hostile file is refused in one
line before anything is built per layer (a layer count of 10**30 built one Layer per layer: a hang).

The bounds are far above real models (2026: the deepest published LLMs have ~160 layers; the widest head_dim 512;
the longest context 10M tokens) and far below what would hang or exhaust memory.
"""

from __future__ import annotations

import math
from typing import Any

#: Layers: a list of this many Layer objects is built.
MAX_LAYERS = 4096
#: Any other count or size (heads, head dims, windows, context lengths, ranks ...).
MAX_VALUE = 2**40


def count(value: Any, key: str, *, maximum: int = MAX_VALUE, minimum: int = 0) -> int:
    """``value`` as an int in [minimum, maximum], or ValueError naming ``key`` and what it is (the caller words the
    file and the fix). A float that is a whole number (GGUF writers store some counts as float32) is accepted."""
    if isinstance(value, bool):
        raise ValueError(f"{key} is {value!r}, not a number")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{key} is {value!r}, not a whole number")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"{key} is a {type(value).__name__} ({short(value)}), not an integer")
    if value < minimum:
        raise ValueError(f"{key} is {value}, below {minimum}")
    if value > maximum:
        raise ValueError(f"{key} is {value if value < 10**15 else f'~10^{len(str(value)) - 1}'}, more than any model "
                         f"has (at most {maximum:,})")
    return value


def short(value: Any) -> str:
    """``repr(value)``, cut to 40 characters (a value quoted in a one-line error)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
