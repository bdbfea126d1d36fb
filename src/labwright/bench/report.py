"""Bench results out: a table, CSV, the JSON documents read back for ``compare``, and the PNG plot.

Everything here works on the JSON document a run writes (``BenchRun.to_json()``), so a fresh run and files saved from
two stacks are reported the same way.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.table import Table

from labwright.atomic import write_bytes_atomic
from labwright.bench import stats
from labwright.bench.runner import SCHEMA
from labwright.errors import BadInput
from labwright.textio import read_json
from labwright.ui import table

MIB = 1024 * 1024
CSV_COLUMNS = (
    "label", "context", "prompt_tokens", "decode_tokens", "trials",
    "ttft_ms", "prefill_tps", "decode_tps",
    "cold_ttft_ms", "cold_prefill_tps", "cold_decode_tps",
    "server_prefill_tps", "server_decode_tps", "peak_rss_mib", "peak_gpu_mib",
    "decode_spread_pct", "ttft_spread_pct", "error",
)


def load(path: Path) -> dict[str, Any]:
    """A saved ``labwright bench llm --json`` document, checked enough to report from; one line when it is not."""
    # Missing, a directory, binary, not UTF-8, not JSON: one line naming the file (labwright.textio).
    return check(read_json(path, "the output of labwright bench llm --json"), str(path))


def check(doc: Any, source: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadInput(f"{source}: not a labwright bench result (schema {SCHEMA!r} expected): pass the output of "
                       "labwright bench llm --json")
    results = doc.get("results")
    if not isinstance(results, list) or not all(isinstance(r, dict) and isinstance(r.get("context"), int)
                                                and (r.get("warm") or r.get("cold") or isinstance(r.get("error"), str))
                                                for r in results):
        raise BadInput(f"{source}: 'results' must list contexts with cold/warm summaries (or an error): the file is "
                       "damaged")
    from labwright.schema import files  # pydantic: only once a result is read

    files.check(files.BenchResult, doc, source, "a labwright bench result",
               "pass the output of labwright bench llm --json, or run the benchmark again")
    return doc


def best(result: dict[str, Any]) -> dict[str, Any]:
    """The cached-trial median when there is one, else the cold run (a single-trial benchmark)."""
    return dict(result.get("warm") or result.get("cold") or {})


def trial_span(result: dict[str, Any], key: str) -> tuple[float, float] | None:
    """The slowest and fastest of a context's cached trials (2..n) for ``key``; None with fewer than two."""
    values = [v for t in (result.get("trials") or [])[1:] if isinstance(t, dict)
              and isinstance(v := t.get(key), (int, float))]
    return (min(values), max(values)) if len(values) >= 2 else None


def spread_of(result: dict[str, Any]) -> dict[str, float | None]:
    """A context's spread per metric (labwright.bench.stats.spreads): as the run recorded it, else computed from its
    trials (a result saved before the spread was recorded)."""
    recorded = result.get("spread")
    if isinstance(recorded, dict):
        return {key: value if isinstance(value, (int, float)) else None
                for key in stats.SPREAD_KEYS for value in [recorded.get(key)]}
    trials = [t for t in result.get("trials") or [] if isinstance(t, dict)][1:]
    return {key: stats.spread(v if isinstance(v := t.get(key), (int, float)) else None for t in trials)
            for key in stats.SPREAD_KEYS}


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100


def noisy(docs: list[dict[str, Any]], limit: float) -> list[str]:
    """"LABEL CONTEXT: decode tok/s 34%, TTFT 12%" for each context whose warm trials disagree beyond ``limit``."""
    names = {"decode_tps": "decode tok/s", "ttft_s": "TTFT"}
    found = []
    for doc in docs:
        for result in doc["results"]:
            wide = stats.too_wide(spread_of(result), limit)
            if wide:
                said = ", ".join(f"{names[key]} {value * 100:.0f}%" for key, value in wide.items())
                found.append(f"{doc.get('label', '?')} {result['context']}: {said}")
    return found


