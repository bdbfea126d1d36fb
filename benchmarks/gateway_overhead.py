"""What the TLS entrance and Prometheus's scraping cost the engine (issue 36): TTFT and decode tok/s of the REAL
llama-server through deploys/gateway.py's Caddy (TLS verified against the root the deploy copied here, a client key)
against the engine direct, and the engine's decode tok/s with the monitoring deploy scraping it at its DEFAULT
interval against without, in one run.

One fresh container of the test lab (labwright.testing.lab_fixture): the cached CPU llama-server and a tiny GGUF
deployed by deploys/llamacpp.py with ``llamacpp_host=0.0.0.0`` (so this machine can also reach it directly, behind its
key), then deploys/monitoring.py with its defaults (scrape interval and GPU script timer as users get them) and
deploys/gateway.py.

The entrance: ``labwright bench`` (the library, in this process) both ways over the lab bridge, ``--rounds`` times,
alternating which goes first so drift of the machine's load lands on both.

The scrape cost, three ways:

1. CPU per scrape, each piece measured on the guest by itself: N back-to-back GETs of llama-server's ``/metrics``
   (its key) and of node-exporter's ``/metrics`` (the CPU the serving process spends, /proc/PID/stat), N runs of the
   GPU textfile script (its own CPU and what its ``/slots`` request costs llama-server); node-exporter's own
   per-collector durations; from these, the share of one core monitoring takes at the deploy's intervals.
2. Decode: windows of ``--window`` seconds of back-to-back completions (``--decode`` tokens each, llama.cpp's own
   ``timings``: tokens / time spent generating), with the monitoring units stopped (prometheus and the GPU
   script's timer), at the deployed default interval, and at 1 s (a stress row: 15 times the default), the order
   rotated every round, so each round pairs the three; the per-round difference against that round's stopped
   window and its spread over rounds.
3. An idle engine's guest: each unit's CPU over ``--idle-seconds`` both ways.

    .venv/bin/python benchmarks/gateway_overhead.py [--parts tls,scrape] [--contexts 512,2048] [--decode 128]
        [--trials 4] [--rounds 3] [--window 30]

Target: through the entrance, decode tok/s within 2% of direct and TTFT within 5 ms (TLS and one proxy hop per
request; the stream is flushed token by token); with scraping at the default interval, decode tok/s within 1% of
without. On a loaded machine the spread is printed too, and a difference inside it is noise.
Results: docs/gateway.md and docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
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


#: Run on the guest: CPU per request of the processes serving ``url`` (``get URL KEYFILE``), or per run of a command
#: (``run ARGV...``: its own CPU as this script's children, and what it costs the units it asks), over N repeats.
PROBE = r"""
import json, os, subprocess, sys, time, urllib.request
def ticks(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
def pid_of(unit):
    out = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit + ".service"], capture_output=True,
                         text=True).stdout.strip()
    return int(out or 0)
mode, n = sys.argv[1], int(sys.argv[2])
hz = os.sysconf("SC_CLK_TCK")
watch = {u: pid_of(u) for u in ("llama-server", "prometheus-node-exporter", "prometheus", "lw-bench-node-all")}
watch = {u: p for u, p in watch.items() if p}
before, own, start = {u: ticks(p) for u, p in watch.items()}, os.times(), time.monotonic()
size = 0
if mode == "run":
    for _ in range(n):
        subprocess.run(sys.argv[3:], check=True)
else:
    url, key_file = sys.argv[3], sys.argv[4]
    headers = {"Authorization": "Bearer " + open(key_file).read().strip()} if key_file else {}
    for _ in range(n):
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            size = len(answer.read())
wall, done = time.monotonic() - start, os.times()
children = (done.children_user + done.children_system) - (own.children_user + own.children_system)
print(json.dumps({"wall_ms": wall / n * 1000, "own_ms": children / n * 1000, "bytes": size,
                  **{u: (ticks(p) - before[u]) / hz / n * 1000 for u, p in watch.items()}}))
