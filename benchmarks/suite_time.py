"""The suite's wall time by group, idle and under load, side by side in one run (issue 29).

Targets (2 cores): ``scripts/test`` at most 20 min idle and at most 35 min with both cores 60 % busy; CI (fresh-check
plus the suite) at most 25 min. Before issue 29 (docs/testing.md): 43 min 43 s idle, 76 min 42 s loaded, CI 45-63
min. With every group asked for (the default), the suite runs once as ``scripts/test`` runs it (its workers,
``--dist loadgroup``) and each group's test seconds (summed over the workers, set-up and tear-down included) are read
from its JUnit XML; with some groups, each runs alone as ``scripts/test PATHS``. The groups:

- ``unit``: tests/unit;
- ``lab``: tests/integration, not ``slow``, not the browser;
- ``slow``: tests/integration marked ``slow`` (real venvs, wheels, builds), not the browser;
- ``browser``: the Open WebUI test in real Chromium (tests/integration/test_openwebui_browser.py);
- ``fresh-check``: scripts/fresh-check (the README's first command on a clean Debian 12), idle only unless asked.

The load is one process per core busy 60 % of each 100 ms (a build or a second service on a homelab box), at normal
priority. A failed test fails the benchmark (exit 1): a suite that is fast but wrong under load is the bug.

    .venv/bin/python benchmarks/suite_time.py [--only idle|loaded] [--groups unit,lab,slow,browser,fresh-check]
                                              [--busy 2] [--duty 0.6] [--record] [--log DIR]

``--record`` writes the idle run's per-test durations to tests/durations.json (the order xdist hands work out in,
longest first: tests/support/parallel.py), with the commit they were measured on. ``--record-from LOG`` writes it
from the output of a whole run made with ``--durations=0`` instead (``scripts/test --durations=0 > LOG``), without
running anything; ``--table LOG`` prints the same run as Markdown tables (per module, and the slowest items with
their set-up, call and tear-down), as docs/testing.md keeps them. ``benchmarks/suite_schedule.py`` predicts the
wall time from tests/durations.json instead, per worker count, without running anything.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSER = "tests/integration/test_openwebui_browser.py"
GROUPS: dict[str, list[str]] = {
    "unit": ["tests/unit"],
    "lab": ["tests/integration", "-m", "not slow", "--deselect", BROWSER],
    "slow": ["tests/integration", "-m", "slow", "--deselect", BROWSER],
    "browser": [BROWSER],
}
#: Before issue 29, measured on this machine kind (docs/testing.md, docs/reliability.md), seconds.
BEFORE = {"idle": 2623.0, "loaded": 4602.0, "ci": 2725.0}
TARGET = {"idle": 20 * 60.0, "loaded": 35 * 60.0, "ci": 25 * 60.0}
SUMMARY = re.compile(r"^(?:=+ )?(\d+ (?:passed|failed|errors?|skipped|deselected|no tests).*?) in [\d.]+s",
                     re.MULTILINE)  # pytest's own closing line (with -q, or framed), not a nested run's
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S.*)$")


def spin(stop: multiprocessing.synchronize.Event, duty: float) -> None:  # type: ignore[name-defined]
    """Busy ``duty`` of every 100 ms, idle the rest."""
    while not stop.is_set():
        start = time.monotonic()
        while time.monotonic() - start < 0.1 * duty:
            pass
        time.sleep(0.1 * (1 - duty))


def slow_ids() -> set[str]:
    """The node ids marked slow (collected, not run)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                           "no:xdist", "-m", "slow", "tests/integration"], cwd=ROOT, capture_output=True, text=True)
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def group_of(nodeid: str, slow: set[str]) -> str:
    if nodeid.startswith("tests/unit/"):
        return "unit"
    if nodeid.startswith(BROWSER):
        return "browser"
    return "slow" if nodeid in slow else "lab"


