"""labwright.guests.declared (what @pct/@lxd do with a host's `guest` data when its container is missing) against the
PVE simulator: a guest that cannot be created fails BEFORE anything is changed, one line naming the field; --dry
plans only; the node's settings come from the node's inventory host, else from the guest host itself."""

from __future__ import annotations

import pytest
from pyinfra.api import Inventory

from labwright.errors import BadInput
from labwright.guests.declared import ensure_declared, pyinfra_dry_run, spec_for_host
from support.pve_simulator import PveSimulator, SimNode

TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "7d1e2f3a-4b5c-4d6e-8f70-819203a4b5c6"


@pytest.fixture
def sim(monkeypatch):
    monkeypatch.delenv("PROXMOX_USER", raising=False)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)
    with PveSimulator(nodes=[SimNode("pve1"), SimNode("pve2")], tokens={TOKEN_ID: TOKEN_SECRET},
                      task_seconds=0.01) as simulator:
        yield simulator


def host_for(sim: PveSimulator, node: str = "pve1", vmid: int = 201, with_node_host: bool = False, **guest: object):
    declared = {"backend": "proxmox", "node": node, "vmid": vmid, "hostname": "llm1", "template": sim.template,
                "rootfs": "local-lvm:8", "memory": 1024, "gpu": "none", **guest}
    endpoint = {"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file)}
    name = f"@pct/{node}/{vmid}"
    if with_node_host:  # the node's settings on the node's own host, as inventories/lab.py has them
        inventory = Inventory(([name, (node, endpoint)], {}), )
        inventory.get_host(name).data.override_datas["guest"] = declared  # type: ignore[attr-defined]
    else:
        inventory = Inventory(([(name, {**endpoint, "guest": declared})], {}))
    return inventory.get_host(name), inventory


def test_a_missing_guest_is_created_once_and_then_left_alone(sim):
    host, inventory = host_for(sim)
    spec = spec_for_host(host, inventory)
    lines: list[str] = []
    plan = ensure_declared(spec, lines.append)
    assert plan.action == "create" and sim.is_running(201)
    assert sim.config("pve1", 201).options["hostname"] == "llm1"
    assert any("create the declared guest (proxmox)" in line for line in lines), lines
    writes = len(sim.writes)
    again = ensure_declared(spec, lines.append)
    assert again.action == "none" and not again.changes and len(sim.writes) == writes


def test_dry_plans_only(sim):
    host, inventory = host_for(sim)
    with pytest.raises(BadInput) as info:
        ensure_declared(spec_for_host(host, inventory), print, dry=True)
    assert "would be created" in str(info.value) and "run without --dry" in str(info.value)
    assert not sim.writes and not sim.conf_path("pve1", 201).exists()


def test_unknown_template_is_refused_before_any_write(sim):
    host, inventory = host_for(sim, template="local:vztmpl/nope_1.0_amd64.tar.zst")
    with pytest.raises(BadInput) as info:
        ensure_declared(spec_for_host(host, inventory), print)
    message = str(info.value)
    assert "\n" not in message and "template" in message and "nope_1.0" in message, message
    assert not sim.writes


def test_node_not_in_the_cluster_is_refused_naming_node(sim):
    host, inventory = host_for(sim, node="pve9")
    with pytest.raises(BadInput) as info:
        ensure_declared(spec_for_host(host, inventory), print)
    assert "pve9" in str(info.value) and "not in the Proxmox cluster" in str(info.value) and "`node`" in str(info.value)
    assert not sim.writes


def test_vmid_taken_by_another_guest_is_refused_naming_vmid(sim):
    other, inventory = host_for(sim, node="pve2", vmid=201)
    ensure_declared(spec_for_host(other, inventory), print)  # CT 201 now lives on pve2
    writes = len(sim.writes)
    host, inventory = host_for(sim, node="pve1", vmid=201)
    with pytest.raises(BadInput) as info:
        ensure_declared(spec_for_host(host, inventory), print)
    message = str(info.value)
    assert "vmid" in message and "201" in message and "pve2" in message, message
    assert len(sim.writes) == writes and not sim.conf_path("pve1", 201).exists()


def test_node_settings_come_from_the_node_host_when_the_inventory_has_one(sim):
    host, inventory = host_for(sim, with_node_host=True)
    spec = spec_for_host(host, inventory)
    assert spec is not None and spec.node_data["proxmox_api_url"] == f"https://{sim.host}"


def test_a_host_without_guest_data_declares_nothing():
    inventory = Inventory((["@pct/pve1/300"], {}))
    assert spec_for_host(inventory.get_host("@pct/pve1/300"), inventory) is None


def test_dry_is_read_from_the_pyinfra_command_line(tmp_path):
    """The real pyinfra command runs a deploy that asks (importing pyinfra's CLI here would monkey-patch this test
    process with gevent): --dry, no --dry, and --dry only as a --data value."""
    import subprocess
    import sys
    from pathlib import Path

    deploy = tmp_path / "ask.py"
    deploy.write_text("from labwright.guests.declared import pyinfra_dry_run\nprint('DRY', pyinfra_dry_run())\n")
    pyinfra = str(Path(sys.executable).with_name("pyinfra"))
    for args, expected in ((["--dry", "@local", str(deploy)], "DRY True"), (["-y", "@local", str(deploy)], "DRY False"),
                           (["-y", "@local", str(deploy), "--data", "x=--dry"], "DRY False")):
        run = subprocess.run([pyinfra, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert expected in run.stdout + run.stderr, (args, (run.stdout + run.stderr)[-2000:])
    assert not pyinfra_dry_run()  # outside pyinfra's CLI


def test_wrong_credentials_are_one_line_naming_the_variables(sim, monkeypatch):
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "00000000-0000-4000-8000-000000000000")
    host, inventory = host_for(sim)
    with pytest.raises(BadInput) as info:
        ensure_declared(spec_for_host(host, inventory), print)
    message = str(info.value)
    assert "\n" not in message and "401 Authentication failed!" in message and "PROXMOX_TOKEN_SECRET" in message
    assert "b''" not in message and "errors:" not in message, message
    assert not sim.writes
