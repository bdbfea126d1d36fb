"""Guest creation says what phase it is in and how long each took (labwright.ui progress lines on stderr): the
Proxmox backend against the PVE simulator (real proxmoxer, verified HTTPS on 127.0.0.1), every PVE task a phase.
The LXD backend's phases (create from an image or a copy, start) run in tests/integration/test_guest_lxd.py."""

from __future__ import annotations

import os
import re

import pytest

from labwright import ui
from labwright.errors import OperationFailed
from labwright.guests.base import backend_for
from labwright.guests.lxd import _describe
from labwright.guests.model import spec_from_data
from support.fake_nvidia import make_fake_nvidia_host
from support.gpu_host import TreePveNode
from support.pve_simulator import PveSimulator, SimNode, host_devices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fake host tree needs mknod (root)")

TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "5f0e1d2c-3b4a-4968-8776-a5b4c3d2e1f0"
DURATION = r"\((\d+\.\d+s|\d+m\d\ds)\)"


@pytest.fixture(autouse=True)
def plain(monkeypatch):
    monkeypatch.delenv("LABWRIGHT_PROGRESS", raising=False)
    monkeypatch.delenv("LABWRIGHT_PROGRESS_INTERVAL", raising=False)
    monkeypatch.setattr(ui, "plain_lines", False)


@pytest.fixture
def pve(tmp_path, monkeypatch):
    host = make_fake_nvidia_host(tmp_path / "pve1", uvm_major=509, caps_major=511, extra_files=False)
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", devices=host_devices(host))],
                      tokens={TOKEN_ID: TOKEN_SECRET}, task_seconds=0.01) as sim:
        (host / "etc").mkdir(exist_ok=True)
        (host / "etc" / "pve").symlink_to(sim.pmxcfs)
        monkeypatch.delenv("PROXMOX_USER", raising=False)
        monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
        monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)
        data = {"backend": "proxmox", "node": "pve1", "vmid": 201, "hostname": "llm1", "template": sim.template,
                "memory": "1G", "cores": 1, "rootfs": "local-lvm:8", "net": {"name": "eth0", "bridge": "vmbr0"}}
        spec = spec_from_data("@pct/pve1/201", data, source="lab.py",
                              node_data={"proxmox_api_url": f"https://{sim.host}",
                                         "proxmox_ca_file": str(sim.ca_file)})
        backend = backend_for(spec, pve_node=TreePveNode(host, label="node pve1"), poll_interval=0.01)
        yield sim, spec, backend


def phases(err: str) -> list[tuple[str, str]]:
    """(mark, phase) of every start (…) and end (✓/✗) line."""
    found = []
    for line in err.splitlines():
        if line.startswith("… ") and ": still running [" not in line:
            found.append(("…", line[2:]))
        elif match := re.fullmatch(rf"✓ (.+) {DURATION}", line):
            found.append(("✓", match[1]))
        elif match := re.fullmatch(r"✗ (.+) failed after (\d+\.\d+s|\d+m\d\ds)", line):
            found.append(("✗", match[1]))
    return found


def test_each_phase_of_a_proxmox_guest_is_a_line_with_how_long_it_took(pve, capsys):
    sim, spec, backend = pve
    backend.apply(spec)
    assert sim.is_running(201)
    create, start = f"{spec.where}: creating CT 201", f"{spec.where}: start CT 201"
    assert phases(capsys.readouterr().err) == [("…", create), ("✓", create), ("…", start), ("✓", start)]
    backend.stop(spec)
    backend.destroy(spec)
    stop, destroy = f"{spec.where}: stop CT 201", f"{spec.where}: destroying CT 201"
    assert phases(capsys.readouterr().err) == [("…", stop), ("✓", stop), ("…", destroy), ("✓", destroy)]


def test_a_failed_phase_says_so_and_the_error_stays_one_line(pve, capsys):
    sim, spec, backend = pve
    sim.fail_next_task("command 'lxc-start -F -n 201' failed: exit code 1", "vzstart")
    with pytest.raises(OperationFailed, match="lxc-start") as failed:
        backend.apply(spec)
    assert "\n" not in str(failed.value)
    create, start = f"{spec.where}: creating CT 201", f"{spec.where}: start CT 201"
    seen = phases(capsys.readouterr().err)
    assert seen[:4] == [("…", create), ("✓", create), ("…", start), ("✗", start)], seen
    # the clean-up of the half-made guest is its own phase
    assert ("✓", f"{spec.where}: destroy the half-made CT 201") in seen, seen
    assert not sim.conf_path("pve1", 201).exists()


@pytest.mark.parametrize("source, text", [
    ({"type": "image", "alias": "lw-debian"}, "image lw-debian"),
    ({"type": "image", "mode": "pull", "server": "https://images.lxd.canonical.com", "protocol": "simplestreams",
      "alias": "debian/12"}, "image debian/12 from https://images.lxd.canonical.com"),
    ({"type": "image", "fingerprint": "0123456789abcdef0123"}, "image 0123456789ab"),
    ({"type": "copy", "source": "lw-template"}, "a copy of lw-template"),
])
def test_the_lxd_create_line_names_what_the_guest_is_made_from(source, text):
    assert _describe(source) == text
