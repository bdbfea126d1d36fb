"""What the PVE simulator's snapshot tests share, containers and VMs alike: a simulator whose node has the GPU of
``support.pve_qemu.gpu_host_pci`` and, beside the default storages, one that cannot snapshot a container volume or a
raw disk (``dirstore``, type dir) and a ZFS pool (``tank``); root's credentials in the environment; a proxmoxer
client; and the node data, options and CLI call that point labwright at it.

The fixtures are imported by the test modules that use them (``from support.pve_snapshot_sim import api, sim``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proxmoxer import ProxmoxAPI

from labwright import snapshots
from labwright.guests.proxmox_api import TaskWaiter
from support.pve_config import CtConfig
from support.pve_qemu import gpu_host_pci
from support.pve_simulator import PveSimulator, SimNode, SimStorage, default_storages
from support.pve_snapshot import sections
from support.snapshot_cli import run_cli


@pytest.fixture
def sim() -> Iterator[PveSimulator]:
    storages = [*default_storages(), SimStorage("dirstore", "dir", ("rootdir", "images")),
                SimStorage("tank", "zfspool", ("rootdir", "images"))]
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", pci=gpu_host_pci())], storages=storages,
                      task_seconds=0.01) as simulator:
        yield simulator


@pytest.fixture
def root_env(monkeypatch: pytest.MonkeyPatch, sim: PveSimulator) -> None:
    monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", sim.root_password)


@pytest.fixture
def api(sim: PveSimulator) -> ProxmoxAPI:
    return ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))


def node_data(sim: PveSimulator) -> dict[str, str]:
    """The node's host data as an inventory gives it: the simulator's URL and CA."""
    return {"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file)}


def options(sim: PveSimulator) -> dict[str, Any]:
    """Keyword arguments of ``labwright.snapshots.take/restore/list_snapshots`` for the simulator."""
    return {"node_data": node_data(sim), "poll_interval": 0.01}


def wait(api: ProxmoxAPI, upid: str) -> dict[str, Any]:
    return TaskWaiter(api, timeout=30, interval=0.01).wait(upid, "test task")


def create(api: ProxmoxAPI, kind: str, vmid: int, start: bool = True, **params: Any) -> None:
    """Create guest ``vmid`` of ``kind`` (``lxc`` or ``qemu``) on pve1 with ``params``, and start it when ``start``."""
    guests = getattr(api.nodes("pve1"), kind)
    wait(api, guests.post(vmid=vmid, **params))
    if start:
        wait(api, guests(vmid).status.start.post())


def mine_and_three_keeping_two(sim: PveSimulator, guest: str, step: str, config: Callable[[], CtConfig]
                               ) -> list[snapshots.TakeResult]:
    """The keep-last-N rule on ``guest``: the user's ``mine`` by the CLI, then three of labwright's with ``keep=2``;
    the first of those is pruned, ``mine`` never is (checked in ``config()``, the guest's config file)."""
    made = cli(sim, "guest", "snapshot", guest, "--name", "mine")
    assert made.returncode == 0, made.stderr
    taken = [snapshots.take(guest, step, keep=2, **options(sim)) for _ in range(3)]
    assert taken[2].pruned == [taken[0].name]
    assert sorted(sections(config())) == sorted(["mine", taken[1].name, taken[2].name])
    return taken


def root_cli_env(sim: PveSimulator) -> dict[str, str]:
    """A minimal environment with root's credentials for the simulator (for subprocesses)."""
    return {"PATH": "/usr/bin:/bin", "PROXMOX_USER": "root@pam", "PROXMOX_PASSWORD": sim.root_password}


def cli(sim: PveSimulator, *args: str) -> subprocess.CompletedProcess[str]:
    """``labwright ARGS --data=proxmox_api_url=... --data=proxmox_ca_file=...`` as root."""
    data = [f"--data={k}={v}" for k, v in node_data(sim).items()]
    return run_cli(root_cli_env(sim), *args, *data, timeout=300)