def spread_warning(docs: list[dict[str, Any]], limit: float) -> str | None:
    """The one warning line when some context's warm trials disagree beyond ``limit`` (None when none does)."""
    found = noisy(docs, limit)
    if not found:
        return None
    return (f"the trials disagree by more than {limit * 100:g}% ((max - min) / median of the warm trials) at "
            f"{'; '.join(found)}: a busy machine or a cold cache; rerun on a quiet machine (more --trials help)")


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def flat_rows(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for doc in docs:
        for result in doc["results"]:
            summary, cold = best(result), result.get("cold") or {}
            rss, gpu = result.get("peak_rss_bytes"), result.get("peak_gpu_bytes")
            spread = spread_of(result)
            rows.append({
                "label": doc.get("label", "?"), "context": result["context"],
                "prompt_tokens": summary.get("prompt_tokens"), "decode_tokens": summary.get("decode_tokens"),
                "trials": len(result.get("trials") or []),
                "ttft_ms": _ms(summary.get("ttft_s")), "prefill_tps": summary.get("prefill_tps"),
                "decode_tps": summary.get("decode_tps"),
                "cold_ttft_ms": _ms(cold.get("ttft_s")), "cold_prefill_tps": cold.get("prefill_tps"),
                "cold_decode_tps": cold.get("decode_tps"),
                "server_prefill_tps": summary.get("server_prefill_tps"),
                "server_decode_tps": summary.get("server_decode_tps"),
                "peak_rss_mib": None if rss is None else rss / MIB,
                "peak_gpu_mib": None if gpu is None else gpu / MIB,
                "decode_spread_pct": _pct(spread["decode_tps"]), "ttft_spread_pct": _pct(spread["ttft_s"]),
                "error": result.get("error"),
            })
    return rows


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _spread_cell(ttft: float | None, decode: float | None, limit: float) -> str:
    """The spreads of TTFT and decode tok/s as the table shows them: "5%/12%", each with "!" above the limit."""
    if ttft is None and decode is None:
        return "-"
    return "/".join("-" if p is None else f"{p:.0f}%{'!' if p > limit * 100 else ''}" for p in (ttft, decode))


def results_table(docs: list[dict[str, Any]], limit: float = stats.DEFAULT_MAX_SPREAD) -> Table:
    columns = ["label", "context", "prompt tok", "decode tok", "TTFT ms", "prefill tok/s", "decode tok/s",
               "spread", "cold TTFT ms", "cold prefill", "cold decode", "server prefill",
               "server decode", "peak RSS MiB"]
    rows = [[str(r["label"]), _fmt(r["context"]), _fmt(r["prompt_tokens"]), _fmt(r["decode_tokens"]),
             _fmt(r["ttft_ms"], 1), _fmt(r["prefill_tps"]), _fmt(r["decode_tps"]),
             _spread_cell(r["ttft_spread_pct"], r["decode_spread_pct"], limit),
             _fmt(r["cold_ttft_ms"], 1),
             _fmt(r["cold_prefill_tps"]), _fmt(r["cold_decode_tps"]), _fmt(r["server_prefill_tps"]),
             _fmt(r["server_decode_tps"]), _fmt(r["peak_rss_mib"]), _fmt(r["peak_gpu_mib"])] for r in flat_rows(docs)]
    if all(row[-1] == "-" for row in rows):  # no GPU on this machine: no empty column
        rows = [row[:-1] for row in rows]
    else:
        columns.append("peak GPU MiB")
    errors = [r["error"] for r in flat_rows(docs)]
    if any(errors):  # error rows: what the server sent instead of a measurement
        columns.append("error")
        rows = [[*row, error or ""] for row, error in zip(rows, errors, strict=True)]
    return table(f"Benchmark (median of cached trials; cold = trial 1; spread: TTFT/decode (max - min) / median of "
                 f"the cached trials, ! above {limit * 100:g}%)", columns, rows)


def changes(docs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """For each run after the first, per context and metric (prefill_tps, decode_tps): its median, the first run's,
    the change, and whether the two runs' spreads cover that change (``within_spread``: True, False, or None when a
    run has fewer than two warm trials to measure a spread). A change the spreads cover is no win and no loss."""
    first = {r["context"]: r for r in docs[0]["results"]} if docs else {}
    out = []
    for doc in docs[1:]:
        rows = []
        for result in sorted(doc["results"], key=lambda r: r["context"]):
            base = first.get(result["context"])
            for key in ("prefill_tps", "decode_tps"):
                value = best(result).get(key)
                was = best(base).get(key) if base is not None else None
                if value is None or not was:
                    continue
                within = stats.covered(was, spread_of(base or {})[key], value, spread_of(result)[key])
                rows.append({"context": result["context"], "metric": key, "first": was, "value": value,
                             "change": value / was - 1, "within_spread": within})
        out.append(rows)
    return out


def _change_cell(value: float | None, base: float | None, within: bool | None) -> str:
    if value is None or not base:
        return "-"
    change = f"{(value / base - 1) * 100:+.0f}%"
    return f"~ {change} (within spread)" if within else change


def compare_table(docs: list[dict[str, Any]]) -> Table:
    """Field note 001's side-by-side tables: one row per context, each label's prefill and decode, change vs the
    first; a change that the two runs' spreads cover is marked "within spread": not a win, not a loss."""
    labels = [str(d.get("label", "?")) for d in docs]
    by_label = [{r["context"]: r for r in d["results"]} for d in docs]
    contexts = sorted({c for runs in by_label for c in runs})
    columns = ["context"]
    for metric in ("prefill", "decode"):
        columns += [f"{label} {metric}" for label in labels]
        columns += [f"{label} vs {labels[0]}" for label in labels[1:]]
    rows = []
    for context in contexts:
        row = [_fmt(context)]
        results = [runs.get(context) for runs in by_label]
        for key in ("prefill_tps", "decode_tps"):
            values = [best(r).get(key) if r is not None else None for r in results]
            row += [_fmt(v) for v in values]
            base, first = values[0], results[0]
            for value, result in zip(values[1:], results[1:], strict=True):
                within = None
                if value is not None and base and first is not None and result is not None:
                    within = stats.covered(base, spread_of(first)[key], value, spread_of(result)[key])
                row.append(_change_cell(value, base, within))
        rows.append(row)
    return table("Compared (tok/s, median of cached trials; \"within spread\": the runs' trials disagree by more "
                 "than the change, so it is no win or loss)", columns, rows)


def csv_text(docs: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in flat_rows(docs):
        writer.writerow({k: ("" if v is None else round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
    return out.getvalue()


def _short(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def require_matplotlib() -> None:
    """Checked before any benchmark runs, so a missing plotting library costs nothing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BadInput("--plot needs matplotlib, which is not installed: pip install 'labwright[plot]'") from None


def plot(docs: list[dict[str, Any]], path: Path) -> Path:
    """tok/s against context (log scale), prefill and decode side by side, one line per label (the medians) with a
    bar at each point from the slowest to the fastest cached trial (the spread; none with fewer than two)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    for ax, key, title in ((axes[0], "prefill_tps", "Prefill (prompt tokens / TTFT)"),
                           (axes[1], "decode_tps", "Decode (tokens / (total - TTFT))")):
        for doc in docs:
            results = [r for r in sorted(doc["results"], key=lambda r: r["context"]) if best(r).get(key) is not None]
            if results:
                xs, ys = [r["context"] for r in results], [best(r)[key] for r in results]
                line, = ax.plot(xs, ys, marker="o", label=str(doc.get("label")))
                # the spread: a bar from the slowest to the fastest cached trial at each context
                spans = [(x, y, span) for x, y, r in zip(xs, ys, results, strict=True)
                         if (span := trial_span(r, key)) is not None]
                if spans:
                    ax.errorbar([x for x, _, _ in spans], [y for _, y, _ in spans],
                                yerr=[[max(0.0, y - lo) for _, y, (lo, _) in spans],
                                      [max(0.0, hi - y) for _, y, (_, hi) in spans]],
                                fmt="none", ecolor=line.get_color(), capsize=4, alpha=0.8)
        ax.set_xscale("log", base=2)
        contexts = sorted({r["context"] for doc in docs for r in doc["results"]})
        ax.set_xticks(contexts, [_short(c) for c in contexts])
        ax.minorticks_off()
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("tokens/s")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend()
    figure.tight_layout()
    image = io.BytesIO()
    try:
        figure.savefig(image, format="png")
    finally:
        plt.close(figure)
    try:
        # The old PNG or the new, never half of one (a kill or a full disk mid-write).
        write_bytes_atomic(path, image.getvalue())
    except OSError as exc:
        raise BadInput(f"--plot {path}: cannot write ({exc.strerror}): pick a writable path") from None
    return path