"""
GPU_SCRIPT = ["/usr/bin/python3", "/usr/local/lib/labwright/gpu-metrics.py", "/etc/labwright/gpu-metrics.json",
              "/tmp/lw-bench.prom"]
PROMETHEUS_YML = "/etc/prometheus/prometheus.yml"
READY = ("python3 -c \"import time, urllib.request\nfor _ in range(600):\n    try:\n        urllib.request.urlopen("
         "'http://127.0.0.1:9090/-/ready', timeout=2).read(); break\n    except OSError: time.sleep(0.1)\"")


def probe(lab: Lab, name: str, *argv: str) -> dict[str, float]:
    return json.loads(sh(lab, name, "python3 -c " + shlex.quote(PROBE) + " " + " ".join(map(shlex.quote, argv))))


def collectors(lab: Lab, name: str) -> list[tuple[str, float]]:
    """node-exporter's own node_scrape_collector_duration_seconds of one scrape, slowest first (wall ms)."""
    text = sh(lab, name, "python3 -c \"import urllib.request; print(urllib.request.urlopen("
                         "'http://127.0.0.1:9100/metrics', timeout=30).read().decode())\"")
    found = re.findall(r'^node_scrape_collector_duration_seconds\{collector="([^"]+)"\} (\S+)$', text, re.M)
    return sorted(((c, float(v) * 1000) for c, v in found), key=lambda item: -item[1])


