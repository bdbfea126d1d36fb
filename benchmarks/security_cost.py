"""What an engine's key and its unit's hardening cost (issue 31): decode tok/s and TTFT of the REAL llama-server
with and without each, side by side in one run.

Key mode (default): two llama-server processes on this machine with the same binary, model and flags, one of them
behind a key file (0600, as deploys/llamacpp.py writes it), on two loopback ports. The key check is llama.cpp's
middleware (tools/server/server-http.cpp: one string comparison per request, before the handler), so it can only
show in TTFT, never in the decode rate.

Units mode (``--units``): a fresh container of the test lab (labwright.testing.lab_fixture) with llama-server
deployed by deploys/llamacpp.py (tests/support/probe_box.py: the cached CPU build, a tiny GGUF, the key made on the
guest 0640 root:llama), so ``llama-server.service`` is the real rendered unit with all its hardening
(ProtectSystem=strict, SystemCallFilter=, CapabilityBoundingSet=, ...). Beside it, ``llama-plain.service``: the
same unit with every other directive of [Service] dropped (only Type=, User=, Group=, ExecStart=, Environment*= and
Restart*= kept; the list is derived from the deployed text and printed), on the next port. Same binary, model,
flags and key file: only the hardening differs. Both are benched from this machine over the lab bridge.

In both modes ``labwright bench`` (the library, in this process) runs against each server in turn, ``--rounds``
times, alternating which goes first, so drift of the machine's load lands on both.

    .venv/bin/python benchmarks/security_cost.py [--contexts 512,2048] [--decode 128] [--trials 4] [--rounds 3]
    .venv/bin/python benchmarks/security_cost.py --units [--contexts 512,2048] [--decode 128] [--trials 4] [--rounds 3]
    # on a GPU machine, with a CUDA build (scripts/gpu-check/llamacpp-cuda.sh leaves its path in /tmp), key mode:
    python3 benchmarks/security_cost.py --binary "$(cat /tmp/lw-llama-cuda-bin)" --gpu-layers 99

Target: with the key, and with the hardening, decode tok/s and TTFT within 2% of without (medians over rounds and
warm trials); on a loaded machine the round-to-round spread of the server without is printed too, and a difference
inside it is noise. Results: docs/security.md, "Every engine behind a key" and "Hardened units".
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.bench.runner import BenchConfig, parse_contexts, run
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
from labwright.testing.waiting import wait_for

PORTS = {"open": 18331, "key": 18332}
TARGET = 0.02
#: Units mode: the plain copy's port and the deployed unit's (deploys/llamacpp.py's default); the first is the
#: baseline the cost is measured against.
UNIT_PORTS = {"plain": 8002, "hardened": 8001}
#: What the plain unit keeps of [Service]: who runs what, with which environment, restarted how. Everything else
#: there is hardening (or its comments) and is dropped.
PLAIN_KEEPS = ("Type=", "User=", "Group=", "ExecStart=", "Environment", "Restart")
Rows = dict[str, list[tuple[float, float]]]


def start(binary: Path, model: Path, port: int, ctx: int, gpu_layers: int, threads: int, key_file: Path | None,
          log: Path) -> subprocess.Popen[bytes]:
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx), "-np", "1",
           "--alias", "tiny", "-ngl", str(gpu_layers)]
    if threads:
        cmd += ["--threads", str(threads)]
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


def refused_without_key(base: str) -> int:
    """A keyed server's answer to a request without the key: the benchmark measures a server that checks it."""
    try:
        with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def medians(bench_run) -> tuple[float, float]:
    ttft, decode = [], []
    for context in bench_run.results:
        for trial in context.trials[1:] or context.trials:
            ttft.append(trial.ttft_s * 1000)
            decode.append(trial.decode_tps or 0.0)
    return statistics.median(ttft), statistics.median(decode)


def bench_rounds(args: argparse.Namespace, contexts: tuple[int, ...], urls: dict[str, str],
                 keys: dict[str, str | None], model: str | None) -> Rows:
    """``--rounds`` rounds of ``labwright bench`` against each server, the order alternating per round."""
    names = list(urls)
    rows: Rows = {name: [] for name in names}
    for round_no in range(args.rounds):
        for name in names if round_no % 2 == 0 else names[::-1]:
            config = BenchConfig(url=urls[name], model=model, contexts=contexts, decode=args.decode,
                                 trials=args.trials, api_key=keys[name])
            rows[name].append(medians(run(config)))
            print(f"  round {round_no + 1} {name:>8}: TTFT {rows[name][-1][0]:.1f} ms, decode "
                  f"{rows[name][-1][1]:,.1f} tok/s", file=sys.stderr, flush=True)
    return rows


