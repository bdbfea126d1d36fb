"""What an engine's key costs (issue 31): decode tok/s and TTFT of the REAL llama-server with ``--api-key-file`` and
without it, side by side in one run.

Two llama-server processes with the same binary, model and flags, one of them behind a key file (0600, as
deploys/llamacpp.py writes it), on two loopback ports; ``labwright bench`` (the library, in this process) runs
against each in turn, ``--rounds`` times, alternating which goes first, so drift of the machine's load lands on both.
The key check is llama.cpp's middleware (tools/server/server-http.cpp: one string comparison per request, before the
handler), so it can only show in TTFT, never in the decode rate.

    .venv/bin/python benchmarks/security_cost.py [--contexts 512,2048] [--decode 128] [--trials 4] [--rounds 3]
    # on a GPU machine, with a CUDA build (scripts/gpu-check/llamacpp-cuda.sh leaves its path in /tmp):
    python3 benchmarks/security_cost.py --binary "$(cat /tmp/lw-llama-cuda-bin)" --gpu-layers 99

Target: with the key, decode tok/s and TTFT within 2% of without (medians over rounds and warm trials); on a
loaded machine the spread between two identical servers is printed too, and a difference inside it is noise.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from labwright.bench.runner import BenchConfig, parse_contexts, run
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf

PORTS = {"open": 18331, "key": 18332}
TARGET = 0.02


def start(binary: Path, model: Path, port: int, ctx: int, gpu_layers: int, key_file: Path | None,
          log: Path) -> subprocess.Popen[bytes]:
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx), "-np", "1",
           "--alias", "tiny", "-ngl", str(gpu_layers)]
    if key_file:
        cmd += ["--api-key-file", str(key_file)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:  # /health answers without the key (server-http.cpp's public endpoints)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)  # a poll interval while the server loads
    proc.kill()
    raise SystemExit(f"llama-server did not start:\n{log.read_text()[-2000:]}")


def refused_without_key(port: int) -> int:
    """The keyed server's answer to a request without the key: the benchmark measures a server that checks it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def medians(bench_run) -> tuple[float, float]:
    ttft, decode = [], []
    for context in bench_run.results:
        for trial in context.trials[1:] or context.trials:
            ttft.append(trial.ttft_s * 1000)
            decode.append(trial.decode_tps or 0.0)
    return statistics.median(ttft), statistics.median(decode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", type=Path, help="llama-server to run (default: labwright's cached CPU build)")
    parser.add_argument("--gpu-layers", type=int, default=0)
    args = parser.parse_args()
    contexts = parse_contexts(args.contexts)
    binary = args.binary or build_llama_server()
    key = secrets.token_urlsafe(32)
    rows: dict[str, list[tuple[float, float]]] = {"open": [], "key": []}
    with tempfile.TemporaryDirectory(prefix="security-cost-") as tmp:
        root = Path(tmp)
        model = write_tiny_gguf(root / "tiny.gguf", TinyModel(context_length=max(contexts) * 2))
        key_file = root / "api-key"
        key_file.write_text(key + "\n")
        os.chmod(key_file, 0o600)
        ctx = max(contexts) + args.decode + 64
        servers = {name: start(binary, model, port, ctx, args.gpu_layers, key_file if name == "key" else None,
                               root / f"{name}.log") for name, port in PORTS.items()}
        try:
            status = refused_without_key(PORTS["key"])
            if status != 401:
                raise SystemExit(f"the keyed server answered {status} without the key, not 401: nothing to measure")
            for round_no in range(args.rounds):
                order = ["open", "key"] if round_no % 2 == 0 else ["key", "open"]
                for name in order:
                    config = BenchConfig(url=f"http://127.0.0.1:{PORTS[name]}/v1", model="tiny", contexts=contexts,
                                         decode=args.decode, trials=args.trials,
                                         api_key=key if name == "key" else None)
                    rows[name].append(medians(run(config)))
                    print(f"  round {round_no + 1} {name:>4}: TTFT {rows[name][-1][0]:.1f} ms, decode "
                          f"{rows[name][-1][1]:,.1f} tok/s", file=sys.stderr)
        finally:
            for proc in servers.values():
                proc.terminate()
                proc.wait(10)

    open_ttft = statistics.median(r[0] for r in rows["open"])
    open_decode = statistics.median(r[1] for r in rows["open"])
    key_ttft = statistics.median(r[0] for r in rows["key"])
    key_decode = statistics.median(r[1] for r in rows["key"])
    # How much the same keyless server moves from round to round, TTFT and decode alike: the noise floor.
    pairs = zip(rows["open"], rows["open"][1:], strict=False)
    spread = max((abs(a[i] - b[i]) / max(a[i], b[i]) for a, b in pairs for i in (0, 1)), default=0.0)
    print(f"llama-server {binary}, -ngl {args.gpu_layers}, contexts {','.join(map(str, contexts))}, "
          f"{args.decode} decode tokens, {args.rounds} rounds x {args.trials - 1} warm trials (medians); "
          "without the key the server answers 401")
    print(f"{'':>12} {'TTFT ms':>9} {'decode tok/s':>13}")
    print(f"{'no key':>12} {open_ttft:>9.1f} {open_decode:>13,.1f}")
    print(f"{'--api-key':>12} {key_ttft:>9.1f} {key_decode:>13,.1f}")
    ttft_cost = key_ttft / open_ttft - 1
    decode_cost = 1 - key_decode / open_decode
    print(f"cost of the key: TTFT {ttft_cost:+.1%}, decode {decode_cost:+.1%} (round-to-round spread of the same "
          f"server without a key: {spread:.1%})")
    met = max(ttft_cost, decode_cost) <= max(TARGET, spread)
    print(f"target: within {TARGET:.0%} (or inside the measured spread): {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
