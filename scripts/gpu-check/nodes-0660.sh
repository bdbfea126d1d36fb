#!/bin/bash
# GPU nodes 0660 group video, as labwright passes them to guests (issue 31 item 6: gpu/devices.py, lxd_render.py,
# proxmox_render.py): does CUDA work for a service user IN the group, and is it refused for one who is not?
# The machine's own /dev/nvidia* are left as they are: in a private mount namespace (unshare -m), copies of the nodes
# (same major:minor, made with mknod) at 0660 root:video are bind-mounted over them, and a CUDA allocation runs as
# an unprivileged user with and without the video group (setpriv: no capabilities, no new privileges).
# Needs root and a CUDA torch importable by every user. Prints one JSON object; exit 0 when both hold.
set -u
GID=$(getent group video | cut -d: -f3); GID=${GID:-44}
PY=$(command -v python3)
cat > /tmp/lw-cuda-alloc.py <<'EOF'
import json, os, sys
try:
    import torch
    x = torch.ones(1 << 20, device="cuda")
    print(json.dumps({"cuda": True, "sum": float(x.sum().item()), "device": torch.cuda.get_device_name(0)}))
except Exception as error:
    print(json.dumps({"cuda": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}))
EOF
chmod 0644 /tmp/lw-cuda-alloc.py
unshare -m --propagation private bash -s "$GID" "$PY" <<'EOF'
gid=$1; py=$2
mkdir -p /tmp/lw-nodes && mount -t tmpfs -o mode=0755 tmpfs /tmp/lw-nodes
nodes=()
for dev in /dev/nvidia*; do
  [ -c "$dev" ] || continue
  name=${dev#/dev/}; major=$((0x$(stat -c %t "$dev"))); minor=$((0x$(stat -c %T "$dev")))
  if mknod -m 0660 "/tmp/lw-nodes/$name" c "$major" "$minor" 2>/dev/null; then
    chgrp "$gid" "/tmp/lw-nodes/$name" && mount --bind "/tmp/lw-nodes/$name" "$dev"
  else  # no CAP_MKNOD (the machine is a container): the node itself, put back on exit
    echo "chmod $(stat -c %a "$dev") $dev; chgrp $(stat -c %g "$dev") $dev" >> /tmp/lw-nodes/restore
    chmod 0660 "$dev" && chgrp "$gid" "$dev"
  fi
  nodes+=("$(stat -c '%n %a %g' "$dev")")
done
trap '[ -f /tmp/lw-nodes/restore ] && sh /tmp/lw-nodes/restore' EXIT
in_group=$(setpriv --reuid=65534 --regid=65534 --groups="$gid" --inh-caps=-all --bounding-set=-all \
  --no-new-privs env HOME=/tmp "$py" /tmp/lw-cuda-alloc.py 2>&1 | tail -1)
not_in_group=$(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
  --no-new-privs env HOME=/tmp "$py" /tmp/lw-cuda-alloc.py 2>&1 | tail -1)
"$py" - "$in_group" "$not_in_group" "${nodes[@]}" <<'PY'
import json, sys
in_group, not_in_group, nodes = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
ok = in_group.get("cuda") is True and not_in_group.get("cuda") is False
print(json.dumps({"nodes_0660": nodes, "user_in_video": in_group, "user_not_in_video": not_in_group, "holds": ok},
                 indent=1))
sys.exit(0 if ok else 1)
PY
EOF
