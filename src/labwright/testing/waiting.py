"""Wait on an observable condition, never a fixed sleep: poll until it holds or a deadline passes, and fail naming
what was waited for (so a test holds on saturated CPUs and says what did not happen when it fails)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, condition: Callable[[], T], timeout: float = 120.0, every: float = 0.1) -> T:
    """Call ``condition`` every ``every`` seconds until it returns something truthy and return that; after
    ``timeout`` seconds raise AssertionError("timed out after Ns waiting for WHAT")."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)
