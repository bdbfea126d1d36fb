"""What the TLS entrance and Prometheus's scraping cost the engine (issue 36): TTFT and decode tok/s of the REAL
llama-server through deploys/gateway.py's Caddy (TLS verified against the root the deploy copied here, a client key)
against the engine direct, and decode tok/s with and without Prometheus scraping it, in one run.

One fresh container of the test lab (labwright.testing.lab_fixture): the cached CPU llama-server and a tiny GGUF
deployed by deploys/llamacpp.py with ``llamacpp_host=0.0.0.0`` (so this machine can also reach it directly, behind its
key), then deploys/monitoring.py (``monitoring_scrape_interval``, 1 s by default: 15 times the deploy's default, an
upper bound) and deploys/gateway.py. ``labwright bench`` (the library, in this process, as ``labwright bench``
runs) measures both ways over the lab bridge, ``--rounds`` times, alternating which goes first so drift of the
machine's load lands on both. The scrape cost: the same bench against the engine direct with prometheus.service
stopped and running, alternating likewise.

    .venv/bin/python benchmarks/gateway_overhead.py [--contexts 512,2048] [--decode 128] [--trials 4] [--rounds 3]

Target: through the entrance, decode tok/s within 2% of direct and TTFT within 5 ms (TLS and one proxy hop per
request; the stream is flushed token by token); with scraping, decode tok/s within 1% of without. On a loaded
machine the round-to-round spread of the direct runs is printed too, and a difference inside it is noise.
Results: docs/gateway.md and docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _support  # noqa: F401  (tests/support importable)

from labwright.bench.runner import BenchConfig, parse_contexts, run
from labwright.deploys.gateway import stored_root
from labwright.lab.lab import instance_address
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.testing.lab_fixture import Lab, ensure_test_lab
from labwright.testing.pyinfra_output import run_pyinfra

REPO = Path(__file__).resolve().parents[1]
MODEL = "/srv/models/tiny.gguf"


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    if result.exit_code != 0:
        raise SystemExit(f"{script!r} in {name} failed: {result.stderr.decode(errors='replace')[-500:]}")
    return result.stdout.decode()


Row = tuple[float, float, float, float]


def medians(bench_run) -> Row:
    """TTFT ms and decode tok/s as the client saw them, the engine's own decode tok/s (llama.cpp's timings), and
    the client's TTFT minus the engine's own prompt time: what the way there adds, whatever the engine's speed (on a
    shared machine the engine's speed swings with the other load; these two columns do not)."""
    ttft, decode, server, way = [], [], [], []
    for context in bench_run.results:
        for trial in context.trials[1:] or context.trials:
            ttft.append(trial.ttft_s * 1000)
            decode.append(trial.decode_tps or 0.0)
            server.append(trial.server_decode_tps or 0.0)
            prompt_ms = float((trial.timings or {}).get("prompt_ms") or 0.0)
            way.append(trial.ttft_s * 1000 - prompt_ms)
    return statistics.median(ttft), statistics.median(decode), statistics.median(server), statistics.median(way)


def rounds(args: argparse.Namespace, configs: dict[str, BenchConfig], before: dict[str, str] | None = None,
           lab: Lab | None = None, name: str = "") -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {key: [] for key in configs}
    order = list(configs)
    for number in range(args.rounds):
        for key in order if number % 2 == 0 else order[::-1]:
            if before and lab:
                sh(lab, name, before[key])
            rows[key].append(medians(run(configs[key])))
            print(f"  round {number + 1} {key:>12}: TTFT {rows[key][-1][0]:.1f} ms, decode {rows[key][-1][1]:,.1f} "
                  f"tok/s (engine's own {rows[key][-1][2]:,.1f}), TTFT beyond the engine's prompt time "
                  f"{rows[key][-1][3]:.1f} ms", file=sys.stderr, flush=True)
    return rows


def summary(rows: dict[str, list[Row]], base: str, other: str) -> str:
    """Medians over rounds; the last two columns are the load-robust ones (client decode / engine's own decode,
    TTFT beyond the engine's prompt time)."""
    lines = []
    for name in (base, other):
        ttft, dec, srv, way = (statistics.median(r[i] for r in rows[name]) for i in range(4))
        ratio = statistics.median(r[1] / r[2] for r in rows[name] if r[2]) * 100 if any(r[2] for r in rows[name]) \
            else 0.0
        lines.append(f"| {name} | {ttft:.1f} | {dec:,.1f} | {srv:,.1f} | {ratio:.1f}% | {way:.1f} |")
    spread = [r[1] for r in rows[base]]
    lines.append(f"round-to-round spread of {base}'s decode: "
                 f"{(max(spread) - min(spread)) / statistics.median(spread) * 100:.0f}%")
    return "\n".join(lines)


