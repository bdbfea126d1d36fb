"""How many examples a property test tries: the number it names in the suite's runs, ten times that on demand.

``@settings(max_examples=examples(40), ...)``: 40 in every run of the suite (each run draws new examples, so runs
add up); ``LABWRIGHT_HYPOTHESIS_PROFILE=deep`` makes it 400, and 1,000 for the tests that name no number (the
profile tests/conftest.py loads), for a longer search after changing a parser or quoting (docs/testing.md, Speed).
"""

from __future__ import annotations

import os

PROFILES = ("default", "deep")
PROFILE = os.environ.get("LABWRIGHT_HYPOTHESIS_PROFILE") or "default"
DEEP_FACTOR = 10
DEEP_DEFAULT = 1000


def examples(n: int) -> int:
    """``n`` examples, or ``n`` times DEEP_FACTOR under the deep profile."""
    return n * DEEP_FACTOR if PROFILE == "deep" else n
