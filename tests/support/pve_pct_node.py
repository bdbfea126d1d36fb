"""A Proxmox VE node on this machine for tests: the PVE simulator's containers backed by the pct double's chroots.

The simulator keeps a cluster's configs and task logic; the pct double (tests/support/doubles/pct) keeps containers
one can ``pct exec`` into. Joined (the double's PCT_DOUBLE_PMXCFS mode), a container the simulator lists is one the
double execs into:

- the double reads each CT's config from the simulator's pmxcfs (``nodes/NODE/lxc/VMID.conf``);
- the simulator's boot of a CT (its ``on_boot`` hook, inside the start task) runs ``pct start VMID`` on the
  double, which makes the CT's /dev from its config and the node's nodes below ``host_root`` (a devN path missing
  there fails the start as PVE's does); a stop, or the stop inside a rollback, runs ``pct stop VMID``;
- the storage side of the simulator's snapshots runs ``pct volume-snapshot|volume-rollback|volume-delete``, so a
  rollback puts the CT's files back (its NVIDIA userspace with them), as a rollback of a real rootfs volume does.

The node's ``pct`` is the double on ``PATH`` (``bin``), with the switches in the environment (``env``): a runbook
that runs on the node and calls ``pct`` (labwright.hostupgrade.pve) finds it as it would on a real node. Needs root
(chroot, mknod), as the double does.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PCT_DOUBLE = Path(__file__).resolve().parent / "doubles" / "pct"


class _Running(set[int]):
    """The simulator's running set, each stop also made on the double (``pct stop``)."""

    def __init__(self, items: Iterable[int], node: PctNode):
        super().__init__(items)
        self.node = node

    def discard(self, vmid: int) -> None:
        if vmid in self:
            self.node.pct("stop", str(vmid), check=False)
        super().discard(vmid)

    def remove(self, vmid: int) -> None:
        self.discard(vmid)


class PctNode:
    """``PctNode(tmp_path / "pct", sim, host_root)``; ``.env`` for ``monkeypatch`` (PATH and the switches),
    ``.rootfs(vmid)`` a CT's tree."""

    def __init__(self, base: Path, sim: Any, host_root: Path, node: str = "pve1"):
        self.base = base
        self.root = base / "cts"
        self.bin = base / "bin"
        self.root.mkdir(parents=True, exist_ok=True)
        self.bin.mkdir(parents=True, exist_ok=True)
        (self.bin / "pct").symlink_to(PCT_DOUBLE)
        self.sim = sim
        self.env = {"PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                    "PCT_DOUBLE_ROOT": str(self.root), "PCT_DOUBLE_PMXCFS": str(sim.pmxcfs),
                    "PCT_DOUBLE_HOST_ROOT": str(host_root), "PCT_DOUBLE_NODE": node}
        sim.cluster.on_boot = self._boot
        sim.cluster.running = _Running(sim.cluster.running, self)
        sim.api.snapshots.volumes = self._volumes

    def pct(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(PCT_DOUBLE), *args], capture_output=True, text=True, timeout=120,
                                env={**os.environ, **self.env})
        if check and result.returncode != 0:
            raise RuntimeError(f"pct {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
        return result

    def rootfs(self, vmid: int) -> Path:
        return self.root / str(vmid) / "rootfs"

    def _boot(self, node: str, vmid: int, config: object) -> None:
        self.pct("start", str(vmid))

    def _volumes(self, action: str, node: str, vmid: int, snapname: str) -> None:
        self.pct(f"volume-{action}", str(vmid), snapname)
