"""`labwright gpu check` against a real LXD guest on the local lab: fake NVIDIA host files (tests/support/fake_nvidia:
/proc version and devices, mknod nodes with the driver's majors) passed through by the guest backend, a userspace in
the guest, and the REAL llama-server (the cached CPU build) running under the guest's systemd with -ngl 99: the GPU
layers are requested and not offloaded, so the check fails and names llama.cpp's reason. Then the failures a host
driver update causes: a userspace that no longer matches the module, nvidia-uvm with a new major.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.cli import main, register
from labwright.guests.lxd import LxdBackend
from labwright.verify import test_llamacpp as llamacpp_suite
from support.fake_nvidia import (
    DRIVER_VERSION,
    fake_root_in_dev,
    make_fake_nvidia_host,
    remove_fake_root,
)
from support.gpu_guest import install_userspace, spec, start_llama_server
from support.gpu_host import TreeGpuHost
from support.host_cli import on_tree

pytestmark = pytest.mark.lab

@pytest.fixture
def fake_host() -> Iterator[Path]:
    root = fake_root_in_dev()
    try:
        make_fake_nvidia_host(root, uvm_major=509, caps_major=511)
        with on_tree(root):  # the host `gpu check` reads (support.host_cli)
            yield root
    finally:
        remove_fake_root(root)


def gpu_check(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what the set-up printed (guest creation progress) is not the command's output
    register(["gpu"])
    code = main(["gpu", "check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cpu_fallback_of_the_real_llama_server_fails_the_check(lab, client, names, fake_host, tmp_path, capsys):
    name = f"lwgpu-{secrets.token_hex(3)}"
    names.append(name)
    LxdBackend(client, gpu_host=TreeGpuHost(fake_host)).apply(spec(name, gpu="nvidia"))
    install_userspace(client, name, DRIVER_VERSION)
    start_llama_server(client, name, tmp_path)

    code, out, err = gpu_check(capsys, name, "--json")
    report = json.loads(out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 1 and report["ok"] is False and report["service"] == "llama-server"
    assert checks["GPU visible in the guest"]["ok"], checks
    assert "compute capability 8.6" in checks["GPU visible in the guest"]["detail"]
    assert checks["userspace == host module"]["ok"] and DRIVER_VERSION in checks["userspace == host module"]["detail"]
    assert checks["device nodes and majors"]["ok"], checks["device nodes and majors"]
    engine = checks["engine llama-server on the GPU"]
    assert not engine["ok"]
    assert engine["detail"].endswith("holds no /dev/nvidiaN open (-ngl 99 requested): it runs on the CPU")
    assert engine["cause"].startswith("llama.cpp found no usable GPU and ignored --gpu-layers")
    # stderr: one line per failed check, naming the reason
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "engine llama-server on the GPU" in lines[0] and "no usable GPU" in lines[0]
    with capsys.disabled():
        print(f"\ngpu check (4 checks, real llama-server) took {report['seconds']:.2f} s")

    # A timed decode against the real server: slower than an (absurd) CPU bound fails, above a low one passes.
    code, out, _ = gpu_check(capsys, name, "--decode-floor", "1000000", "--json")
    decode = json.loads(out)["checks"][-1]
    assert code == 1 and decode["name"] == "decode faster than a CPU" and not decode["ok"], decode
    assert re.fullmatch(r"\d+ tokens in [\d.]+ s = [\d.]+ tok/s \(CPU bound 1e\+06 tok/s\)", decode["detail"]), decode
    assert decode["cause"] == "decoding no faster than a CPU: the engine runs on the CPU"
    code, out, _ = gpu_check(capsys, name, "--decode-floor", "0.01", "--json")
    assert json.loads(out)["checks"][-1]["ok"], out
    code, out, err = gpu_check(capsys, name, "--decode-floor", "0")
    assert code == 2 and out == "" and err.startswith("labwright: error: --decode-floor 0: not a speed")

    # The same engine check in the shipped testinfra suite (labwright verify llamacpp) fails with the reason.
    suite = Path(llamacpp_suite.__file__)
    verify = subprocess.run([sys.executable, "-m", "pytest", "-c", "/dev/null", "--rootdir", str(suite.parent), "-p",
                             "no:cacheprovider", str(suite), f"--hosts=lxc://{name}", "-k", "engine_runs_on_the_gpu",
                             "-q"], capture_output=True, text=True, timeout=300)
    assert verify.returncode == 1, verify.stdout[-2000:]
    assert "1 failed" in verify.stdout and "llama.cpp found no usable GPU" in verify.stdout, verify.stdout[-2000:]

    # After a host driver update: the module is 550.54.15 and nvidia-uvm has a new major; the guest is untouched.
    version_file = fake_host / "proc" / "driver" / "nvidia" / "version"
    version_file.write_text(version_file.read_text().replace(DRIVER_VERSION, "550.54.15"))
    for node in ("nvidia-uvm", "nvidia-uvm-tools"):
        (fake_host / "dev" / node).unlink()
    (fake_host / "proc" / "devices").write_text((fake_host / "proc" / "devices").read_text().replace("509", "237"))
    os.mknod(fake_host / "dev" / "nvidia-uvm", 0o666 | 0o020000, os.makedev(237, 0))
    os.mknod(fake_host / "dev" / "nvidia-uvm-tools", 0o666 | 0o020000, os.makedev(237, 1))
    code, out, _ = gpu_check(capsys, name, "--service", "none", "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert code == 1
    assert not checks["userspace == host module"]["ok"]
    assert "host module 550.54.15, container has libcuda.so 550.54.14" in checks["userspace == host module"]["detail"]
    nodes = checks["device nodes and majors"]["detail"]
    # Each lazy node (required: false, so LXD watches its source with inotify) is seen either way, whichever LXD's
    # event handling reached first: the guest still has the old 509:N node, or LXD removed it with its unlinked
    # source (CI at 2b91fd1: nvidia-uvm-tools missing; earlier runs: present). Both are a mismatch the check names.
    for node, minor in (("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)):
        assert re.search(rf"/dev/{node} (is 509:{minor}, host 237:{minor}|missing \(host 237:{minor}\))", nodes), nodes
    assert "engine llama-server on the GPU" not in checks  # --service none

    # The fixes the check names: re-apply the guest (majors re-read) and the exact userspace -> all pass.
    LxdBackend(client, gpu_host=TreeGpuHost(fake_host)).apply(spec(name, gpu="nvidia"))
    install_userspace(client, name, "550.54.15")
    code, out, _ = gpu_check(capsys, name, "--service", "none", "--json")
    assert code == 0 and json.loads(out)["ok"], out


def test_bad_input_is_one_line_exit_2(lab, client, names, fake_host, capsys):
    missing = f"lwgpu-{secrets.token_hex(3)}"
    code, out, err = gpu_check(capsys, missing)
    assert code == 2 and out == ""
    assert err == f"labwright: error: guest {missing}: no such LXD instance (see `lxc list`)\n"

    plain = f"lwgpu-{secrets.token_hex(3)}"
    names.append(plain)
    LxdBackend(client).apply(spec(plain))
    code, out, err = gpu_check(capsys, plain)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert f"guest {plain}: no GPU is passed to it" in err and "gpu: nvidia" in err

    code, _, err = gpu_check(capsys, "Not_A_Name!")
    assert code == 2 and "is not an LXD instance name" in err and len(err.splitlines()) == 1


def test_no_engine_service_is_said_not_checked(lab, client, names, fake_host, capsys):
    name = f"lwgpu-{secrets.token_hex(3)}"
    names.append(name)
    LxdBackend(client, gpu_host=TreeGpuHost(fake_host)).apply(spec(name, gpu="nvidia"))
    install_userspace(client, name, DRIVER_VERSION)
    code, out, _ = gpu_check(capsys, name, "--json")
    report = json.loads(out)
    assert code == 0 and report["service"] is None
    assert report["checks"][-1]["detail"].startswith("not checked: no llama-server or tabbyapi service")


def test_a_userspace_only_the_dynamic_loader_knows_is_read(lab, client, names, fake_host, tmp_path, capsys):
    # Where a container runtime or an installer puts the driver's libraries outside the distribution directories
    # (the lent H200 had them in /usr/local/nvidia/lib64, named in ld.so.conf): real ELF shared objects in
    # /opt/nvidia-driver/lib, registered with ldconfig, are the userspace the check must find (it said "no userspace"
    # on a machine whose CUDA worked).
    name = f"lwgpu-{secrets.token_hex(3)}"
    names.append(name)
    LxdBackend(client, gpu_host=TreeGpuHost(fake_host)).apply(spec(name, gpu="nvidia"))
    assert client.exec(name, ["mkdir", "-p", "/opt/nvidia-driver/lib"]).exit_code == 0
    source = tmp_path / "stub.c"
    source.write_text("int labwright_stub(void) { return 0; }\n")
    for lib in ("libcuda.so", "libnvidia-ml.so"):
        built = tmp_path / f"{lib}.{DRIVER_VERSION}"
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{lib}.1", "-o", str(built), str(source)], check=True)
        client.push_file(name, f"/opt/nvidia-driver/lib/{built.name}", built.read_bytes(), mode=0o755)
    client.push_file(name, "/etc/ld.so.conf.d/zz-nvidia-driver.conf", b"/opt/nvidia-driver/lib\n", mode=0o644)
    setup = client.exec(name, ["sh", "-c", "cd /opt/nvidia-driver/lib && for l in libcuda.so libnvidia-ml.so; do "
                                           f"ln -sf $l.{DRIVER_VERSION} $l.1; done && ldconfig && ldconfig -p"])
    assert setup.exit_code == 0 and b"/opt/nvidia-driver/lib/libcuda.so.1" in setup.stdout, setup.stdout

    code, out, err = gpu_check(capsys, name, "--service", "none", "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["userspace == host module"]["ok"], checks["userspace == host module"]
    assert DRIVER_VERSION in checks["userspace == host module"]["detail"]
    assert code == 0, err
