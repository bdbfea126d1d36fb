#!/usr/bin/python3
"""GPU and engine metrics for node-exporter's textfile collector, written by deploys/monitoring.py (labwright).

Run by labwright-gpu-metrics.timer as root; standard library only; no vendor daemon. Reads its engines from the
JSON file named by argv[1] and writes argv[2] (a .prom file) whole, through a temporary file and a rename, so
node-exporter never reads half of it.

    NVIDIA: nvidia-smi --query-gpu (memory, utilisation, temperature, power), nothing when it is absent.
    AMD / Intel: /sys/class/drm/card*/device (mem_info_vram_used/total, gpu_busy_percent, hwmon).
    Engines: up, GPU device nodes open (/proc/PID/fd: /dev/nvidiaN or /dev/dri/renderD*), llama.cpp's
    "offloaded N/M layers to GPU" journal line of the current start, llama.cpp's /slots context length; a llama.cpp
    router ("models" in the config): each model loaded or not (its /models), /slots?model=NAME of the loaded ones.

It runs every monitoring_gpu_interval beside the engine, so it is kept cheap: a unit's processes and invocation read
from the files systemd keeps (systemctl only where they are not), the journal read from where the last run stopped
(a cursor per unit start under /run/labwright-gpu-metrics) and not at all once one model's offload line is found,
the engine asked over a plain socket.
"""

import glob
import json
import os
import re
import sys

STATE = "/run/labwright-gpu-metrics"
#: Where systemd keeps a unit's invocation ID (a symlink) and its processes (cgroup v2, or v1's hybrid / named trees)
UNITS = "/run/systemd/units"
CGROUPS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")
NVIDIA_FIELDS = "index,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"
MIB = 1024 * 1024


def label(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def number(text):
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def shown(value):
    """A sample value as Prometheus's text format takes it, whole numbers without a fraction or an exponent."""
    return str(int(value)) if value == int(value) else repr(round(value, 6))


def run(argv, timeout=10):
    import subprocess  # only when something is run: a CPU host with one model runs nothing most of the time

    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia(lines, errors):
    if not any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in os.environ.get("PATH", "").split(":")):
        return 0
    out = run(["nvidia-smi", f"--query-gpu={NVIDIA_FIELDS}", "--format=csv,noheader,nounits"])
    if out is None:
        errors.append("nvidia-smi")
        return 0
    count = 0
    for row in out.strip().splitlines():
        cells = [cell.strip() for cell in row.split(",")]
        if len(cells) != 7:
            continue
        index, name, used, total, util, temp, power = cells
        base = f'gpu="{label(index)}",vendor="nvidia",name="{label(name)}"'
        count += 1
        for metric, value, scale in (("memory_used_bytes", used, MIB), ("memory_total_bytes", total, MIB),
                                     ("utilization_ratio", util, 0.01), ("temperature_celsius", temp, 1),
                                     ("power_watts", power, 1)):
            got = number(value)
            if got is not None:
                lines.append(f"labwright_gpu_{metric}{{{base}}} {shown(got * scale)}")
    return count


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def sysfs(lines):
    count = {"amd": 0, "intel": 0}
    for device in sorted(glob.glob("/sys/class/drm/card[0-9]*/device")):
        if re.search(r"card\d+-", device):
            continue
        vendor = {"0x1002": "amd", "0x8086": "intel"}.get(read(os.path.join(device, "vendor")) or "")
        if vendor is None:
            continue
        card = device.split("/")[-2]
        base = f'gpu="{card}",vendor="{vendor}",name="{label(read(os.path.join(device, "product_name")) or card)}"'
        count[vendor] += 1
        for metric, name, scale in (("memory_used_bytes", "mem_info_vram_used", 1),
                                    ("memory_total_bytes", "mem_info_vram_total", 1),
                                    ("utilization_ratio", "gpu_busy_percent", 0.01)):
            got = number(read(os.path.join(device, name)) or "")
            if got is not None:
                lines.append(f"labwright_gpu_{metric}{{{base}}} {shown(got * scale)}")
        for hwmon in glob.glob(os.path.join(device, "hwmon", "hwmon*")):
            temp = number(read(os.path.join(hwmon, "temp1_input")) or "")
            power = number(read(os.path.join(hwmon, "power1_average")) or "")
            if temp is not None:
                lines.append(f"labwright_gpu_temperature_celsius{{{base}}} {shown(temp / 1000)}")
            if power is not None:
                lines.append(f"labwright_gpu_power_watts{{{base}}} {shown(power / 1e6)}")
    return count


