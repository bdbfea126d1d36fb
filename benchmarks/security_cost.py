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

Confine mode (``--confine``, for a machine without LXD or systemd, such as a lent GPU machine): what of the unit's
hardening acts per system call, applied by hand to the second of two llama-server processes (both behind the key):
``PR_SET_NO_NEW_PRIVS``, the capability bounding set emptied (``CapabilityBoundingSet=``), and the three seccomp
filters systemd loads for the unit (systemd src/core/exec-invoke.c: ``SystemCallArchitectures=native``,
``RestrictAddressFamilies=`` on socket(2), ``SystemCallFilter=@system-service`` with ``SystemCallErrorNumber=EPERM``).
The allow list is systemd's own: ``--write-syscalls FILE`` expands ``systemd-analyze syscall-filter @system-service``
(run where systemd 252+ is installed) into x86_64 numbers (asm/unistd_64.h), and ``--syscalls FILE`` loads it; the
filter is linear, two BPF instructions per allowed call in ascending order (libseccomp's output without its
binary-tree optimisation, which systemd does not ask for), so a hot call like futex(202) runs ~200 comparisons.
The mount namespace and read-only tree (ProtectSystem=strict & co.) act when the unit starts, not per call, and are
not applied.

In all modes ``labwright bench`` (the library, in this process) runs against each server in turn, ``--rounds``
times, alternating which goes first, so drift of the machine's load lands on both.

    .venv/bin/python benchmarks/security_cost.py [--contexts 512,2048] [--decode 128] [--trials 4] [--rounds 3]
    .venv/bin/python benchmarks/security_cost.py --units [--contexts 512,2048] [--decode 128] [--trials 4] [--rounds 3]
    # on a GPU machine, with a CUDA build (scripts/gpu-check/llamacpp-cuda.sh leaves its path in /tmp), key mode:
    python3 benchmarks/security_cost.py --binary "$(cat /tmp/lw-llama-cuda-bin)" --gpu-layers 99
    # the hardening's per-call part without systemd (the allow list written here first, where systemd is installed):
    .venv/bin/python benchmarks/security_cost.py --write-syscalls .gpucarry/system-service.json
    python3 benchmarks/security_cost.py --confine --syscalls .gpucarry/system-service.json --threads 4

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


SYSTEM_SERVICE = "@system-service"
UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
AUDIT_ARCH_X86_64 = 0xC000003E
#: RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK (templates/llamacpp/llama-server.service.j2)
FAMILIES = (1, 2, 10, 16)
NR_SOCKET = 41


def system_service_numbers() -> list[int]:
    """systemd's @system-service, groups expanded, as x86_64 syscall numbers (names this kernel lacks dropped)."""
    listing = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True).stdout
    groups: dict[str, list[str]] = {}
    current = ""
    for line in listing.splitlines():
        word = line.strip()
        if line.startswith("@"):
            current = word
            groups[current] = []
        elif current and word and not word.startswith("#"):
            groups[current].append(word)
    names: set[str] = set()

    def expand(group: str) -> None:
        for item in groups.get(group, []):
            expand(item) if item.startswith("@") else names.add(item)

    expand(SYSTEM_SERVICE)
    numbers = dict(re.findall(r"#define __NR_(\w+) (\d+)", UNISTD.read_text()))
    return sorted(int(numbers[name]) for name in names if name in numbers)


def _bpf(*instructions: tuple[int, int, int, int]) -> bytes:
    import struct
    return b"".join(struct.pack("HBBI", *ins) for ins in instructions)


def seccomp_programs(allowed: list[int]) -> list[bytes]:
    """The three filters, as classic BPF: architecture, socket(2) families, the syscall allow list."""
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, eperm, eafnosupport = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 97
    arch = _bpf((ld, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH_X86_64), (ret, 0, 0, eperm), (ret, 0, 0, allow))
    families = [(ld, 0, 0, 0), (jeq, 1, 0, NR_SOCKET), (ret, 0, 0, allow), (ld, 0, 0, 16)]
    for family in FAMILIES:
        families += [(jeq, 0, 1, family), (ret, 0, 0, allow)]
    calls = [(ld, 0, 0, 0)]
    for number in allowed:
        calls += [(jeq, 0, 1, number), (ret, 0, 0, allow)]
    return [arch, _bpf(*families, (ret, 0, 0, eafnosupport)), _bpf(*calls, (ret, 0, 0, eperm))]