def key_mode(args: argparse.Namespace, contexts: tuple[int, ...]) -> tuple[Rows, str]:
    binary = args.binary or build_llama_server()
    key = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="security-cost-") as tmp:
        root = Path(tmp)
        model = write_tiny_gguf(root / "tiny.gguf", TinyModel(context_length=max(contexts) * 2))
        key_file = root / "api-key"
        key_file.write_text(key + "\n")
        os.chmod(key_file, 0o600)
        ctx = max(contexts) + args.decode + 64
        servers = {name: start(binary, model, port, ctx, args.gpu_layers, args.threads,
                               key_file if name == "key" else None, root / f"{name}.log")
                   for name, port in PORTS.items()}
        try:
            status = refused_without_key(f"http://127.0.0.1:{PORTS['key']}")
            if status != 401:
                raise SystemExit(f"the keyed server answered {status} without the key, not 401: nothing to measure")
            rows = bench_rounds(args, contexts, {n: f"http://127.0.0.1:{p}/v1" for n, p in PORTS.items()},
                                {"open": None, "key": key}, "tiny")
        finally:
            for proc in servers.values():
                proc.terminate()
                proc.wait(10)
    return rows, (f"llama-server {binary} on loopback, -ngl {args.gpu_layers}, threads {args.threads or 'default'}; "
                  "without the key the keyed server answers 401")


def plain_unit(hardened: str, port: int, new_port: int) -> tuple[str, list[str]]:
    """The unit with every [Service] directive but PLAIN_KEEPS dropped (and its ExecStart on ``new_port``); the
    dropped directives' names, in order."""
    kept, dropped, section = [], [], ""
    for line in hardened.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped
        elif section == "[Service]" and stripped and not stripped.startswith(PLAIN_KEEPS):
            if not stripped.startswith("#"):
                dropped.append(stripped.split("=", 1)[0])
            continue
        if stripped.startswith("ExecStart="):
            line, count = re.subn(rf"(--port[ =]){port}(?!\d)", rf"\g<1>{new_port}", line)
            if count != 1:
                raise SystemExit(f"the deployed ExecStart has no single --port {port}: {line}")
        kept.append(line)
    needed = {"ProtectSystem", "SystemCallFilter", "CapabilityBoundingSet", "NoNewPrivileges"}
    if not needed <= set(dropped):
        raise SystemExit(f"the deployed unit lacks {sorted(needed - set(dropped))}: it is not the hardened one")
    return "\n".join(kept) + "\n", list(dict.fromkeys(dropped))


