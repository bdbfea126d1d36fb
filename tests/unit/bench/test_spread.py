"""The spread of a run's cached trials, the warning when they disagree, and bench compare's refusal to call a change
that the two runs' spreads cover: pure functions fed made-up trial numbers."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from labwright.bench import report, stats
from labwright.bench.openai import Trial
from labwright.bench.runner import SCHEMA, ContextResult
from labwright.cli import main


def trial(ttft: float, total: float, decode: int = 100) -> Trial:
    return Trial(ttft, total, 1000, "usage", decode, "usage", decode, "length", None, None)


def run_doc(label: str, by_context: dict[int, list[Trial]]) -> dict:
    return {"schema": SCHEMA, "label": label,
            "results": [ContextResult(context, trials).to_json() for context, trials in by_context.items()]}


def test_spread_is_max_minus_min_over_the_median():
    assert stats.spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert stats.spread([100.0, None, 100.0]) == 0.0
    assert stats.spread([100.0]) is None and stats.spread([]) is None and stats.spread([None, 5.0]) is None
    assert stats.spread([0.0, 0.0]) is None  # a median of 0 says nothing


def test_the_spread_is_over_the_warm_trials_only():
    # trial 1 (cold) is 10x slower: it is reported apart and does not widen the warm spread
    trials = [trial(2.0, 12.0), trial(0.2, 1.2), trial(0.22, 1.22), trial(0.2, 1.2)]
    spread = stats.spreads(trials)
    assert spread["ttft_s"] == pytest.approx(0.1)  # (0.22 - 0.2) / 0.2
    assert spread["decode_tps"] == 0.0  # 100 tokens in 1.0 s each time
    assert stats.spreads(trials[:2]) == {"ttft_s": None, "prefill_tps": None, "decode_tps": None}


def test_a_run_records_its_spread_and_names_the_contexts_that_disagree():
    quiet = [trial(1.0, 2.0), trial(0.5, 1.5), trial(0.5, 1.52), trial(0.51, 1.5)]
    busy = [trial(1.0, 2.0), trial(0.5, 1.5), trial(0.5, 30.5), trial(0.5, 2.5)]  # decode 100, 3.3, 50 tok/s
    doc = run_doc("a", {512: quiet, 1024: busy})
    assert doc["results"][0]["spread"]["decode_tps"] < 0.05
    assert doc["results"][1]["spread"]["decode_tps"] == pytest.approx((100 - 100 / 30) / 50)
    assert report.noisy([doc], 0.10) == ["a 1024: decode tok/s 193%"]
    assert report.noisy([doc], 2.0) == []
    warning = report.spread_warning([doc], 0.10)
    assert warning is not None and "\n" not in warning and "more than 10%" in warning and "a 1024" in warning
    assert report.spread_warning([doc], 2.0) is None
    rows = report.flat_rows([doc])
    assert rows[1]["decode_spread_pct"] == pytest.approx(193.33, abs=0.01)


def test_a_result_saved_without_a_spread_has_it_computed_from_its_trials():
    doc = run_doc("a", {512: [trial(1.0, 2.0), trial(0.5, 1.5), trial(0.5, 2.5)]})
    del doc["results"][0]["spread"]
    assert report.spread_of(doc["results"][0])["decode_tps"] == pytest.approx(50 / 75)  # 100 and 50 tok/s
    assert report.spread_of({"trials": []}) == {"ttft_s": None, "prefill_tps": None, "decode_tps": None}


def test_a_difference_the_spreads_cover_is_not_called():
    # medians 100 and 105 tok/s, each run's trials spread 10%: spans 95-105 and 99.75-110.25 overlap
    assert stats.covered(100.0, 0.10, 105.0, 0.10) is True
    # 100 and 130: 95-105 and 123.5-136.5 do not
    assert stats.covered(100.0, 0.10, 130.0, 0.10) is False
    # quiet runs: a 5% change is real
    assert stats.covered(100.0, 0.01, 105.0, 0.01) is False
    # the other way round (a loss) is judged the same
    assert stats.covered(105.0, 0.10, 100.0, 0.10) is True
    # an unknown spread (one warm trial): nothing to say
    assert stats.covered(100.0, None, 105.0, 0.10) is None


def decode_run(label: str, rates: list[float]) -> dict:
    """A run at 512 tokens whose trials decode 100 tokens at these rates (the first is the cold trial)."""
    return run_doc(label, {512: [trial(0.5, 0.5 + 100 / rate) for rate in rates]})


def rendered(table) -> str:
    out = io.StringIO()
    Console(file=out, width=250).print(table)
    return out.getvalue()


def test_compare_marks_a_change_within_the_spread():
    a = decode_run("a", [50.0, 95.0, 100.0, 105.0])
    noisy_b = decode_run("b", [50.0, 98.0, 104.0, 110.0])  # +4%, both spread ~10%
    clear_c = decode_run("c", [50.0, 139.0, 140.0, 141.0])  # +40%
    table = rendered(report.compare_table([a, noisy_b, clear_c]))
    line = next(row for row in table.splitlines() if "512" in row)
    cells = [cell.strip() for cell in line.strip("│ ").split("│")]
    decode_changes = cells[-2:]
    assert decode_changes == ["~ +4% (within spread)", "+40%"], cells
    changes = report.changes([a, noisy_b, clear_c])
    decode = [next(r for r in rows if r["metric"] == "decode_tps") for rows in changes]
    assert [d["within_spread"] for d in decode] == [True, False]
    assert decode[1]["change"] == pytest.approx(0.4)


def test_bench_compare_says_so_in_json_and_warns_in_one_line(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(decode_run("a", [50.0, 80.0, 100.0, 120.0])))  # 40% spread
    b.write_text(json.dumps(decode_run("b", [50.0, 105.0, 106.0, 107.0])))
    code = main(["bench", "compare", str(a), str(b), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    docs = json.loads(out)
    assert docs[0]["max_spread"] == 0.1 and "versus_first" not in docs[0]
    decode = next(r for r in docs[1]["versus_first"] if r["metric"] == "decode_tps")
    assert decode["within_spread"] is True and decode["change"] == pytest.approx(0.06)
    assert err.count("\n") == 1 and err.startswith("labwright: warning: the trials disagree by more than 10%")
    assert "a 512: decode tok/s 40%" in err
    # a looser limit: no warning; the change is still within the spread (the spreads, not the limit, decide that)
    code = main(["bench", "compare", str(a), str(b), "--max-spread", "50"])
    out, err = capsys.readouterr()
    assert code == 0 and err == "" and "within spread" in out


@pytest.mark.parametrize("value", ["0", "-5", "1001", "nan"])
def test_a_max_spread_out_of_range_is_one_line(value, tmp_path, capsys):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(decode_run("a", [50.0, 100.0, 100.0])))
    code = main(["bench", "compare", str(a), "--max-spread", value])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and f"--max-spread {value}" in err


def test_the_plot_draws_each_context_s_spread(tmp_path):
    import matplotlib.image

    quiet = decode_run("quiet", [50.0, 100.0, 101.0, 99.0])
    noisy = decode_run("noisy", [50.0, 40.0, 160.0, 100.0])
    assert report.trial_span(noisy["results"][0], "decode_tps") == pytest.approx((40.0, 160.0))
    assert report.trial_span(decode_run("one", [50.0, 100.0])["results"][0], "decode_tps") is None
    plain = report.plot([quiet, decode_run("noisy", [50.0, 100.0])], tmp_path / "plain.png")
    barred = report.plot([quiet, noisy], tmp_path / "barred.png")
    # the noisy run's bar (40 to 160 tok/s) adds ink that the plain picture does not have
    ink = [(matplotlib.image.imread(path)[..., :3].sum(axis=2) < 2.5).sum() for path in (plain, barred)]
    assert ink[1] > ink[0] + 50, ink