def confine(programs: list[bytes]) -> Callable[[], None]:
    """A preexec function: no new privileges, an empty capability bounding set, then the filters (in the child,
    before exec; seccomp filters and the bounding set survive execve)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    def apply() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last cap; EPERM without CAP_SETPCAP)
        for program in programs:
            buffer = ctypes.create_string_buffer(program)
            fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
            if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
                raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    return apply


def status_of(pid: int) -> str:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return ", ".join(f"{key} {status[key].strip()}" for key in ("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapBnd",
                                                               "Speculation_Store_Bypass")
                     if key in status)


def start(binary: Path, model: Path, port: int, ctx: int, gpu_layers: int, threads: int, key_file: Path | None,
          log: Path, preexec: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx), "-np", "1",
           "--alias", "tiny", "-ngl", str(gpu_layers)]
    if threads:
        cmd += ["--threads", str(threads)]
    if key_file:
        cmd += ["--api-key-file", str(key_file)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
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


def model_and_key(root: Path, key: str, contexts: tuple[int, ...], decode: int) -> tuple[Path, Path, int]:
    """The tiny GGUF, the key file (0600, as deploys/llamacpp.py writes it) and the context both servers get."""
    model = write_tiny_gguf(root / "tiny.gguf", TinyModel(context_length=max(contexts) * 2))
    key_file = root / "api-key"
    key_file.write_text(key + "\n")
    os.chmod(key_file, 0o600)
    return model, key_file, max(contexts) + decode + 64


def key_mode(args: argparse.Namespace, contexts: tuple[int, ...]) -> tuple[Rows, str]:
    binary = args.binary or build_llama_server()
    key = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="security-cost-") as tmp:
        root = Path(tmp)
        model, key_file, ctx = model_and_key(root, key, contexts, args.decode)
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


def confine_mode(args: argparse.Namespace, contexts: tuple[int, ...]) -> tuple[Rows, str]:
    if not args.syscalls:
        raise SystemExit("--confine needs --syscalls FILE (write it with --write-syscalls FILE where systemd is)")
    import json
    allowed = json.loads(args.syscalls.read_text())
    programs = seccomp_programs(allowed)
    binary = args.binary or build_llama_server()
    key = secrets.token_urlsafe(32)
    ports = {"plain": PORTS["open"], "confined": PORTS["key"]}
    with tempfile.TemporaryDirectory(prefix="security-cost-") as tmp:
        root = Path(tmp)
        model, key_file, ctx = model_and_key(root, key, contexts, args.decode)
        servers = {name: start(binary, model, port, ctx, args.gpu_layers, args.threads, key_file,
                               root / f"{name}.log", confine(programs) if name == "confined" else None)
                   for name, port in ports.items()}
        try:
            seen = {name: status_of(proc.pid) for name, proc in servers.items()}
            for name, line in seen.items():
                print(f"  {name}: {line}", file=sys.stderr)
            if seen["plain"] == seen["confined"]:
                raise SystemExit(f"both servers run confined alike ({seen['plain']}): nothing to compare")
            rows = bench_rounds(args, contexts, {n: f"http://127.0.0.1:{p}/v1" for n, p in ports.items()},
                                {name: key for name in ports}, "tiny")
        finally:
            for proc in servers.values():
                proc.terminate()
                proc.wait(10)
    return rows, (f"llama-server {binary} on loopback, -ngl {args.gpu_layers}, threads {args.threads or 'default'}, "
                  f"kernel {os.uname().release}, both behind the key; confined: {seen['confined']} "
                  f"(allow list of {len(allowed)} calls, "
                  f"{sum(len(p) // 8 for p in programs)} BPF instructions in 3 filters); plain: {seen['plain']}")


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
    parser.add_argument("--confine", action="store_true",
                        help="measure the hardening's per-call part (no_new_privs, no capabilities, systemd's three "
                             "seccomp filters) on loopback, without LXD or systemd")
    parser.add_argument("--syscalls", type=Path, help="confine mode: the allow list (--write-syscalls wrote it)")
    parser.add_argument("--write-syscalls", type=Path, metavar="FILE",
                        help="write systemd's @system-service as x86_64 numbers to FILE (JSON) and exit")
    args = parser.parse_args()
    if args.write_syscalls:
        import json
        numbers = system_service_numbers()
        args.write_syscalls.parent.mkdir(parents=True, exist_ok=True)
        args.write_syscalls.write_text(json.dumps(numbers) + "\n")
        print(f"{len(numbers)} calls of {SYSTEM_SERVICE} written to {args.write_syscalls}")
        return 0
    contexts = parse_contexts(args.contexts)
    if args.confine:
        rows, about = confine_mode(args, contexts)
        report(rows, {"plain": "plain", "confined": "confined"}, "the hardening (per call)", about, args, contexts)
    elif args.units:
        rows, about = units_mode(args, contexts)
        report(rows, {"plain": "plain unit", "hardened": "hardened unit"}, "the hardening", about, args, contexts)
    else:
        rows, about = key_mode(args, contexts)
        report(rows, {"open": "no key", "key": "--api-key"}, "the key", about, args, contexts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
