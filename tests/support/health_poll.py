"""Poll a health URL from the host in a thread while something runs; the longest time it did not answer.

The unavailable window is from the last good answer before an outage to the first good one after it (an upper
bound, within one poll interval). A frozen guest does not refuse, it does not answer: each GET has its own short
timeout, so a freeze shows as failures, not as one long hanging request.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from labwright.testing.waiting import wait_for


class Poller:
    """GET a health URL every ``interval`` seconds in a thread; keep (time, healthy) samples."""

    def __init__(self, url: str, interval: float = 0.01):
        self.url, self.interval = url, interval
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=0.5) as response:
                    ok = response.status == 200
            except (urllib.error.URLError, OSError):
                ok = False
            self.samples.append((started, ok))
            self._stop.wait(max(0.0, self.interval - (time.perf_counter() - started)))

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def longest_outage(self) -> float:
        worst, last_ok, down = 0.0, None, False
        for at, ok in self.samples:
            if ok:
                if down and last_ok is not None:
                    worst = max(worst, at - last_ok)
                last_ok, down = at, False
            else:
                down = True
        if down:
            raise RuntimeError(f"{self.url} never came back")
        return worst

    def wait_healthy(self, timeout: float = 120) -> None:
        wait_for(f"{self.url} to answer 200", lambda: bool(self.samples) and self.samples[-1][1], timeout=timeout,
                 every=self.interval)

    def outages(self) -> list[tuple[float, float]]:
        """(start, seconds) of every window without a good answer, measured from the last good one before it."""
        found, last_ok, down = [], None, False
        for at, ok in self.samples:
            if ok:
                if down and last_ok is not None:
                    found.append((last_ok, at - last_ok))
                last_ok, down = at, False
            else:
                down = True
        return found