def run_group(name: str, log_dir: Path, kind: str) -> tuple[float, int, str, dict[str, float]]:
    """One group as scripts/test runs it (``suite``: all of them in one run); (wall seconds, exit code, summary
    line, per-test seconds)."""
    log = log_dir / f"{kind}-{name}.txt"
    started = time.monotonic()
    if name == "fresh-check":
        with log.open("w") as handle:
            code = subprocess.run([str(ROOT / "scripts" / "fresh-check")], cwd=ROOT, stdout=handle,
                                  stderr=subprocess.STDOUT).returncode
        return time.monotonic() - started, code, log.read_text(errors="replace").strip().splitlines()[-1:][0] \
            if log.stat().st_size else "no output", {}
    junit = log_dir / f"{kind}-{name}.xml"
    command = [str(ROOT / "scripts" / "test"), "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
               *(GROUPS[name] if name != "suite" else [])]
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT).returncode
    elapsed = time.monotonic() - started
    output = log.read_text(errors="replace")
    found = SUMMARY.findall(output)
    summary = found[-1] if found else (output.strip().splitlines() or ["no output"])[-1]
    if code == 5 and name == "browser" and "deselected" in summary:
        code = 0
    return elapsed, code, summary, per_test(junit)


def per_test(junit: Path) -> dict[str, float]:
    """Per-test seconds (set-up, call and tear-down together) from pytest's JUnit XML, by node id."""
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return {}
    out: dict[str, float] = {}
    for case in tree.iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        module, _, cls = path.partition("/Test")
        nodeid = f"{module}.py::" + (f"Test{cls}::" if cls else "") + case.get("name", "")
        out[nodeid] = out.get(nodeid, 0.0) + float(case.get("time", 0) or 0)
    return out


