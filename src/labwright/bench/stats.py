"""Trial statistics as field note 001 reports them: trial 1 is the cold run, the median over the later (cached)
trials."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from labwright.bench.openai import Trial


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclass(frozen=True)
class Summary:
    """Medians over some trials; a field is None when no trial had it (e.g. no server timings)."""

    trials: int
    ttft_s: float | None
    total_s: float | None
    prompt_tokens: float | None
    decode_tokens: float | None
    prefill_tps: float | None
    decode_tps: float | None
    server_prefill_tps: float | None
    server_decode_tps: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(trials: Sequence[Trial]) -> Summary | None:
    if not trials:
        return None
    return Summary(
        trials=len(trials),
        ttft_s=median(t.ttft_s for t in trials),
        total_s=median(t.total_s for t in trials),
        prompt_tokens=median(t.prompt_tokens for t in trials),
        decode_tokens=median(t.decode_tokens for t in trials),
        prefill_tps=median(t.prefill_tps for t in trials),
        decode_tps=median(t.decode_tps for t in trials),
        server_prefill_tps=median(t.server_prefill_tps for t in trials),
        server_decode_tps=median(t.server_decode_tps for t in trials),
    )


def cold_and_warm(trials: Sequence[Trial]) -> tuple[Summary | None, Summary | None]:
    """Trial 1 on its own (cold) and the median of trials 2..n (warm; None with a single trial)."""
    return summarize(trials[:1]), summarize(trials[1:])


#: The spread of the warm trials above which a run says its trials disagree (a busy machine, a cold cache): 10%.
DEFAULT_MAX_SPREAD = 0.10
#: The metrics whose spread is measured: the two speeds the tables show and the time to the first token.
SPREAD_KEYS = ("ttft_s", "prefill_tps", "decode_tps")


def spread(values: Iterable[float | None]) -> float | None:
    """How far the trials disagree: (max - min) / median of the values present; None with fewer than two (one trial
    says nothing about the noise) or a median of 0."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    middle = statistics.median(present)
    return (max(present) - min(present)) / middle if middle else None


def spreads(trials: Sequence[Trial]) -> dict[str, float | None]:
    """The spread of the warm trials (2..n) for each of SPREAD_KEYS."""
    warm = trials[1:]
    return {key: spread(getattr(t, key) for t in warm) for key in SPREAD_KEYS}


def too_wide(spread_by_key: dict[str, float | None], limit: float) -> dict[str, float]:
    """The metrics (decode tok/s, TTFT) whose spread is above ``limit``."""
    return {key: value for key in ("decode_tps", "ttft_s")
            if (value := spread_by_key.get(key)) is not None and value > limit}


def covered(base: float, base_spread: float | None, other: float, other_spread: float | None) -> bool | None:
    """Whether the difference between two medians is within what the trials' spreads cover: each run's warm trials
    span about median * (1 +- spread/2); the difference is within the spread when the two spans overlap. None when a
    spread is unknown (fewer than two warm trials): then nothing can be said, and the difference is shown as it is."""
    if base_spread is None or other_spread is None:
        return None
    low, high = sorted((base, other))
    low_span = low * (1 + (base_spread if low == base else other_spread) / 2)
    high_span = high * (1 - (other_spread if low == base else base_spread) / 2)
    return high_span <= low_span