def idle_cpu(lab: Lab, name: str, units: list[str], seconds: float) -> dict[str, float]:
    """Each unit's main process's CPU use (user + system, all its threads, /proc/PID/stat) over ``seconds`` of wall
    time, in % of one core; works under cgroup v1 and v2 alike."""
    script = ("for u in " + " ".join(units) + "; do p=$(systemctl show -p MainPID --value $u.service); "
              "if [ \"$p\" -gt 0 ] 2>/dev/null; then awk -v u=$u '{print u, $14 + $15}' /proc/$p/stat; "
              "else echo $u 0; fi; done; getconf CLK_TCK")

    def usage() -> tuple[dict[str, int], int]:
        lines = sh(lab, name, script).split()
        return {lines[i]: int(lines[i + 1]) for i in range(0, len(lines) - 1, 2)}, int(lines[-1])

    (before, _), start = usage(), time.monotonic()
    time.sleep(seconds)
    (after, ticks), wall = usage(), time.monotonic() - start
    return {unit: max(0, after[unit] - before[unit]) / ticks / wall * 100 for unit in units}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scrape-interval", default="1s")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    contexts = parse_contexts(args.contexts)
    lab = ensure_test_lab()
    build_llama_server()
    work = Path(tempfile.mkdtemp(prefix="lw-gateway-bench-"))
    name = lab.fresh("lwgwbench")
    try:
        sh(lab, name, "mkdir -p /srv/models")
        with write_tiny_gguf(work / "tiny.gguf").open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        data = (f"llamacpp_model={MODEL}", "llamacpp_ctx_size=8192", "llamacpp_host=0.0.0.0", "gateway_clients=bench",
                f"monitoring_scrape_interval={args.scrape_interval}")
        for deploy in ("llamacpp", "monitoring", "gateway"):
            done = run_pyinfra(f"@lxd/{name}", f"deploys/{deploy}.py", *data, cwd=REPO, timeout=900)
            if done.rc != 0:
                raise SystemExit(f"{deploy}: {done.output[-3000:]}")
            print(f"{deploy} deployed in {done.seconds:.1f}s", file=sys.stderr, flush=True)
        address = instance_address(lab.client, name) or ""
        engine_key = sh(lab, name, "cat /etc/llama-server/api-key").strip()
        client_key = sh(lab, name, "cat /etc/caddy/labwright/clients/bench").strip()
        root = str(stored_root(f"@lxd/{name}"))
        common = {"model": None, "contexts": contexts, "decode": args.decode, "trials": args.trials}
        direct = BenchConfig(url=f"http://{address}:8001/v1", api_key=engine_key, **common)
        entrance = BenchConfig(url=f"https://{address}:8443/v1", api_key=client_key, ca=root, **common)
        print(f"TLS entrance vs direct ({args.rounds} rounds, contexts {args.contexts}, {args.decode} decode tokens, "
              f"{args.trials} trials):", file=sys.stderr, flush=True)
        tls = rounds(args, {"direct": direct, "TLS entrance": entrance})
        print(f"Prometheus scraping every {args.scrape_interval} vs stopped:", file=sys.stderr, flush=True)
        scrape = rounds(args, {"no scraping": direct, "scraping": direct},
                        {"no scraping": "systemctl stop prometheus", "scraping": "systemctl start prometheus"},
                        lab, name)
        header = ("| TTFT ms | decode tok/s | engine's own decode tok/s | client decode / engine's own | TTFT beyond "
                  "the engine's prompt time, ms |\n|---|---|---|---|---|---|")
        print(f"\n| way {header}")
        print(summary(tls, "direct", "TLS entrance"))
        print(f"\n| Prometheus (every {args.scrape_interval}) {header}")
        print(summary(scrape, "no scraping", "scraping"))
        units = ["llama-server", "prometheus", "prometheus-node-exporter"]
        sh(lab, name, "systemctl stop prometheus")
        quiet = idle_cpu(lab, name, units, args.idle_seconds)
        sh(lab, name, "systemctl start prometheus")
        busy = idle_cpu(lab, name, units, args.idle_seconds)
        print(f"\nCPU of an idle engine's guest over {args.idle_seconds:g} s, % of one core "
              f"(Prometheus stopped / scraping every {args.scrape_interval}):")
        for unit in units:
            print(f"| {unit} | {quiet[unit]:.2f} | {busy[unit]:.2f} |")
    finally:
        lab.remove(name)
        shutil.rmtree(stored_root(f"@lxd/{name}").parent, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
