"""labwright's GPU host facts and passthrough wiring, read from this machine's real NVIDIA driver and device nodes."""
import glob
import json
import subprocess

from labwright.gpu.nvidia.driver import check_driver_match, userspace_versions
from labwright.gpu.nvidia.host import NODE_FACTS_SCRIPT, GpuHost, parse_node_facts
from labwright.guests import lxd_render, proxmox_render
from labwright.guests.model import spec_from_data

host = GpuHost()
print("driver_version:", host.driver_version())
print("majors:", host.majors())
print("nodes:", [(n.path, n.major, n.minor, oct(n.mode)) for n in host.device_nodes()])
print("preflight:", host.preflight_commands(), "container tools:", host.has_container_tools())
libs = subprocess.run("ldconfig -p | awk '{print $NF}'; "
                      "ls /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu 2>/dev/null",
                      shell=True, capture_output=True, text=True).stdout.split()
libs += glob.glob("/usr/local/nvidia/lib*/lib*.so.*")
user = userspace_versions(libs)
smi = subprocess.run("nvidia-smi || true", shell=True, capture_output=True, text=True).stdout
m = check_driver_match(host.driver_version(), user, smi)
print("driver match:", m.status, "|", m.message)
facts = parse_node_facts(subprocess.run(["bash", "-c", NODE_FACTS_SCRIPT], capture_output=True, text=True).stdout)
print("pve node facts:", facts.driver, facts.majors, [(n.path, n.major, n.minor) for n in facts.nodes])
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
data = {"backend": "proxmox", "node": "pve1", "vmid": 201, "hostname": "llm1", "template": TEMPLATE,
        "memory": 4096, "cores": 4, "net": {"bridge": "vmbr0"}, "gpu": "nvidia"}
spec = spec_from_data("@pct/pve1/201", data, source="h100")
for ver in ((8, 2), (7, 4)):
    try:
        w = proxmox_render.resolve_gpu(spec, ver, facts, "h100")
        print(f"PVE {ver}: mode={w.mode}", json.dumps(list(w.devices) or [list(x) for x in w.lxc], indent=1), w.notes)
    except Exception as e:
        print(f"PVE {ver}: ERROR {e}")
lspec = spec_from_data("lxd-gpu", {"backend": "lxd", "image": "debian/12", "gpu": "nvidia", "gpu_mode": "unix-char"},
                       source="h100")
try:
    lw = lxd_render.resolve_gpu(lspec, host, 0)
    print("LXD unix-char:", lw.mode, [(n.path, n.major, n.minor) for n in lw.nodes], lw.notes)
except Exception as e:
    print("LXD: ERROR", e)
