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


def medians(bench_run) -> tuple[float, float, float]:
    """TTFT ms and decode tok/s as the client saw them, and the engine's own decode tok/s (llama.cpp's timings):
    a gap between the last two is the way there, not the engine."""
    ttft, decode, server = [], [], []
    for context in bench_run.results:
        for trial in context.trials[1:] or context.trials:
            ttft.append(trial.ttft_s * 1000)
            decode.append(trial.decode_tps or 0.0)
            server.append(trial.server_decode_tps or 0.0)
    return statistics.median(ttft), statistics.median(decode), statistics.median(server)


def rounds(args: argparse.Namespace, configs: dict[str, BenchConfig], before: dict[str, str] | None = None,
           lab: Lab | None = None, name: str = "") -> dict[str, list[tuple[float, float, float]]]:
    rows: dict[str, list[tuple[float, float, float]]] = {key: [] for key in configs}
    order = list(configs)
    for number in range(args.rounds):
        for key in order if number % 2 == 0 else order[::-1]:
            if before and lab:
                sh(lab, name, before[key])
            rows[key].append(medians(run(configs[key])))
            print(f"  round {number + 1} {key:>12}: TTFT {rows[key][-1][0]:.1f} ms, decode {rows[key][-1][1]:,.1f} "
                  f"tok/s (engine's own {rows[key][-1][2]:,.1f})", file=sys.stderr, flush=True)
    return rows


def summary(rows: dict[str, list[tuple[float, float, float]]], base: str, other: str) -> str:
    b_ttft, b_dec, b_srv = (statistics.median(r[i] for r in rows[base]) for i in (0, 1, 2))
    o_ttft, o_dec, o_srv = (statistics.median(r[i] for r in rows[other]) for i in (0, 1, 2))
    spread = (max(r[1] for r in rows[base]) - min(r[1] for r in rows[base])) / b_dec * 100 if b_dec else 0
    return (f"| {base} | {b_ttft:.1f} | {b_dec:,.1f} | {b_srv:,.1f} |\n| {other} | {o_ttft:.1f} "
            f"({o_ttft - b_ttft:+.1f} ms) | {o_dec:,.1f} ({(o_dec / b_dec - 1) * 100:+.1f}%) | {o_srv:,.1f} |\n"
            f"round-to-round spread of {base}'s decode: {spread:.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scrape-interval", default="1s")
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
        print("\n| way | TTFT ms (median) | decode tok/s (median) | engine's own decode tok/s |\n|---|---|---|---|")
        print(summary(tls, "direct", "TLS entrance"))
        print(f"\n| Prometheus (every {args.scrape_interval}) | TTFT ms (median) | decode tok/s (median) | "
              "engine's own decode tok/s |")
        print("|---|---|---|---|")
        print(summary(scrape, "no scraping", "scraping"))
    finally:
        lab.remove(name)
        shutil.rmtree(stored_root(f"@lxd/{name}").parent, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
