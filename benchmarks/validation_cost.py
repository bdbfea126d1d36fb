"""What typing every input at the boundary costs (issue 33): per deploy run, per CLI call, and at start-up.

- per deploy run: each deploy's host-data parsing (the schema labwright validates a host's data with, before anything
  is contacted), in ms; "first" is the first call in a fresh interpreter (what one deploy run pays: importing pydantic
  and building the schema included), median of ``--runs`` fresh interpreters; "again" the median of ``--runs`` calls
  in one process;
- per CLI call: the in-process parse of typical command lines through the click command tree typer builds (the
  options converted to their types) plus the command's own boundary checks where they are separable (bench llm's
  BenchConfig.validate), median of ``--runs`` parses, in ms;
- start-up: ``labwright --help`` against ``pyinfra --help`` in the same run (subprocesses, interleaved, median of
  ``--runs``). Target: labwright's at most half of pyinfra's (and under 0.3 s, benchmarks/cli_startup.py).

    .venv/bin/python benchmarks/validation_cost.py [--runs 15] [--json]

A deploy whose parser is not importable or refuses the sample data is shown "n/a" with why (the parsers are being
moved onto labwright.schema one by one); the figures are recorded in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _support  # noqa: F401  (tests/ importable as in the other benchmarks)

BIN = Path(sys.executable).parent
TARGET_RATIO = 0.5

#: (deploy, "module:function", sample host data): each deploy's host-data parser and a typical host's data.
DEPLOYS: list[tuple[str, str, dict[str, Any]]] = [
    ("base", "labwright.base.deploy_data:settings_from", {"admin_user": "ops", "ssh_port": 22}),
    ("tabbyapi", "labwright.tabbyapi.deploy_data:settings_from", {"tabbyapi_port": 5000}),
    ("llamacpp", "labwright.llamacpp.deploy_data:settings_from", {}),
    ("model", "labwright.models.deploy_data:settings", {"model_repo": "Qwen/Qwen3-0.6B"}),
    ("desktop", "labwright.desktop.recipe:parse_settings", {}),
    ("guest node", "labwright.guests.node_data:node_settings", {}),
]

#: Typical command lines, parsed (not run).
COMMAND_LINES: list[list[str]] = [
    ["bench", "llm", "--url", "http://127.0.0.1:8080/v1", "--contexts", "512,4096,16k", "--decode", "64"],
    ["kv", "plan", "--config", "config.json", "--context", "32768"],
    ["guest", "apply", "--inventory", "inventory.py", "--dry"],
    ["matrix", "show", "--torch", "2.11.0", "--limit", "20"],
]


def _call(spec: str, data: dict[str, Any]) -> Any:
    module, name = spec.split(":")
    function = getattr(importlib.import_module(module), name)
    return function(data, "host data") if name == "parse_settings" else function(data)


def _first_call_ms(spec: str, data: dict[str, Any]) -> float:
    """The first call's ms in a fresh interpreter: the module imported first (not timed), then the call."""
    module, _ = spec.split(":")
    code = (f"import importlib, json, sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"importlib.import_module({module!r}); from validation_cost import _call; "
            f"t = time.perf_counter(); _call({spec!r}, json.loads({json.dumps(data)!r})); "
            "print((time.perf_counter() - t) * 1000)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["failed"])[-1])
    return float(proc.stdout.strip())


def deploy_costs(runs: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, spec, data in DEPLOYS:
        try:
            first = statistics.median(_first_call_ms(spec, data) for _ in range(runs))
            _call(spec, data)
            again = []
            for _ in range(runs):
                started = time.perf_counter()
                _call(spec, data)
                again.append((time.perf_counter() - started) * 1000)
            out[label] = {"first_ms": first, "again_ms": statistics.median(again)}
        except Exception as exc:  # a parser mid-move is reported, not fatal
            out[label] = {"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:120]}
    return out


def _parse(argv: list[str]) -> None:
    import click
    import typer

    from labwright.cli import app

    command: Any = typer.main.get_command(app)
    ctx = command.make_context("labwright", list(argv), resilient_parsing=False)
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(ctx, ctx.protected_args + ctx.args)
        command = sub
        ctx = sub.make_context(name, rest, parent=ctx)


def cli_costs(runs: int) -> dict[str, float]:
    from labwright.bench.runner import BenchConfig, parse_contexts

    out: dict[str, float] = {}
    for argv in COMMAND_LINES:
        _parse(argv)  # the group's module imported once, untimed
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            _parse(argv)
            took.append((time.perf_counter() - started) * 1000)
        out[" ".join(argv[:2])] = statistics.median(took)
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        BenchConfig(url="http://127.0.0.1:8080/v1", model=None, contexts=parse_contexts("512,4096,16k"),
                    decode=64).validate()
        took.append((time.perf_counter() - started) * 1000)
    out["bench llm: BenchConfig.validate"] = statistics.median(took)
    return out


def startup(runs: int) -> dict[str, float]:
    commands = {"labwright --help": [str(BIN / "labwright"), "--help"],
                "pyinfra --help": [str(BIN / "pyinfra"), "--help"]}
    for argv in commands.values():  # page cache and bytecode warm, untimed
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, argv in commands.items():
            started = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[label].append(time.perf_counter() - started)
    return {label: statistics.median(values) for label, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each measurement (default 15)")
    parser.add_argument("--json", action="store_true", help="the medians as one JSON object on stdout")
    args = parser.parse_args()
    if not 1 <= args.runs <= 1000:
        parser.error(f"--runs {args.runs}: give 1 to 1000")
    deploys, cli, start = deploy_costs(args.runs), cli_costs(args.runs), startup(args.runs)
    ratio = start["labwright --help"] / start["pyinfra --help"]
    met = ratio <= TARGET_RATIO
    if args.json:
        print(json.dumps({"runs": args.runs, "load1": os.getloadavg()[0], "cpus": os.cpu_count(),
                          "deploy_ms": deploys, "cli_ms": cli, "startup_s": start, "ratio": ratio,
                          "target_ratio": TARGET_RATIO, "met": met}, indent=2))
        return 0 if met else 1
    print(f"median of {args.runs} runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"\n{'deploy host data':<24} {'first ms':>9} {'again ms':>9}")
    for label, cost in deploys.items():
        if "error" in cost:
            print(f"{label:<24} {'n/a':>9} {'':>9}  {cost['error']}")
        else:
            print(f"{label:<24} {cost['first_ms']:>9.2f} {cost['again_ms']:>9.3f}")
    print(f"\n{'CLI call (parse)':<40} {'ms':>8}")
    for label, ms in cli.items():
        print(f"{label:<40} {ms:>8.3f}")
    print(f"\n{'start-up':<24} {'median s':>9}")
    for label, seconds in start.items():
        print(f"{label:<24} {seconds:>9.3f}")
    print(f"target: labwright --help at most {TARGET_RATIO:g}x pyinfra --help: {ratio:.2f}x, "
          f"{'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
