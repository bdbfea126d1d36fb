"""`labwright gpu check`: is the GPU really there for a guest, and does its engine really run on it?

Four checks, each with the cause and the fix when it fails:

1. the GPU is visible in the guest (``/dev/nvidiaN`` character nodes; ``nvidia-smi`` lists it where installed; an
   nvidia-smi without a field labwright asks for, ``compute_cap`` on the 470 branch, is asked again without it:
   labwright.gpu.nvidia.smi.query_command);
2. the guest's NVIDIA userspace (``libcuda.so.<ver>``, ``libnvidia-ml.so.<ver>``, nvidia-smi's driver version) equals
   the host kernel module's version EXACTLY (``labwright.gpu.nvidia.driver.check_driver_match``);
3. every NVIDIA node of the host exists in the guest with the host's major:minor (nvidia-uvm's major is dynamic and
   changes with driver or kernel updates; a guest config written before has the old one);
4. the engine service uses the GPU: its main process holds a ``/dev/nvidiaN`` node open, and its log since the last
   start names no CPU fallback. A CUDA process opens ``/dev/nvidiactl`` and ``/dev/nvidiaN`` when it creates a
   context, whatever the engine; a silent CPU fallback opens none. The log lines give the reason (below).

Collecting runs two shell commands in the guest through a ``labwright.hosts.Host`` (the LXD API's exec, ``pct exec``
on a Proxmox node, this machine); everything else is pure, so the rules are unit-tested on recorded outputs.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from labwright import paths
from labwright.desktop.checks import Check
from labwright.gpu.devices import DeviceNode, stat_numbers
from labwright.gpu.nvidia.driver import check_driver_match, userspace_listing, userspace_versions
from labwright.gpu.nvidia.smi import SMI_QUERY, GpuInfo, gpus_of, parse_query
from labwright.hosts import Host
from labwright.shell import quote
from labwright.textio import ascii_digits, loads_json

_MARK = "@@labwright-gpu-"
GPU_NODE = re.compile(r"(?a)^/dev/nvidia\d+$")

# --- what engines log when they do not use the GPU ----------------------------------------------------------------
#: (pattern, reason) in the order they are tried; the first match names the reason of a CPU fallback.
#: llama.cpp (ggml-org/llama.cpp, as built by labwright.llamacpp.build: 0c1e570):
#:  - common/arg.cpp, the --gpu-layers handler: "warning: no usable GPU found, --gpu-layers option will be ignored"
#:    followed by "one possible reason is that llama.cpp was compiled without GPU support" (printed to stderr at every
#:    verbosity, seen on the cached CPU build with -ngl 99);
#:  - ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_init: "ggml_cuda_init: failed to initialize CUDA: <cudaGetErrorString>";
#:  - src/llama-model.cpp llama_model::load_tensors: "load_tensors: offloaded %d/%d layers to GPU" (INFO; at -lv 4 on
#:    this build) -- 0 offloaded is a CPU run.
#: PyTorch (tabbyAPI, exllamav2/v3; torch/cuda/__init__.py _lazy_init and c10/cuda/CUDAFunctions.cpp):
#:  "Found no NVIDIA driver on your system", "CUDA driver version is insufficient for CUDA runtime version",
#:  "no kernel image is available for execution on the device" (a build without kernels for this GPU's
#:  compute capability: see labwright.gpu.arch), and NVML's "Driver/library version mismatch".
FALLBACK_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    # first, the more precise: a Vulkan build (labwright.gpu.vulkan has these lines' sources) that skipped every
    # device, or chose lavapipe, before the --gpu-layers warning that follows it
    (re.compile(r"ggml_vulkan: No devices found\."),
     "llama.cpp's Vulkan backend found no GPU device (it skips CPU-type ones such as lavapipe)"),
    (re.compile(r"ggml_vulkan: Warning: Device type is CPU"),
     "llama.cpp's Vulkan device is a CPU (llvmpipe): unset GGML_VK_VISIBLE_DEVICES"),
    (re.compile(r"no usable GPU found, --gpu-layers option will be ignored"),
     "llama.cpp found no usable GPU and ignored --gpu-layers (built without GPU support, or no CUDA device visible)"),
    (re.compile(r"ggml_cuda_init: failed to initialize CUDA: (?P<detail>.+)"),
     "llama.cpp could not initialize CUDA: {detail}"),
    (re.compile(r"Driver/library version mismatch"),
     "NVML: driver/library version mismatch (guest userspace differs from the host module)"),
    (re.compile(r"Found no NVIDIA driver on your system"), "PyTorch found no NVIDIA driver"),
    (re.compile(r"CUDA driver version is insufficient for CUDA runtime version"),
     "the host driver is too old for the engine's CUDA runtime"),
    (re.compile(r"no kernel image is available for execution on the device"),
     "the engine's build has no kernels for this GPU's compute capability (see `labwright matrix` / gpu-arch.toml)"),
    (re.compile(r"CUDA initialization: (?P<detail>.+)"), "PyTorch could not initialize CUDA: {detail}"),
)
OFFLOADED = re.compile(r"(?a)offloaded (\d{1,6})/(\d{1,6}) layers to GPU")
#: llama.cpp's per-buffer lines ("load_tensors:        CUDA0 model buffer size =  ... MiB").
GPU_BUFFER = re.compile(r"(?a)\b(CUDA\d+|ROCm\d+|Vulkan\d+)\s+model buffer size")


@dataclass
class GuestGpu:
    """What the guest shows: its NVIDIA nodes, userspace libraries, and nvidia-smi's view (None: not installed)."""

    nodes: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (major, minor)
    libraries: dict[str, str] = field(default_factory=dict)  # libcuda.so -> 550.54.14
    smi_output: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    #: fields this nvidia-smi refused and the query asked again without (``compute_cap`` on the 470 branch)
    smi_rejected: tuple[str, ...] = ()


