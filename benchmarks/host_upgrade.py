"""`labwright host upgrade --yes`: time from the command to every GPU guest passing `gpu check` again, on the lab.

    sudo .venv/bin/python benchmarks/host_upgrade.py                  # 3 runs, 2 GPU guests
    sudo .venv/bin/python benchmarks/host_upgrade.py --runs 5 --guests 3
    sudo .venv/bin/python benchmarks/host_upgrade.py --pve             # a Proxmox VE node on the PVE simulator
    sudo .venv/bin/python benchmarks/host_upgrade.py --node            # the real-node path, beside the lab's

Each run: a fresh fake NVIDIA host tree below /dev (tests/support/fake_nvidia: driver 550.54.14, nvidia-uvm major
509, a new kernel with a DKMS build of 550.54.15, a stand-in installer; the simulated reboot gives nvidia-uvm 237)
and fresh LXD guests with its nodes passed through and a matching userspace. Timed: the CLI in-process, from
`host upgrade NODE --yes` to its return, which is after the last guest's gpu check passed. The guests are real
(snapshots on the lab's pool, config PATCH, the installer run inside, restarts under systemd, gpu check); the host's
driver install and reboot are simulated on the tree and take milliseconds, so a real host adds its reboot and the
DKMS build. Reported: the total and the median per step kind. Guests are named lwbhu-<hex> and removed at the end.

``--pve``: the same on a Proxmox VE node of the PVE simulator (tests/support/pve_simulator, its tasks 0.05 s each):
half the containers passed the GPU with devN entries, half with raw lines; timed from `host upgrade pve1 -i INV
--yes` to its return (snapshots, majors rewritten, stop/start of each, the checks). What it measures is labwright's
side (API round trips and its task polling, every 0.5 s); a real node adds its own task times (snapshot, start).

``--node``: each run twice on fresh trees and guests, side by side: the lab's simulated host steps (above) and the
real-node path (labwright.hostupgrade.realhost with the doubles of tests/support/host_tools: the installer behind
the .run, dkms, proxmox-boot-tool, systemctl), which stops at `systemctl reboot` with its state saved, then the tree
is booted (tests/support/host_doubles.boot) and the resume unit's command run as systemd would. Timed: up to the
reboot, the resume to every guest passing gpu check, and their sum (a real node adds its reboot and the DKMS
build), with the ratio to the simulated path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.cli import main as cli_main
from labwright.cli import register
from labwright.guests.lxd import LxdBackend
from labwright.testing.lab_fixture import ensure_test_lab
from support.fake_nvidia import (
    DRIVER_VERSION,
    fake_root_in_dev,
    make_fake_nvidia_host,
    make_upgrade_host,
    remove_fake_root,
)
from support.gpu_guest import install_userspace, spec
from support.gpu_host import TreeGpuHost
from support.host_cli import on_tree, resume_command
from support.host_tree import TreeHost

NEW = "550.54.15"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--guests", type=int, default=2)
    parser.add_argument("--pve", action="store_true", help="a Proxmox VE node on the PVE simulator instead of LXD")
    parser.add_argument("--node", action="store_true", help="the real-node path (doubles, resume unit) beside the "
                        "lab's simulated one")
    args = parser.parse_args()
    if args.pve:
        return pve(args.runs, args.guests)
    if args.node:
        return node(args.runs, args.guests)
    lab = ensure_test_lab()
    register(["host", "gpu"])
    totals: list[float] = []
    steps: dict[str, list[float]] = defaultdict(list)
    for run in range(args.runs):
        root = fake_root_in_dev("lwbench-hu")
        names = [f"lwbhu-{secrets.token_hex(3)}" for _ in range(args.guests)]
        try:
            make_fake_nvidia_host(root, uvm_major=509)
            make_upgrade_host(root, built={"6.8.12-4-pve": [DRIVER_VERSION], "6.8.12-9-pve": [NEW]},
                              repository=(NEW,), hostname="lwbench", uvm_major_after_reboot=237)
            for name in names:
                LxdBackend(lab.client, gpu_host=TreeGpuHost(root)).apply(spec(name, gpu="nvidia"))
                install_userspace(lab.client, name, DRIVER_VERSION)
            out = io.StringIO()
            t0 = time.monotonic()
            with on_tree(root), contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = cli_main(["host", "upgrade", "lwbench", "--yes", "--json"])
            total = time.monotonic() - t0
            result = json.loads(out.getvalue())
            assert code == 0 and result["ok"], result
            record(result, total, totals, steps)
            print(f"run {run + 1}: {total:.1f} s for {args.guests} guest(s)", file=sys.stderr)
        finally:
            for name in names:
                lab.remove(name)
            remove_fake_root(root)
    report("host upgrade --yes to every guest passing gpu check", args.guests, totals, steps)
    return 0


def node(runs: int, guests: int) -> int:
    from labwright.gpu.nvidia.upgrade_facts import node_facts
    from labwright.hostupgrade.plan import make_plan
    from labwright.hostupgrade.realhost import CommandHost
    from labwright.hostupgrade.run import Upgrade
    from support.host_doubles import boot, make_node, run_resume_unit, tool_env

    lab = ensure_test_lab()
    register(["host", "gpu"])
    kernels = ("6.8.12-4-pve", "6.8.12-9-pve")
    simulated: list[float] = []
    to_reboot: list[float] = []
    resumed: list[float] = []
    for run in range(runs):
        for kind in ("simulated", "node"):
            root = fake_root_in_dev("lwbench-hn")
            names = [f"lwbhu-{secrets.token_hex(3)}" for _ in range(guests)]
            saved_env = dict(os.environ)
            try:
                make_fake_nvidia_host(root, uvm_major=509)
                built = {kernels[0]: [DRIVER_VERSION]} if kind == "node" else {kernels[0]: [DRIVER_VERSION],
                                                                               kernels[1]: [NEW]}
                make_upgrade_host(root, *kernels, built=built, repository=(DRIVER_VERSION, NEW), hostname="lwbench",
                                  uvm_major_after_reboot=237, host_userspace=True)
                for name in names:
                    LxdBackend(lab.client, gpu_host=TreeGpuHost(root)).apply(spec(name, gpu="nvidia"))
                    install_userspace(lab.client, name, DRIVER_VERSION)
                if kind == "simulated":
                    t0 = time.monotonic()
                    with on_tree(root), contextlib.redirect_stdout(io.StringIO()), \
                            contextlib.redirect_stderr(io.StringIO()):
                        code = cli_main(["host", "upgrade", "lwbench", "--yes", "--json"])
                    assert code == 0
                    simulated.append(time.monotonic() - t0)
                    continue
                make_node(root, kernels, kernels, DRIVER_VERSION, kernels[0])
                os.environ.update(tool_env(root))
                repo = root / "var/cache/labwright/nvidia"
                t0 = time.monotonic()
                facts = node_facts("lwbench", TreeHost(root), lab.client, repo)
                plan = make_plan(facts)
                host = CommandHost(TreeHost(root), repo)
                host.preflight(plan)
                upgrade = Upgrade(plan, TreeHost(root), repo, lab.client, host=host)
                upgrade.resume_command = resume_command(root, "lwbench")  # the resume unit: labwright on the tree
                out = upgrade.run({g.name: g.services for g in facts.guests})
                to_reboot.append(time.monotonic() - t0)
                assert out.ok and out.rebooting, out.message
                boot(root, uvm_major=237)
                t1 = time.monotonic()
                done = run_resume_unit(root, dict(os.environ))
                resumed.append(time.monotonic() - t1)
                assert done.returncode == 0, done.stderr[-2000:]
            finally:
                os.environ.clear()
                os.environ.update(saved_env)
                for name in names:
                    lab.remove(name)
                remove_fake_root(root)
        print(f"run {run + 1}: simulated {simulated[-1]:.1f} s, node {to_reboot[-1]:.1f} + {resumed[-1]:.1f} s",
              file=sys.stderr)
    node_total = [a + b for a, b in zip(to_reboot, resumed, strict=True)]
    med = statistics.median
    print(f"host upgrade --yes to every guest passing gpu check ({guests} guests, n={runs}):")
    print(f"  lab, simulated host steps     median {med(simulated):6.1f} s")
    print(f"  node path: up to the reboot   median {med(to_reboot):6.1f} s")
    print(f"  node path: resume unit        median {med(resumed):6.1f} s (its own process: imports, LXD client)")
    print(f"  node path: both               median {med(node_total):6.1f} s = {med(node_total) / med(simulated):.2f}x "
          "the simulated path (a real node adds its DKMS build and its reboot)")
    return 0


def record(result: dict, total: float, totals: list[float], steps: dict[str, list[float]]) -> None:
    """One run's total and its seconds per step kind (all guests together)."""
    totals.append(total)
    per: dict[str, float] = defaultdict(float)
    for done in result["done"]:
        per[done["action"]] += done["seconds"]
    for action, seconds in per.items():
        steps[action].append(seconds)