@contextmanager
def lab_guest() -> Iterator[tuple[Callable[[str], str], str]]:
    """A fresh test-lab container with llama-server deployed (support.probe_box): (shell in it, its address);
    removed afterwards. The lab's modules are imported here: the key mode runs where no LXD is (a lent GPU
    machine, with labwright's sources and the standard library only)."""
    from labwright.lab.lab import instance_address
    from labwright.testing.lab_fixture import ensure_test_lab
    from support.probe_box import llama_box, sh

    lab = ensure_test_lab()
    with tempfile.TemporaryDirectory(prefix="security-cost-units-") as tmp:
        started = time.monotonic()
        name, _ = llama_box(lab, Path(tmp), prefix="lwsec", memory="1GiB")
        try:
            address = instance_address(lab.client, name)
            if not address:
                raise SystemExit(f"{name} has no address on the lab bridge")
            print(f"  {name} ({address}): llama-server deployed in {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)
            yield (lambda script: sh(lab, name, script)), address
        finally:
            lab.remove(name)


def confinement(shell: Callable[[str], str], unit: str) -> str:
    """NoNewPrivs, Seccomp and CapBnd of the unit's main process, as /proc/PID/status shows them."""
    pid = shell(f"systemctl show -p MainPID --value {unit}").strip()
    status = dict(line.split(":", 1) for line in shell(f"cat /proc/{pid}/status").splitlines() if ":" in line)
    return ", ".join(f"{key} {status[key].strip()}" for key in ("NoNewPrivs", "Seccomp", "CapBnd"))


def units_mode(args: argparse.Namespace, contexts: tuple[int, ...]) -> tuple[Rows, str]:
    ctx = 8192  # support.probe_box deploys llamacpp_ctx_size=8192
    if max(contexts) + args.decode + 64 > ctx:
        raise SystemExit(f"--contexts up to {ctx - args.decode - 64} with --decode {args.decode}: the lab's "
                         f"llama-server has a {ctx}-token context")
    with lab_guest() as (shell, address):
        from support.probe_box import UNIT_PATH

        hardened = shell(f"cat {UNIT_PATH}")
        plain, dropped = plain_unit(hardened, UNIT_PORTS["hardened"], UNIT_PORTS["plain"])
        shell(f"cat > /etc/systemd/system/llama-plain.service <<'EOF'\n{plain}EOF\n"
              "systemctl daemon-reload && systemctl start llama-plain.service")
        bases = {name: f"http://{address}:{port}" for name, port in UNIT_PORTS.items()}
        for name, base in bases.items():
            wait_for(f"{name} llama-server's /health at {base}", partial(healthy, base), timeout=180,
                     every=0.5)
        key_file = re.search(r"--api-key-file[ =](\S+)", hardened)
        if key_file is None:
            raise SystemExit("the deployed unit has no --api-key-file")
        mode = shell(f"stat -c '%a %U:%G' {key_file[1]}").strip()
        key = shell(f"cat {key_file[1]}").strip()
        for name, base in bases.items():
            status = refused_without_key(base)
            if status != 401:
                raise SystemExit(f"the {name} unit answered {status} without the key, not 401")
        seen = {name: confinement(shell, unit) for name, unit in
                (("hardened", "llama-server.service"), ("plain", "llama-plain.service"))}
        for name, line in seen.items():
            print(f"  {name}: {line}", file=sys.stderr)
        if seen["hardened"] == seen["plain"]:
            raise SystemExit(f"both units run confined alike ({seen['plain']}): nothing to compare")
        rows = bench_rounds(args, contexts, {n: f"{b}/v1" for n, b in bases.items()},
                            {name: key for name in bases}, None)
        uptime = shell("cat /proc/loadavg").split()[:3]
    return rows, (f"llama-server (CPU build) in a lab container, benched over the lab bridge from this machine; both "
                  f"behind the deployed key file ({key_file[1]}, {mode}); dropped for the plain unit: "
                  f"{', '.join(dropped)}; main process hardened: {seen['hardened']}; plain: {seen['plain']}; "
                  f"load average at the end {' '.join(uptime)}")


def report(rows: Rows, labels: dict[str, str], what: str, about: str, args: argparse.Namespace,
           contexts: tuple[int, ...]) -> bool:
    """The table, the cost of the second of ``rows`` against the first, and whether the target is met."""
    base, other = list(rows)
    base_ttft = statistics.median(r[0] for r in rows[base])
    base_decode = statistics.median(r[1] for r in rows[base])
    other_ttft = statistics.median(r[0] for r in rows[other])
    other_decode = statistics.median(r[1] for r in rows[other])
    # How much the same server without it moves from round to round, TTFT and decode alike: the noise floor.
    pairs = zip(rows[base], rows[base][1:], strict=False)
    spread = max((abs(a[i] - b[i]) / max(a[i], b[i]) for a, b in pairs for i in (0, 1)), default=0.0)
    print(f"{about}; contexts {','.join(map(str, contexts))}, {args.decode} decode tokens, {args.rounds} rounds x "
          f"{args.trials - 1} warm trials (medians)")
    print(f"{'':>14} {'TTFT ms':>9} {'decode tok/s':>13}")
    print(f"{labels[base]:>14} {base_ttft:>9.1f} {base_decode:>13,.1f}")
    print(f"{labels[other]:>14} {other_ttft:>9.1f} {other_decode:>13,.1f}")
    ttft_cost = other_ttft / base_ttft - 1
    decode_cost = 1 - other_decode / base_decode
    print(f"cost of {what}: TTFT {ttft_cost:+.1%}, decode {decode_cost:+.1%} (round-to-round spread of the same "
          f"server {labels[base]}: {spread:.1%})")
    # Each round's two benches ran back to back: their ratio cancels the load's slower drift (another test run).
    paired_ttft = statistics.median(o[0] / b[0] - 1 for b, o in zip(rows[base], rows[other], strict=True))
    paired_decode = statistics.median(1 - o[1] / b[1] for b, o in zip(rows[base], rows[other], strict=True))
    print(f"paired, round by round (median): TTFT {paired_ttft:+.1%}, decode {paired_decode:+.1%}")
    met = max(ttft_cost, decode_cost) <= max(TARGET, spread)
    print(f"target: within {TARGET:.0%} (or inside the measured spread): {'met' if met else 'MISSED'}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", action="store_true",
                        help="measure the unit hardening in a lab container instead of the key on loopback")
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", type=Path, help="key mode: llama-server to run (default: labwright's cached "
                        "CPU build)")
    parser.add_argument("--gpu-layers", type=int, default=0, help="key mode: -ngl")
    parser.add_argument("--threads", type=int, default=0,
                        help="key mode: --threads per server (default: llama-server's own; on a many-core machine a "
                             "few threads each keep the two servers from contending)")
    args = parser.parse_args()
    contexts = parse_contexts(args.contexts)
    if args.units:
        rows, about = units_mode(args, contexts)
        report(rows, {"plain": "plain unit", "hardened": "hardened unit"}, "the hardening", about, args, contexts)
    else:
        rows, about = key_mode(args, contexts)
        report(rows, {"open": "no key", "key": "--api-key"}, "the key", about, args, contexts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