def per_scrape(lab: Lab, name: str, repeats: int) -> dict[str, float]:
    """CPU ms per scrape of each piece (the serving process's, /proc/PID/stat) and per GPU script run."""
    engine = probe(lab, name, "get", str(repeats), "http://127.0.0.1:8001/metrics", "/etc/llama-server/api-key")
    node = probe(lab, name, "get", str(repeats), "http://127.0.0.1:9100/metrics", "")
    script = probe(lab, name, "run", str(max(5, repeats // 10)), *GPU_SCRIPT)
    # The package's own collectors (Debian's defaults, what the deploy ran before monitoring_node_collectors), on a
    # second port beside the deployed one, for the comparison.
    sh(lab, name, "systemd-run --unit lw-bench-node-all /usr/bin/prometheus-node-exporter "
                  "--web.listen-address=127.0.0.1:9101 --collector.textfile.directory=/var/lib/prometheus/node-exporter"
                  " && python3 -c \"import time, urllib.request\nfor _ in range(300):\n    try:\n        "
                  "urllib.request.urlopen('http://127.0.0.1:9101/metrics', timeout=5).read(); break\n    except "
                  "OSError: time.sleep(0.1)\"")
    try:
        every = probe(lab, name, "get", str(repeats), "http://127.0.0.1:9101/metrics", "")
    finally:
        sh(lab, name, "systemctl stop lw-bench-node-all")
    print(f"  llama-server /metrics: {engine['llama-server']:.2f} ms CPU per scrape (wall {engine['wall_ms']:.1f} ms, "
          f"{engine['bytes']} bytes)", file=sys.stderr)
    print(f"  node-exporter /metrics: {node['prometheus-node-exporter']:.2f} ms CPU per scrape (wall "
          f"{node['wall_ms']:.1f} ms, {node['bytes']:,} bytes)", file=sys.stderr)
    print(f"  node-exporter with the package's own collectors (not deployed; for comparison): "
          f"{every['lw-bench-node-all']:.2f} ms CPU per scrape ({every['bytes']:,} bytes)", file=sys.stderr)
    print(f"  GPU script: {script['own_ms']:.1f} ms CPU per run (wall {script['wall_ms']:.1f} ms), its /slots "
          f"{script['llama-server']:.2f} ms of llama-server's", file=sys.stderr, flush=True)
    return {"engine": engine["llama-server"], "node": node["prometheus-node-exporter"], "script": script["own_ms"],
            "script_engine": script["llama-server"], "node_all": every["lw-bench-node-all"]}


def seconds_of(interval: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)", interval).groups()  # type: ignore[union-attr]
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def set_monitoring(lab: Lab, name: str, interval: str | None) -> None:
    """None: prometheus and the GPU script's timer stopped; else both running, Prometheus at ``interval`` (the
    deployed config with its global intervals replaced; restored at the end)."""
    if interval is None:
        sh(lab, name, "systemctl stop prometheus labwright-gpu-metrics.timer")
        return
    sh(lab, name, f"sed -i -E 's/^(  (scrape|evaluation)_interval:) .*/\\1 {interval}/' {PROMETHEUS_YML} && "
                  f"systemctl restart prometheus && systemctl start labwright-gpu-metrics.timer && {READY}")


def decode_window(url: str, key: str, seconds: float, tokens: int) -> float:
    """Back-to-back completions for ``seconds``: the engine's own decode rate over them (tokens / time generating,
    llama.cpp's ``timings``)."""
    import urllib.request

    body = json.dumps({"prompt": "Write a long story about a lighthouse keeper.", "n_predict": tokens,
                       "ignore_eos": True, "cache_prompt": True, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/completion", data=body, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    count = spent = 0.0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        with urllib.request.urlopen(request, timeout=300) as answer:
            timings = json.load(answer)["timings"]
        count, spent = count + timings["predicted_n"], spent + timings["predicted_ms"]
    return count / spent * 1000


def scrape_cost(args: argparse.Namespace, lab: Lab, name: str, address: str, engine_key: str) -> None:
    deployed = re.search(r"^  scrape_interval: (\S+)$", sh(lab, name, f"cat {PROMETHEUS_YML}"), re.M)
    default = deployed[1] if deployed else "15s"
    gpu = re.search(r"OnUnitActiveSec=(\S+)", sh(lab, name, "cat /etc/systemd/system/labwright-gpu-metrics.timer"))
    gpu_interval = gpu[1] if gpu else "15s"
    sh(lab, name, f"cp {PROMETHEUS_YML} /root/prometheus.yml.deployed")
    try:
        print(f"CPU per scrape ({args.repeats} scrapes each, on the guest):", file=sys.stderr, flush=True)
        cost = per_scrape(lab, name, args.repeats)
        slow = collectors(lab, name)
        print("  node-exporter's slowest collectors (wall ms of one scrape): " + ", ".join(
            f"{c} {ms:.1f}" for c, ms in slow[:6]) + f"; {len(slow)} collectors", file=sys.stderr, flush=True)
        configs: dict[str, str | None] = {"stopped": None, f"every {default} (default)": default}
        if args.stress and args.stress != default:
            configs[f"every {args.stress} (stress)"] = args.stress
        windows: dict[str, list[float]] = {key: [] for key in configs}
        order = list(configs)
        print(f"Decode, {args.window:g} s windows of {args.decode}-token completions, {args.rounds} rounds:",
              file=sys.stderr, flush=True)
        for number in range(args.rounds):
            for key in order[number % len(order):] + order[:number % len(order)]:
                set_monitoring(lab, name, configs[key])
                windows[key].append(decode_window(f"http://{address}:8001", engine_key, args.window, args.decode))
                print(f"  round {number + 1} {key:>24}: {windows[key][-1]:,.1f} tok/s", file=sys.stderr, flush=True)
        base = windows["stopped"]
        print("\n| monitoring | engine's decode tok/s, median | min-max | change against the same round's "
              "stopped window, median | per round |\n|---|---|---|---|---|")
        changes: dict[str, float] = {}
        for key, got in windows.items():
            spread = f"{min(got):,.1f}-{max(got):,.1f}"
            if key == "stopped":
                print(f"| {key} | {statistics.median(got):,.1f} | {spread} | | |")
                continue
            diffs = [(g / b - 1) * 100 for g, b in zip(got, base, strict=True)]
            changes[key] = statistics.median(diffs)
            print(f"| {key} | {statistics.median(got):,.1f} | {spread} | {changes[key]:+.1f}% | "
                  + ", ".join(f"{d:+.1f}%" for d in diffs) + " |")
        noise = (max(base) - min(base)) / statistics.median(base) * 100
        every, gpu_every = seconds_of(default), seconds_of(gpu_interval)
        core = ((cost["engine"] + cost["node"]) / every + (cost["script"] + cost["script_engine"]) / gpu_every) / 10
        engine_share = (cost["engine"] / every + cost["script_engine"] / gpu_every) / 10
        print(f"\nCPU per scrape: llama-server {cost['engine']:.2f} ms, node-exporter {cost['node']:.2f} ms (with the "
              f"package's own collectors {cost['node_all']:.2f} ms); "
              f"GPU script {cost['script']:.1f} ms per run (+{cost['script_engine']:.2f} ms of llama-server's"
              " for /slots).")
        print(f"At the default intervals (scrape {default}, GPU script {gpu_interval}): {core:.3f}% of one core for "
              f"the scraped pieces on the engine's guest, {engine_share:.4f}% of it inside llama-server "
              "(Prometheus itself not counted: see the idle rows).")
        units = ["llama-server", "prometheus", "prometheus-node-exporter"]
        idle = {}
        for key, interval in configs.items():
            set_monitoring(lab, name, interval)
            idle[key] = idle_cpu(lab, name, units, args.idle_seconds)
        print(f"\nCPU of an idle engine's guest over {args.idle_seconds:g} s, % of one core:\n| unit | "
              + " | ".join(idle) + " |\n|---|" + "---|" * len(idle))
        for unit in units:
            print(f"| {unit} | " + " | ".join(f"{idle[key][unit]:.2f}" for key in idle) + " |")
        key = f"every {default} (default)"
        cores = int(sh(lab, name, "nproc").strip() or 1)
        share = (core + idle[key]["prometheus"]) / cores
        if abs(changes[key]) <= noise:
            verdict = "neither shown met nor missed by the decode rate here (inside the stopped windows' spread)"
        else:
            verdict = "met" if changes[key] > -1 else "MISSED"
        print(f"\nTarget: decode within 1% of without at the default {default}: {changes[key]:+.1f}% (median of the "
              f"rounds' paired changes; the stopped windows' own spread {noise:.0f}%): {verdict}.")
        print(f"Monitoring's CPU at the default intervals (the pieces above plus Prometheus's own, idle rows): "
              f"{core + idle[key]['prometheus']:.2f}% of one core, {share:.2f}% of the guest's {cores} cores: the "
              "decode it can take where the engine's threads use every core, times how much a preempted thread "
              "stalls the others.")
    finally:
        sh(lab, name, f"cp /root/prometheus.yml.deployed {PROMETHEUS_YML} && systemctl restart prometheus && "
                      "systemctl start labwright-gpu-metrics.timer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="tls,scrape", help="tls, scrape or both (comma-separated)")
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of decoding per scrape window")
    parser.add_argument("--stress", default="1s", help="an extra scrape interval row ('' for none)")
    parser.add_argument("--repeats", type=int, default=200, help="scrapes per CPU-per-scrape figure")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    contexts = parse_contexts(args.contexts)
    lab = ensure_test_lab()
    work = Path(tempfile.mkdtemp(prefix="lw-gateway-bench-"))
    build_llama_server()
    name = lab.fresh("lwgwbench")
    try:
        sh(lab, name, "mkdir -p /srv/models")
        with write_tiny_gguf(work / "tiny.gguf").open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        data = (f"llamacpp_model={MODEL}", "llamacpp_ctx_size=8192", "llamacpp_host=0.0.0.0",
                "gateway_clients=bench", "monitoring_listen=127.0.0.1:9090")
        for deploy in ("llamacpp", "monitoring", "gateway"):
            done = run_pyinfra(f"@lxd/{name}", f"deploys/{deploy}.py", *data, cwd=REPO, timeout=900)
            if done.rc != 0:
                raise SystemExit(f"{deploy}: {done.output[-3000:]}")
            print(f"{deploy} deployed in {done.seconds:.1f}s", file=sys.stderr, flush=True)
        address = instance_address(lab.client, name) or ""
        engine_key = sh(lab, name, "cat /etc/llama-server/api-key").strip()
        load = sh(lab, name, "cat /proc/loadavg").split()[:3]
        print(f"guest {name}, load average {' '.join(load)} at the start", file=sys.stderr, flush=True)
        if "tls" in parts:
            client_key = sh(lab, name, "cat /etc/caddy/labwright/clients/bench").strip()
            root = str(stored_root(f"@lxd/{name}"))
            common = {"model": None, "contexts": contexts, "decode": args.decode, "trials": args.trials}
            direct = BenchConfig(url=f"http://{address}:8001/v1", api_key=engine_key, **common)
            entrance = BenchConfig(url=f"https://{address}:8443/v1", api_key=client_key, ca=root, **common)
            print(f"TLS entrance vs direct ({args.rounds} rounds, contexts {args.contexts}, {args.decode} decode "
                  f"tokens, {args.trials} trials):", file=sys.stderr, flush=True)
            tls = rounds(args, {"direct": direct, "TLS entrance": entrance})
            header = ("| TTFT ms | decode tok/s | engine's own decode tok/s | client decode / engine's own | TTFT "
                      "beyond the engine's prompt time, ms |\n|---|---|---|---|---|---|")
            print(f"\n| way {header}")
            print(summary(tls, "direct", "TLS entrance"))
        if "scrape" in parts:
            scrape_cost(args, lab, name, address, engine_key)
        load = sh(lab, name, "cat /proc/loadavg").split()[:3]
        print(f"load average {' '.join(load)} at the end", file=sys.stderr, flush=True)
    finally:
        lab.remove(name)
        shutil.rmtree(stored_root(f"@lxd/{name}").parent, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
