"""Trial statistics as the seed reports them: trial 1 is the cold run, the median over the later (cached) trials."""

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