def unit_properties(service, *names):
    """The unit's properties in one systemctl call (NAME=VALUE lines; --value would print them in systemd's order)."""
    argv = ["systemctl", "show", f"{service}.service"]
    for name in names:
        argv += ["-p", name]
    found = {}
    for line in (run(argv) or "").splitlines():
        key, _, value = line.partition("=")
        found[key] = value.strip()
    return found


def unit_state(service):
    """The unit's processes (its cgroup's, a router's model instances included) and its invocation ID, read from
    what systemd keeps under CGROUPS and UNITS, without starting anything; systemctl where they are not there (a
    unit outside system.slice, another layout: its MainPID alone)."""
    unit = f"{service}.service"
    try:
        invocation = os.readlink(os.path.join(UNITS, f"invocation:{unit}"))
    except OSError:
        invocation = None
    for root in CGROUPS if invocation else ():
        procs = read(os.path.join(root, "system.slice", unit, "cgroup.procs"))
        if procs is not None:
            return [pid for pid in procs.split() if pid.isdigit()], invocation
    found = unit_properties(service, "MainPID", "InvocationID")
    pid = found.get("MainPID", "")
    return ([pid] if pid.isdigit() and int(pid) > 0 else []), found.get("InvocationID", "")


def gpu_nodes_open(pids):
    found = 0
    for fd in (fd for pid in pids for fd in glob.glob(f"/proc/{pid}/fd/*")):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if re.fullmatch(r"/dev/(nvidia\d+|dri/renderD\d+)", target):
            found += 1
    return found


def offloaded(service, invocation, settled):
    """llama.cpp's "offloaded N/M layers to GPU", from the journal of the unit's current start only: the lines since
    the last run's cursor (kept per start in STATE), the newest such line so far remembered with it. ``settled``:
    one model per start (not a router, whose models load later), so once found the journal is not read again."""
    if not invocation:
        return None
    path = os.path.join(STATE, re.sub(r"[^A-Za-z0-9_.@-]", "_", service) + ".json")
    try:
        state = json.loads(read(path) or "{}")
    except ValueError:
        state = {}
    if state.get("invocation") != invocation:
        state = {"invocation": invocation}
    elif settled and state.get("found"):
        return tuple(state["found"])
    argv = ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager", "-q", "--show-cursor"]
    if state.get("cursor"):
        argv.append("--after-cursor=" + state["cursor"])
    out = run(argv, timeout=20)
    if out is not None:
        cursor = re.search(r"^-- cursor: (\S+)$", out, re.M)
        found = re.findall(r"offloaded (\d+)/(\d+) layers to GPU", out)
        if found:
            state["found"] = list(found[-1])
        if cursor:
            state["cursor"] = cursor[1]
        try:
            os.makedirs(STATE, mode=0o700, exist_ok=True)
            with open(path + ".new", "w", encoding="utf-8") as handle:
                json.dump(state, handle)
            os.replace(path + ".new", path)
        except OSError:
            pass
    return tuple(state["found"]) if state.get("found") else None


def dechunk(body):
    """An HTTP/1.1 chunked body, joined."""
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        length = int(size.split(b";")[0] or b"0", 16)
        if length == 0:
            break
        out, body = out + rest[:length], rest[length + 2:]
    return out


def get_json(url, key_file):
    """GET http://HOST:PORT/PATH (the engine on this host) with the engine's key (its file's first line that is not
    a comment); None unless it answers 200 with JSON. A plain HTTP/1.0 request over a socket: importing
    urllib.request would cost this script more CPU than everything else it does (about 40 of 80 ms a run)."""
    import socket

    match = re.fullmatch(r"http://([^/:\[\]]+|\[[0-9A-Fa-f:.]+\]):(\d+)(/\S*)", url)
    if not match:
        return None
    key = next((line.strip() for line in (read(key_file) or "").splitlines()
                if line.strip() and not line.startswith("#")), "") if key_file else ""
    request = (f"GET {match[3]} HTTP/1.0\r\nHost: {match[1]}:{match[2]}\r\nAccept: application/json\r\n"
               + (f"Authorization: Bearer {key}\r\n" if key else "") + "\r\n")
    chunks = []
    try:
        with socket.create_connection((match[1].strip("[]"), int(match[2])), timeout=5) as conn:
            conn.sendall(request.encode())
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        return None
    if re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
        body = dechunk(body)
    try:
        return json.loads(body)
    except ValueError:
        return None