def from_durations_log(text: str) -> dict[str, float]:
    """Per-test seconds (set-up, call and tear-down added) from pytest's ``--durations=0`` lines."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = DURATION.match(line.strip())
        if match:
            nodeid = match.group(3)
            out[nodeid] = out.get(nodeid, 0.0) + float(match.group(1))
    return out


def table(text: str, top: int = 30) -> str:
    """Markdown: seconds per module (set-up + call + tear-down of its tests, which includes its fixtures), then the
    ``top`` slowest single phases."""
    phases: list[tuple[float, str, str]] = []
    for line in text.splitlines():
        match = DURATION.match(line.strip())
        if match:
            phases.append((float(match.group(1)), match.group(2), match.group(3)))
    modules: dict[str, list[float]] = {}
    for seconds, phase, nodeid in phases:
        row = modules.setdefault(nodeid.split("::")[0], [0.0, 0.0, 0.0])
        row[("setup", "call", "teardown").index(phase)] += seconds
    out = ["| module | set-up (fixtures) s | call s | tear-down s | total s |", "| --- | ---: | ---: | ---: | ---: |"]
    for module, (setup, call, teardown) in sorted(modules.items(), key=lambda kv: -sum(kv[1])):
        out.append(f"| {module} | {setup:.1f} | {call:.1f} | {teardown:.1f} | {setup + call + teardown:.1f} |")
    out += ["", "| phase | s | test |", "| --- | ---: | --- |"]
    for seconds, phase, nodeid in sorted(phases, reverse=True)[:top]:
        out.append(f"| {phase} | {seconds:.1f} | `{nodeid}` |")
    return "\n".join(out)


def record(durations: dict[str, float]) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "tests" / "durations.json"
    data = {"commit": commit, "measured": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
            "seconds": {k: round(v, 2) for k, v in sorted(durations.items())}}
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=0) + "\n")
    tmp.replace(out)
    print(f"wrote {out.relative_to(ROOT)} ({len(durations)} tests)")


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:4.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("idle", "loaded"), help="run only this kind")
    parser.add_argument("--groups", default="unit,lab,slow,browser,fresh-check",
                        help="comma-separated groups (default: all)")
    parser.add_argument("--busy", type=int, default=2, help="busy processes while loaded (default 2)")
    parser.add_argument("--duty", type=float, default=0.6, help="share of time each is busy (default 0.6)")
    parser.add_argument("--record", action="store_true", help="write tests/durations.json from the idle run")
    parser.add_argument("--record-from", type=Path, metavar="LOG",
                        help="write tests/durations.json from a --durations=0 run's output and stop")
    parser.add_argument("--table", type=Path, metavar="LOG",
                        help="print a --durations=0 run's output as Markdown tables and stop")
    parser.add_argument("--log", type=Path, help="directory for each group's pytest output (default: a temp dir)")
    args = parser.parse_args()
    if args.table:
        try:
            print(table(args.table.read_text(errors="replace")))
        except OSError as exc:
            parser.error(f"--table {args.table}: {exc.strerror}")
        return 0
    if args.record_from:
        try:
            found = from_durations_log(args.record_from.read_text(errors="replace"))
        except OSError as exc:
            parser.error(f"--record-from {args.record_from}: {exc.strerror}")
        if not found:
            parser.error(f"--record-from {args.record_from}: no --durations=0 lines in it; run the suite with "
                         "--durations=0 and give its output")
        record(found)
        return 0
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = [g for g in groups if g not in (*GROUPS, "fresh-check")]
    if unknown or not groups:
        parser.error(f"--groups: unknown {', '.join(unknown) or '(none given)'}; choose from "
                     f"{', '.join((*GROUPS, 'fresh-check'))}")
    if args.busy < 1 or not 0 < args.duty <= 1:
        parser.error("--busy must be at least 1 and --duty in (0, 1]")
    log_dir = args.log or Path(tempfile.mkdtemp(prefix="labwright-suite-time-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"logs in {log_dir}", flush=True)
    totals: dict[str, float] = {}
    failures = 0
    durations: dict[str, float] = {}
    fresh = 0.0
    for kind in ((args.only,) if args.only else ("idle", "loaded")):
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=spin, args=(stop, args.duty), daemon=True)
                   for _ in range(args.busy if kind == "loaded" else 0)]
        for worker in workers:
            worker.start()
        try:
            total = 0.0
            whole = set(GROUPS) <= set(groups)
            runs = (["suite"] if whole else []) + [g for g in groups if g == "fresh-check" or not whole]
            for name in runs:
                if name == "fresh-check" and kind == "loaded":
                    continue  # CI runs it on an idle machine; its own number is idle
                elapsed, code, summary, tests = run_group(name, log_dir, kind)
                failures += code != 0
                if name == "fresh-check":
                    fresh = elapsed
                else:
                    total += elapsed
                    if kind == "idle":
                        durations.update(tests)
                print(f"{kind:6} {name:11} {fmt(elapsed):>14}  exit {code}  {summary}", flush=True)
                if name == "suite":
                    slow = slow_ids()
                    sums: dict[str, float] = {}
                    for nodeid, seconds in tests.items():
                        sums[group_of(nodeid, slow)] = sums.get(group_of(nodeid, slow), 0.0) + seconds
                    for group in GROUPS:
                        print(f"{kind:6}   {group:9} {fmt(sums.get(group, 0.0)):>14}  test seconds (all workers)")
            totals[kind] = total
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=10)
    print()
    for kind, total in totals.items():
        whole = set(GROUPS) <= set(groups)
        line = f"suite {kind:6} {fmt(total):>14}"
        if whole:
            line += (f"  (before {fmt(BEFORE[kind])}: {BEFORE[kind] / total:.2f}x faster; target at most "
                     f"{fmt(TARGET[kind])}: {'met' if total <= TARGET[kind] else 'MISSED'})")
        print(line)
    if "idle" in totals and fresh and set(GROUPS) <= set(groups):
        ci = totals["idle"] + fresh
        print(f"CI (fresh-check + suite, idle) {fmt(ci)}  (before {fmt(BEFORE['ci'])}: {BEFORE['ci'] / ci:.2f}x; "
              f"target at most {fmt(TARGET['ci'])}: {'met' if ci <= TARGET['ci'] else 'MISSED'})")
    if args.record and durations:
        record(durations)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