@dataclass
class EngineState:
    service: str
    pid: int  # 0: not running
    open_nodes: list[str] = field(default_factory=list)
    log: str = ""
    cmdline: list[str] = field(default_factory=list)
    #: the process's effective uid and supplementary groups (/proc/PID/status Uid:, Groups:); None: not read
    uid: int | None = None
    groups: tuple[int, ...] = ()


def sections(lines: Iterable[str], mark: str) -> dict[str, list[str]]:
    """One command's output split at its marker lines (``<mark>NAME``): {NAME: the lines after it}."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        if line.startswith(mark):
            current = line.removeprefix(mark).strip()
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


# --- collecting (two commands in the guest) ------------------------------------------------------------------------
def guest_command() -> str:
    return (
        # Not `find -type c`: LXD bind-mounts each node over a plain file, which readdir reports as a file.
        f"echo {_MARK}nodes; for f in /dev/nvidia* /dev/nvidia-caps/*; do "
        "[ -c \"$f\" ] && stat -c '%n %t %T' \"$f\"; done; "
        f"echo {_MARK}libs; {userspace_listing()} | grep -E '^lib(cuda|nvidia-ml)[.]so[.][0-9]' | sort -u; "
        f"echo {_MARK}smi; if command -v nvidia-smi >/dev/null 2>&1; then {SMI_QUERY} 2>&1; "
        f"else echo {_MARK}no-smi; fi; true"
    )


def parse_guest(output: str) -> GuestGpu:
    parts = sections(output.splitlines(), _MARK)
    nodes = {}
    for line in parts.get("nodes", []):
        fields = line.split()
        numbers = stat_numbers(fields[1:], "xx") if len(fields) == 3 and fields[0].startswith("/dev/") else None
        if numbers is not None:
            nodes[fields[0]] = (numbers[0], numbers[1])
    smi_lines = parts.get("smi", [])
    smi = None if "no-smi" in parts else "\n".join(smi_lines)
    query = parse_query(smi or "")
    return GuestGpu(nodes, userspace_versions(parts.get("libs", [])), smi, gpus_of(query), query.rejected)


def engine_command(service: str) -> str:
    unit = quote(service if "." in service else f"{service}.service")
    return (
        f"pid=$(systemctl show -p MainPID --value {unit} 2>/dev/null); echo {_MARK}pid; echo \"${{pid:-0}}\"; "
        f"echo {_MARK}fds; if [ \"${{pid:-0}}\" != 0 ]; then "
        "for fd in /proc/$pid/fd/*; do readlink \"$fd\"; done 2>/dev/null | grep -E '^/dev/(nvidia|dri/|kfd)' "
        "| sort -u; fi; "
        f"echo {_MARK}cmdline; [ \"${{pid:-0}}\" != 0 ] && tr '\\0' '\\n' < /proc/$pid/cmdline; "
        f"echo {_MARK}ids; [ \"${{pid:-0}}\" != 0 ] && grep -E '^(Uid|Groups):' /proc/$pid/status; "
        f"echo {_MARK}log; inv=$(systemctl show -p InvocationID --value {unit} 2>/dev/null); "
        "if [ -n \"$inv\" ]; then journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=$inv 2>/dev/null | tail -n 3000; "
        f"else journalctl --no-pager -o cat -u {unit} -n 3000 2>/dev/null; fi; true"
    )


def parse_engine(service: str, output: str) -> EngineState:
    parts = sections(output.splitlines(), _MARK)
    pid_lines = [line.strip() for line in parts.get("pid", []) if line.strip()]
    pid = int(pid_lines[0]) if pid_lines and ascii_digits(pid_lines[0]) else 0
    ids = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in parts.get("ids", []) if ":" in line}
    uid = ids.get("Uid", [])
    return EngineState(service, pid, [line.strip() for line in parts.get("fds", []) if line.strip()],
                       "\n".join(parts.get("log", [])), [line for line in parts.get("cmdline", []) if line],
                       int(uid[1]) if len(uid) > 1 and ascii_digits(uid[1]) else None,
                       tuple(int(g) for g in ids.get("Groups", []) if ascii_digits(g)))


# --- the rules (pure) ---------------------------------------------------------------------------------------------
def visible_check(guest: GuestGpu) -> Check:
    gpus = sorted(p for p in guest.nodes if GPU_NODE.match(p))
    if not gpus:
        return Check("GPU visible in the guest", False, "no /dev/nvidiaN character node in the guest",
                     "the GPU nodes are not passed through (or the host lost them at a reboot)",
                     "labwright guest apply INVENTORY (re-reads the host's nodes), then restart the guest")
    if guest.smi_output is not None and not guest.gpus:
        said = parse_query(guest.smi_output).text.strip()[:200]  # nvidia-smi's own lines, not labwright's markers
        return Check("GPU visible in the guest", False, f"{', '.join(gpus)} present, but nvidia-smi lists no GPU: "
                     f"{said}", "the driver cannot be reached from the guest",
                     "see the userspace check; reinstall the userspace matching the host module")
    listed = "; ".join(f"{g.name} (compute capability {_capability(g)})" for g in guest.gpus)
    refused = (f" (this nvidia-smi has no {', '.join(guest.smi_rejected)} field: asked again without it)"
               if guest.smi_rejected and guest.gpus else "")
    return Check("GPU visible in the guest", True, f"{', '.join(gpus)}" + (f"; nvidia-smi: {listed}{refused}" if listed
                                                                          else "; nvidia-smi not installed"))


def _capability(gpu: GpuInfo) -> str:
    if gpu.compute_cap is None:
        return "?"
    return gpu.compute_cap + (" from the GPU's name" if gpu.compute_cap_from == "name" else "")


def userspace_check(host_version: str | None, guest: GuestGpu) -> Check:
    match = check_driver_match(host_version, guest.libraries, guest.smi_output or "")
    smi_versions = {g.driver_version for g in guest.gpus if g.driver_version}
    if match.ok and host_version is not None and smi_versions - {host_version}:
        return Check("userspace == host module", False, f"nvidia-smi in the guest reports driver "
                     f"{', '.join(sorted(smi_versions))}, host module {host_version}", "a mixed userspace",
                     f"install NVIDIA-Linux-x86_64-{host_version}.run --no-kernel-module in the guest")
    if match.ok:
        return Check("userspace == host module", True, match.message)
    return Check("userspace == host module", False, match.message,
                 "the guest's NVIDIA userspace is not the host module's exact version" if match.status == "mismatch"
                 else match.status, match.message.split("; ", 1)[-1])


def nodes_check(host_nodes: Iterable[DeviceNode], guest: GuestGpu) -> Check:
    wrong = []
    for node in host_nodes:
        seen = guest.nodes.get(node.path)
        if seen is None:
            wrong.append(f"{node.path} missing (host {node.major}:{node.minor})")
        elif seen != (node.major, node.minor):
            wrong.append(f"{node.path} is {seen[0]}:{seen[1]}, host {node.major}:{node.minor}")
    if wrong:
        return Check("device nodes and majors", False, "; ".join(wrong),
                     "the guest's passthrough was written with the nodes/majors of an earlier driver or boot",
                     "labwright guest apply INVENTORY (re-reads /proc/devices), then restart the guest")
    return Check("device nodes and majors", True, f"{len(guest.nodes)} nodes match the host's majors")


def requested_gpu_layers(cmdline: list[str]) -> str | None:
    """llama-server's -ngl/--gpu-layers/--n-gpu-layers value (None: not given)."""
    for i, arg in enumerate(cmdline):
        for flag in ("-ngl", "--gpu-layers", "--n-gpu-layers"):
            if arg == flag and i + 1 < len(cmdline):
                return cmdline[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def fallback_reason(log: str) -> str | None:
    """The first known CPU-fallback line in an engine's log, as a reason, or None."""
    for pattern, reason in FALLBACK_REASONS:
        match = pattern.search(log)
        if match:
            return reason.format(**{k: v.strip() for k, v in match.groupdict().items()})
    offloaded = OFFLOADED.findall(log)
    if offloaded and int(offloaded[-1][0]) == 0:
        return f"llama.cpp offloaded 0/{offloaded[-1][1]} layers to GPU"
    return None


def engine_check(engine: EngineState) -> Check:
    name = f"engine {engine.service} on the GPU"
    if engine.pid == 0:
        return Check(name, False, f"{engine.service} has no running main process", "the service is not running",
                     f"systemctl start {engine.service}; journalctl -u {engine.service} for why it stopped")
    gpu_nodes = [n for n in engine.open_nodes if GPU_NODE.match(n)]
    reason = fallback_reason(engine.log)
    ngl = requested_gpu_layers(engine.cmdline)
    asked = f" (-ngl {ngl} requested)" if ngl is not None else ""
    if ngl is not None and ngl.strip() == "0":
        return Check(name, False, f"pid {engine.pid} runs with -ngl 0: no layer on the GPU", "GPU layers set to 0",
                     "set llamacpp n_gpu_layers (e.g. 99) in the inventory and deploy again")
    if reason is not None or not gpu_nodes:
        detail = (f"pid {engine.pid} holds no /dev/nvidiaN open{asked}: it runs on the CPU"
                  if not gpu_nodes else f"pid {engine.pid} has {', '.join(gpu_nodes)} open but logged a fallback")
        offloaded = OFFLOADED.findall(engine.log)
        if offloaded:
            detail += f"; log: offloaded {offloaded[-1][0]}/{offloaded[-1][1]} layers to GPU"
        return Check(name, False, detail, reason or "no reason logged (the engine fell back silently)",
                     "use a CUDA build of the engine matching the host driver and this GPU's compute capability, "
                     "fix the checks above, then restart the service")
    offloaded = OFFLOADED.findall(engine.log)
    partial = offloaded and offloaded[-1][0] != offloaded[-1][1]
    detail = f"pid {engine.pid} has {', '.join(gpu_nodes)} open"
    if offloaded:
        detail += f"; offloaded {offloaded[-1][0]}/{offloaded[-1][1]} layers to GPU" + (" (partial)" if partial else "")
    return Check(name, True, detail)


@dataclass(frozen=True)
class DecodeRequest:
    """Ask for the timed decode: ``floor`` tokens/s (None: the data's CPU bound), ``url`` as seen in the guest
    (None: from the engine's --port), ``key_file`` a path in the guest ("" for none)."""

    floor: float | None = None
    url: str | None = None
    key_file: str = ""


def run_checks(host: Host, host_version: str | None, host_nodes: list[DeviceNode],
               service: str | None, decode: DecodeRequest | None = None) -> list[Check]:
    """Collect in the guest ``host`` and apply the rules; ``service`` None skips the engine checks."""
    guest = parse_guest(host.run(guest_command()).stdout)
    checks = [visible_check(guest), userspace_check(host_version, guest), nodes_check(host_nodes, guest)]
    if service is not None:
        engine = parse_engine(service, host.run(engine_command(service)).stdout)
        checks.append(engine_check(engine))
        if decode is not None:
            url = decode.url or engine_url(engine)
            output = host.run(decode_command(url, decode.key_file or engine_key_file(engine))).stdout
            checks.append(decode_check(output, decode.floor if decode.floor is not None else
                                       decode_settings().floor, url))
    return checks


def gpu_nodes_command() -> str:
    # `[ -c ]`, not `find -type c`: LXD bind-mounts each node over a plain file, which readdir reports as a file.
    return "for f in /dev/nvidia[0-9]*; do [ -c \"$f\" ] && echo \"$f\"; done; true"


def engine_on_gpu(host: Host, service: str) -> Check | None:
    """The engine check alone, for the verify suites: None where the host has no /dev/nvidiaN (a CPU host: nothing
    to check), else the check of ``service``'s process and log."""
    if not host.run(gpu_nodes_command()).stdout.strip():
        return None
    return engine_check(parse_engine(service, host.run(engine_command(service)).stdout))


# --- a short decode against the engine's OpenAI API, timed in the guest ----------------------------------------------
#: Runs in the guest (python3 is in every supported image; the port may be bound to loopback only). argv: URL, key
#: file ("" for none; a bare key or tabbyAPI's api_tokens.yml "api_key: ..." line; --api-key-file, else the one the
#: engine was started with: engine_key_file), max_tokens, prompt, timeout.
DECODE_SCRIPT = """\
import json, sys, time, urllib.request
url, key_file, max_tokens, prompt, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
key = ""
if key_file:
    try:
        lines = open(key_file).read().splitlines()
    except OSError as exc:
        print(json.dumps({"error": f"cannot read the API key file {key_file}: {exc.strerror}"}))
        raise SystemExit(0)
    for line in (line for line in lines if line.strip() and not line.lstrip().startswith("#")):
        name, sep, value = line.partition(":")
        key = value.strip() if sep and name.strip() == "api_key" else (key or line.strip())
body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": False}).encode()
request = urllib.request.Request(url.rstrip("/") + "/completions", data=body, headers=dict(
    [("Content-Type", "application/json")] + ([("Authorization", "Bearer " + key)] if key else [])))
started = time.monotonic()
try:
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__ + ": " + str(exc)[:300]}))
    raise SystemExit(0)
seconds = time.monotonic() - started
usage = answer.get("usage") or {}
print(json.dumps({"seconds": seconds, "tokens": usage.get("completion_tokens")}))
"""


@dataclass(frozen=True)
class DecodeSettings:
    floor: float
    max_tokens: int
    prompt: str
    timeout: float
    ports: dict[str, int]


@cache
def decode_settings() -> DecodeSettings:
    data = tomllib.loads(resources.files("labwright.data").joinpath("gpu-check.toml").read_text())
    decode = data["decode"]
    return DecodeSettings(float(decode["cpu_bound_tokens_per_second"]), int(decode["max_tokens"]), decode["prompt"],
                          float(decode["timeout_seconds"]), {k: int(v) for k, v in data["ports"].items()})


def engine_key_file(engine: EngineState) -> str:
    """The file the engine reads its API key from, as deployed: llama-server's ``--api-key-file`` on its command
    line (deploys/llamacpp.py), tabbyAPI's ``api_tokens.yml`` in its checkout (deploys/tabbyapi.py); "" for none."""
    args = engine.cmdline
    for i, arg in enumerate(args):
        if arg == "--api-key-file" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--api-key-file="):
            return arg.split("=", 1)[1]
    if engine.service.removesuffix(".service") == "tabbyapi":
        return f"{_tabbyapi_dir()}/api_tokens.yml"
    return ""


@cache
def _tabbyapi_dir() -> str:
    data = tomllib.loads((paths.templates_dir("tabbyapi") / "defaults.toml").read_text())
    return str(data["source"]["dir"])


def engine_url(engine: EngineState) -> str:
    """The engine's OpenAI base URL as seen inside the guest: its --port flag, else the engine's default port."""
    port = None
    for i, arg in enumerate(engine.cmdline):
        if arg == "--port" and i + 1 < len(engine.cmdline):
            port = engine.cmdline[i + 1]
        elif arg.startswith("--port="):
            port = arg.split("=", 1)[1]
    if port is None or not ascii_digits(port):
        port = str(decode_settings().ports.get(engine.service.removesuffix(".service"), 8001))
    return f"http://127.0.0.1:{port}/v1"


def decode_command(url: str, key_file: str = "", settings: DecodeSettings | None = None) -> str:
    s = settings or decode_settings()
    args = " ".join(quote(a) for a in (url, key_file, str(s.max_tokens), s.prompt, str(s.timeout)))
    return f"python3 -c {quote(DECODE_SCRIPT)} {args}"


def decode_check(output: str, floor: float, url: str) -> Check:
    """The timed completion's result (DECODE_SCRIPT's JSON line) against the CPU bound in tokens/s."""
    name = "decode faster than a CPU"
    try:
        result = loads_json(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Check(name, False, f"no result from the timed request to {url}: {output.strip()[-200:]}",
                     "python3 missing in the guest, or the request could not run", "check `python3 -V` in the guest")
    if not isinstance(result, dict):
        return Check(name, False, f"the timed request to {url} printed {output.strip()[-200:]!r}, not its result",
                     "the guest's python3 printed something else", "run the check again with LABWRIGHT_DEBUG=1")
    if "error" in result:
        return Check(name, False, f"POST {url}/completions failed: {result['error']}", "the engine did not answer",
                     "check the engine's port (--decode-url) and API key (--api-key-file)")
    tokens, seconds = result.get("tokens"), result.get("seconds")
    # the server's usage.completion_tokens and the guest's clock: a whole count above 0 and finite seconds above 0
    if (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0 or isinstance(seconds, bool)
            or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0):
        return Check(name, False, f"{url} answered without usage.completion_tokens", "not an OpenAI completion",
                     "give the engine's OpenAI base URL with --decode-url")
    rate = tokens / seconds
    detail = f"{tokens} tokens in {seconds:.2f} s = {rate:.1f} tok/s (CPU bound {floor:g} tok/s)"
    if rate <= floor:
        return Check(name, False, detail, "decoding no faster than a CPU: the engine runs on the CPU",
                     "see the engine check; or give --decode-floor for this model's size")
    return Check(name, True, detail)