def report(what: str, guests: int, totals: list[float], steps: dict[str, list[float]]) -> None:
    print(f"{what} ({guests} guests): median {statistics.median(totals):.1f} s, min {min(totals):.1f} s, max "
          f"{max(totals):.1f} s (n={len(totals)})")
    for action, values in steps.items():
        print(f"  {action:<12} median {statistics.median(values):6.2f} s (all guests together)")


def pve(runs: int, guests: int) -> int:
    from proxmoxer import ProxmoxAPI

    from labwright.guests.proxmox_api import TaskWaiter
    from support.pve_pct_node import PctNode
    from support.pve_simulator import PveSimulator, SimNode, host_devices

    register(["host"])
    token, secret = "root@pam!bench", secrets.token_hex(16)
    os.environ.update({"PROXMOX_TOKEN_ID": token, "PROXMOX_TOKEN_SECRET": secret})
    os.environ.pop("PROXMOX_USER", None)
    totals: list[float] = []
    steps: dict[str, list[float]] = defaultdict(list)
    paths = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="lwbench-hu-pve-") as tmp:
            root = make_fake_nvidia_host(Path(tmp) / "pve1", uvm_major=509, extra_files=False)
            make_upgrade_host(root, built={"6.8.12-4-pve": [DRIVER_VERSION], "6.8.12-9-pve": [NEW]},
                              repository=(NEW,), hostname="pve1", uvm_major_after_reboot=237)
            with PveSimulator(nodes=[SimNode("pve1", "8.2.4", devices=host_devices(root))],
                              tokens={token: secret}) as sim:
                (root / "etc/pve").symlink_to(sim.pmxcfs)
                # the node's `pct` (push, exec): the pct double joined to this simulator's containers
                saved_env = dict(os.environ)
                os.environ.update(PctNode(Path(tmp) / "pct", sim, root).env)
                api = ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))
                waiter = TaskWaiter(api, timeout=60, interval=0.01)
                for i in range(guests):
                    vmid = 201 + i
                    devs = {f"dev{n}": p for n, p in enumerate(paths)} if i % 2 == 0 else {}
                    waiter.wait(api.nodes("pve1").lxc.post(vmid=vmid, ostemplate=sim.template,
                                                           rootfs="local-lvm:8", **devs), "create")
                    if i % 2:
                        conf = sim.conf_path("pve1", vmid)
                        conf.write_text(conf.read_text() + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
                                        "lxc.cgroup2.devices.allow: c 509:* rwm\n" + "".join(
                                            f"lxc.mount.entry: {p} {p[1:]} none bind,optional,create=file\n"
                                            for p in paths))
                    waiter.wait(api.nodes("pve1").lxc(vmid).status.start.post(), "start")
                inventory = Path(tmp) / "lab.py"
                inventory.write_text(f"pve_nodes = ([('pve1', {{'proxmox_api_url': 'https://{sim.host}', "
                                     f"'proxmox_ca_file': {str(sim.ca_file)!r}}})], {{}})\n")
                out = io.StringIO()
                t0 = time.monotonic()
                with on_tree(root), contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                    code = cli_main(["host", "upgrade", "pve1", "-i", str(inventory), "--yes", "--json"])
                total = time.monotonic() - t0
                os.environ.clear()
                os.environ.update(saved_env)
                result = json.loads(out.getvalue())
                assert code == 0 and result["ok"], result
                assert [v for k, v in sim.config("pve1", 202).lxc if k.endswith("allow")] == ["c 195:* rwm",
                                                                                            "c 237:* rwm"]
        record(result, total, totals, steps)
        print(f"run {run + 1}: {total:.1f} s for {guests} container(s)", file=sys.stderr)
    report("host upgrade --yes on a PVE simulator node to every container running with the new majors", guests,
           totals, steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
