"""A GPU guest on the local lab for `gpu check` tests and benchmarks: an LXD guest with the fake NVIDIA nodes passed
through (tests/support/fake_nvidia), a userspace of a given version, and the real llama-server (the cached CPU build)
running under the guest's systemd with GPU layers requested."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from labwright.guests.lxd import LxdBackend
from labwright.guests.model import GuestSpec, spec_from_data
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
from labwright.lxd.client import LxdClient
from labwright.testing.lab_fixture import TEMPLATE
from labwright.testing.waiting import wait_for
from support.fake_nvidia import fake_nvidia_smi_script, nvidia_smi_query_lines
from support.gpu_host import TreeGpuHost

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def spec(name: str, **data: Any) -> GuestSpec:
    base = {"backend": "lxd", "clone": TEMPLATE, "profiles": ["lwtest"]}
    return spec_from_data(f"@lxd/{name}", {**base, **data}, source="test-inv.py")


def sh(client: LxdClient, name: str, script: str) -> str:
    result = client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} in {name}: {result.stderr.decode()[-500:]}"
    return result.stdout.decode()


def install_userspace(client: LxdClient, name: str, version: str) -> None:
    """What the .run installer's --no-kernel-module leaves for the check: the versioned libraries and nvidia-smi."""
    sh(client, name, f"mkdir -p {LIBDIR} && rm -f {LIBDIR}/libcuda.so.* {LIBDIR}/libnvidia-ml.so.* && "
                     f"for l in libcuda.so libnvidia-ml.so; do echo fake > {LIBDIR}/$l.{version}; "
                     f"ln -sf $l.{version} {LIBDIR}/$l.1; done")
    client.push_file(name, "/usr/local/bin/nvidia-smi",
                     fake_nvidia_smi_script(nvidia_smi_query_lines(version)).encode(), mode=0o755)


def start_llama_server(client: LxdClient, name: str, tmp_path: Path) -> None:
    """The cached CPU build under the guest's systemd as `llama-server.service`, GPU layers requested (-ngl 99)."""
    server = build_llama_server()
    model = write_tiny_gguf(tmp_path / "tiny.gguf", TinyModel())
    client.push_file(name, "/usr/local/bin/llama-server", server.read_bytes(), mode=0o755)
    client.push_file(name, "/srv/tiny.gguf", model.read_bytes(), mode=0o644)
    if client.exec(name, ["sh", "-c", "ldconfig -p | grep -q libgomp.so.1"]).exit_code != 0:
        # The lab image is debootstrap's minimal bookworm; the build links OpenMP from the same Debian 12.
        client.push_file(name, "/usr/local/lib/libgomp.so.1",
                         Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1").read_bytes(), mode=0o644)
        sh(client, name, "ldconfig")
    # Behind a key as deploys/llamacpp.py leaves it (issue 31): gpu check --decode finds the key file on its own.
    sh(client, name, "install -d -m 0750 /etc/llama-server && (umask 027; python3 -c 'import secrets; "
                     "print(\"lw-\" + secrets.token_urlsafe(32))' > /etc/llama-server/api-key)")
    sh(client, name, "systemd-run --unit=llama-server --property=Restart=no /usr/local/bin/llama-server "
                     "-m /srv/tiny.gguf --host 127.0.0.1 --port 8001 -c 512 -np 1 -ngl 99 "
                     "--api-key-file /etc/llama-server/api-key")
    wait_for("llama-server in the guest to log that it is listening",
             lambda: "listening on http" in client.exec(name, ["journalctl", "--no-pager", "-o", "cat", "-u",
                                                                "llama-server.service"]).stdout.decode(),
             timeout=120)


# --- the host upgrade's guests (tests/integration/test_host_upgrade*.py) ------------------------------------------
def upgrade_guest(client: LxdClient, names: list[str], root: Path, userspace: str) -> str:
    name = f"lwhu-{secrets.token_hex(3)}"
    names.append(name)
    LxdBackend(client, gpu_host=TreeGpuHost(root)).apply(spec(name, gpu="nvidia"))
    install_userspace(client, name, userspace)
    return name


def nodes_in(client: LxdClient, name: str) -> dict[str, str]:
    out = sh(client, name, "for f in /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia0; do "
                           "[ -c $f ] && stat -c '%n %t:%T' $f; done; true")
    return {p: f"{int(v.split(':')[0], 16)}:{int(v.split(':')[1], 16)}" for p, v in
            (line.split() for line in out.splitlines())}


def libs_in(client: LxdClient, name: str) -> str:
    return sh(client, name, f"ls {LIBDIR} | grep -E '^lib(cuda|nvidia-ml)[.]so[.][0-9]+[.]' | sort").strip()