def context_tokens(url, key_file, model=None):
    """llama.cpp's /slots: the tokens in the busiest slot's context (prompt + generated), the newest task if none
    is busy. ``model``: a router's model, asked without loading it (tools/server/README.md: GET endpoints take
    ?model=NAME, ?autoload=false)."""
    quoted = re.sub(r"[^A-Za-z0-9._~-]", lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), model or "")
    slots = get_json(url + "/slots" + (f"?autoload=false&model={quoted}" if model else ""), key_file)
    best = None
    for slot in slots if isinstance(slots, list) else []:
        if "id_task" not in slot:
            continue
        decoded = sum(int(t.get("n_decoded") or 0) for t in slot.get("next_token") or [] if isinstance(t, dict))
        tokens = int(slot.get("n_prompt_tokens") or 0) + decoded
        rank = (bool(slot.get("is_processing")), int(slot.get("id_task") or 0))
        if best is None or rank > best[0]:
            best = (rank, tokens)
    return None if best is None else best[1]


def router_models(lines, base, engine):
    """A llama.cpp router: labwright_engine_model_loaded per model of its list (its /models: status "loaded"), and
    the largest context of the loaded ones' /slots (an unloaded one is not asked: that would not load it, but say
    400)."""
    listed = get_json(engine["url"] + "/models", engine.get("key_file") or "")
    status = {}
    for model in (listed or {}).get("data", []) if isinstance(listed, dict) else []:
        value = model.get("status")
        status[str(model.get("id"))] = value.get("value") if isinstance(value, dict) else value
    best = None
    for name in engine["models"]:
        loaded = status.get(name) == "loaded"
        lines.append(f'labwright_engine_model_loaded{{{base},model="{label(name)}"}} {int(loaded)}')
        tokens = context_tokens(engine["url"], engine.get("key_file") or "", name) if loaded else None
        if tokens is not None and (best is None or tokens > best):
            best = tokens
    return best


def engines(lines, config, gpus):
    """``gpus``: how many GPUs the host shows; with none, and none of the engine's device nodes open, a model cannot
    be split between GPU and CPU, so the journal is not read for its offload line."""
    for engine in config.get("engines", []):
        service = engine["service"]
        base = f'service="{label(service)}",engine="{label(engine.get("kind", ""))}"'
        pids, invocation = unit_state(service)
        lines.append(f"labwright_engine_up{{{base}}} {int(bool(pids))}")
        if not pids:
            continue
        nodes = gpu_nodes_open(pids)
        lines.append(f"labwright_engine_gpu_nodes_open{{{base}}} {nodes}")
        layers = offloaded(service, invocation, not engine.get("models")) if gpus or nodes else None
        if layers:
            lines.append(f"labwright_engine_layers_offloaded{{{base}}} {layers[0]}")
            lines.append(f"labwright_engine_layers_total{{{base}}} {layers[1]}")
        if engine.get("kind") == "llamacpp" and engine.get("url") and engine.get("models"):
            tokens = router_models(lines, base, engine)
            if tokens is not None:
                lines.append(f"labwright_engine_context_tokens{{{base}}} {tokens}")
        elif engine.get("kind") == "llamacpp" and engine.get("url"):
            tokens = context_tokens(engine["url"], engine.get("key_file") or "")
            if tokens is not None:
                lines.append(f"labwright_engine_context_tokens{{{base}}} {tokens}")


def main():
    config = json.loads(read(sys.argv[1]) or "{}")
    out = sys.argv[2]
    lines, errors = [], []
    count = {"nvidia": nvidia(lines, errors), **sysfs(lines)}
    for vendor, found in count.items():
        lines.append(f'labwright_gpu_count{{vendor="{vendor}"}} {found}')
    engines(lines, config, sum(count.values()))
    for source in ("nvidia-smi",):
        lines.append(f'labwright_gpu_metrics_error{{source="{source}"}} {int(source in errors)}')
    temporary = out + ".new"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.chmod(temporary, 0o644)
    os.replace(temporary, out)


if __name__ == "__main__":
    main()
