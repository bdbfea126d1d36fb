"""A deploy into a Proxmox VM (reached over SSH, under a host name of its own) snapshots the VM through the API
before its risky step, when the host's data names the VM: ``proxmox_vm: NODE/VMID`` or a ``kind: vm`` guest
declaration. Run by the real pyinfra CLI on ``@local`` (the network rule: 127.0.0.1 only), the host data naming a VM
of the PVE simulator (verified HTTPS on 127.0.0.1). The risky step copies the VM's config file as the simulator
holds it at that moment, so the copy shows whether the snapshot was there before the step ran.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

from labwright.hostnames import PctName
from support import pve_snapshot_sim as shared
from support.pve_simulator import PveSimulator
from support.pve_snapshot import sections
from support.pve_snapshot_sim import cli, create, node_data

sim, api = shared.sim, shared.api
VM = PctName("pve1", 120)
OURS = re.compile(r"^\[(labwright-packages-\d{8}T\d{6}Z)\]$", re.M)
DEPLOY = """
from pyinfra import host

from labwright.snapshots.deploy import check_snapshot_data, shell

check_snapshot_data()
shell(name="Risky step", step="packages", commands=[f"cp {host.data.vm_conf} {host.data.marker}"])
"""


def make_vm(api) -> None:
    create(api, "qemu", VM.vmid, name="win1", memory=8192, cores=4, machine="q35", bios="ovmf", ostype="win11",
           scsi0="local-lvm:32", efidisk0="local-lvm:1,efitype=4m", hostpci0="0000:01:00,pcie=1,x-vga=1")


def pyinfra(sim: PveSimulator, cli_env: dict[str, str], tmp_path: Path, *args: str
            ) -> subprocess.CompletedProcess[str]:
    deploy = tmp_path / "risky.py"
    deploy.write_text(DEPLOY)
    env = {**cli_env, **shared.root_cli_env(sim), "PATH": cli_env["PATH"]}
    env.pop("PROXMOX_TOKEN_ID", None)
    data = {"vm_conf": sim.vm_conf_path(VM.node, VM.vmid), "marker": tmp_path / "at-risky-step.conf"}
    return subprocess.run(["pyinfra", "-y", *args, str(deploy), *(f"--data={k}={v}" for k, v in data.items())],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def snapshot_posts(sim: PveSimulator) -> list[tuple[str, dict]]:
    return [(r.path, r.params) for r in sim.writes if r.path.endswith("/snapshot")]


def test_proxmox_vm_data_snapshots_the_vm_before_the_risky_step_and_guest_restore_puts_it_back(
        sim, api, cli_env, tmp_path):
    make_vm(api)
    vm_data = [f"--data=proxmox_vm={VM.node}/{VM.vmid}", *(f"--data={k}={v}" for k, v in node_data(sim).items())]

    run = pyinfra(sim, cli_env, tmp_path, "@local", *vm_data)

    assert run.returncode == 0, run.stdout + run.stderr
    at_step = OURS.findall((tmp_path / "at-risky-step.conf").read_text())
    assert len(at_step) == 1, "the VM's config as the risky step saw it holds no labwright snapshot section"
    name = at_step[0]
    assert snapshot_posts(sim) == [("/nodes/pve1/qemu/120/snapshot",
                                    {"snapname": name, "description": "labwright: before packages"})]  # no vmstate
    assert sim.is_running(VM.vmid)  # disk-only: the VM kept running
    assert re.search(rf"snapshot {name} taken before packages in \d+\.\d s \(restore: labwright guest restore "
                     r"@pct/pve1/120", run.stdout + run.stderr), run.stdout + run.stderr

    # the run's change undone: the VM's config broken after the snapshot, restored by `labwright guest restore`
    api.nodes("pve1").qemu(120).config.put(memory=2048, name="broken")
    restored = cli(sim, "guest", "restore", VM.host, "--force", "-y")
    assert restored.returncode == 0, restored.stderr
    conf = sim.vm_config("pve1", 120).effective()
    assert conf["name"] == "win1" and conf["memory"] == "8192" and conf["parent"] == name
    assert sim.is_running(VM.vmid)


def test_a_kind_vm_guest_takes_the_node_hosts_api_settings_and_opting_out_takes_none(sim, api, cli_env, tmp_path):
    make_vm(api)
    inventory = tmp_path / "lab.py"
    inventory.write_text(textwrap.dedent(f"""
        nodes = [("pve1", {node_data(sim)!r})]
        vms = [("@local", {{"guest": {{"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120}}}})]
    """))

    run = pyinfra(sim, cli_env, tmp_path, "--limit", "@local", str(inventory))  # pve1 is not deployed to

    assert run.returncode == 0, run.stdout + run.stderr
    (name,) = OURS.findall((tmp_path / "at-risky-step.conf").read_text())
    assert [params["snapname"] for _, params in snapshot_posts(sim)] == [name]
    assert name in sections(sim.vm_config("pve1", 120))

    off = pyinfra(sim, cli_env, tmp_path, "--limit", "@local", str(inventory), "--data=snapshot_before=false")
    assert off.returncode == 0, off.stdout + off.stderr
    assert len(snapshot_posts(sim)) == 1  # none taken, the step ran
    assert OURS.findall((tmp_path / "at-risky-step.conf").read_text()) == [name]


def test_a_bad_proxmox_vm_is_one_line_before_anything_runs(sim, api, cli_env, tmp_path):
    make_vm(api)
    writes = len(sim.writes)

    run = pyinfra(sim, cli_env, tmp_path, "@local", "--data=proxmox_vm=120")

    assert run.returncode != 0
    lines = [line for line in (run.stdout + run.stderr).splitlines() if "NODE/VMID" in line]
    assert len(lines) == 1 and "host @local: proxmox_vm: 120 is not NODE/VMID, the node and id of the VM this " \
        "host is, e.g. proxmox_vm=pve1/120 (nothing was changed)" in lines[0], run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert not (tmp_path / "at-risky-step.conf").exists() and sim.writes[writes:] == []
