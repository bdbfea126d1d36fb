"""A lab container standing in for a Proxmox node: the pct double (tests/support/doubles/pct) on its PATH, its CTs
made, reachable over SSH with the lab's key and the container's own host key pinned."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import Lab

PCT_DOUBLE = Path(__file__).resolve().parent / "doubles" / "pct"


@contextmanager
def pct_node(lab: Lab, tmp_path_factory: pytest.TempPathFactory, prefix: str,
             create: str) -> Iterator[tuple[str, str, Path]]:
    """(container, address, known_hosts file) of a fresh node whose CTs ``create`` (a shell line of `pct create`s)
    made; removed afterwards."""
    container = lab.fresh(prefix)
    try:
        lab.client.push_file(container, "/usr/local/sbin/pct", PCT_DOUBLE.read_bytes(), mode=0o755)
        made = lab.client.exec(container, ["sh", "-c", create])
        assert made.exit_code == 0, made.stderr.decode()
        address = instance_address(lab.client, container)
        assert address, f"{container} has no address"
        host_key = lab.client.exec(container, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.decode().split()
        known_hosts = tmp_path_factory.mktemp("pve") / "known_hosts"
        known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")
        yield container, address, known_hosts
    finally:
        lab.remove(container)
