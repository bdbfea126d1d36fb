"""How PVE stores and reads a property-string config value, against labwright's comparison of such values
(tests/conformance/pve-config/).

Each case is one TOML file: where the behaviour comes from (upstream project, version, commit, file, lines), the
``qm set``/``pct set`` command, the value PVE then holds under ``key`` (as ``qm config``/``pct config`` and
``GET .../config`` show it), and the values labwright must treat as the same device, mount or flags (no change
planned) and as different ones. The stored value must be one PVE's own parser accepts (the suite's port of
``parse_property_string`` with the vendored schema's formats). For ``hostpciN`` cases the PVE simulator is driven
as a user would: root sets the line with the case's spelling (as ``qm set`` calls ``update_vm``), the simulator
keeps it as given, and an API token's plan for the inventory device is "no change", not a refusal to make a
root-only rewrite.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from proxmoxer import ProxmoxAPI

from labwright.guests import pve_props
from labwright.guests.base import backend_for
from labwright.guests.model import spec_from_data
from support.gpu_host import TreePveNode
from support.pve_formats import PROPERTY_FORMATS
from support.pve_qemu import gpu_host_pci
from support.pve_schema import ApiSchema, parse_property_string
from support.pve_simulator import PveSimulator, SimNode

CASES_DIR = Path(__file__).resolve().parents[2] / "conformance" / "pve-config"
CASES = sorted(CASES_DIR.glob("*.toml"))
KNOWN_EXPECTATIONS = {"format", "same_as", "differs_from", "inventory", "note"}
OURS = {"hostpci": pve_props.HOSTPCI, "features": pve_props.LXC_FEATURES, "dev": pve_props.LXC_DEV,
        "mp": pve_props.LXC_MP, "lxc-net": pve_props.LXC_NET, "qemu-net": pve_props.QEMU_NET}
TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "3c2b1a09-8f7e-4d6c-9b5a-4e3d2c1b0a99"


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def pve_format(name: str) -> dict[str, Any]:
    """The format PVE parses the value with: the vendored schema's inline one, or the simulator's hostpci."""
    if name == "hostpci":
        return PROPERTY_FORMATS["pve-qm-hostpci"]
    schema = ApiSchema.load()
    lxc = schema.endpoints["/nodes/{node}/lxc/{vmid}/config"].properties("PUT")
    qemu = schema.endpoints["/nodes/{node}/qemu/{vmid}/config"].properties("PUT")
    return {"features": lxc["features"], "dev": lxc["dev[n]"], "mp": lxc["mp[n]"], "lxc-net": lxc["net[n]"],
            "qemu-net": qemu["net[n]"]}[name]["format"]


def test_the_pve_docs_example_is_recorded():
    assert {"qm-set-hostpci-pve-docs-example", "qm-set-hostpci-defaults-written-out", "pct-set-features",
            "pct-set-dev", "pct-set-mp-stopped"} <= {path.stem for path in CASES}


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_case_names_its_upstream_source(path):
    case = load(path)
    sources = case["provenance"]["sources"]
    assert sources, path
    for source in sources:
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
        assert source["project"] and source["version"] and source["file"] and source["lines"], source
    assert set(case["expect"]) <= KNOWN_EXPECTATIONS, set(case["expect"]) - KNOWN_EXPECTATIONS
    assert case["expect"]["same_as"] and case["expect"]["differs_from"], f"{path.name} checks nothing"


@pytest.mark.parametrize("path", CASES, ids=lambda path: path.stem)
def test_labwright_reads_the_stored_value_as_pve_does(path):
    case = load(path)
    run, expect = case["run"], case["expect"]
    assert run["command"].split()[-1] == run["stored"] or "stopped" in path.stem  # stored as given
    fmt = pve_format(expect["format"])
    for value in [run["stored"], *expect["same_as"], *expect["differs_from"]]:
        parse_property_string(fmt, value)  # every value in the case is one PVE accepts
    ours = OURS[expect["format"]]
    for value in expect["same_as"]:
        assert pve_props.same(run["stored"], value, ours), value
    for value in expect["differs_from"]:
        assert not pve_props.same(run["stored"], value, ours), value


@pytest.fixture
def sim(tmp_path):
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", pci=gpu_host_pci())], tokens={TOKEN_ID: TOKEN_SECRET},
                      task_seconds=0.01) as simulator:
        (tmp_path / "node" / "etc").mkdir(parents=True)
        (tmp_path / "node" / "etc" / "pve").symlink_to(simulator.pmxcfs)
        yield simulator


@pytest.mark.parametrize("path", [p for p in CASES if "inventory" in load(p)["expect"]], ids=lambda p: p.stem)
def test_a_token_plans_no_change_for_the_device_root_set_another_way(path, sim, tmp_path, monkeypatch):
    case = load(path)
    run, inventory = case["run"], case["expect"]["inventory"]
    data = {"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120, "memory": "16G", "cores": 8,
            "disk": "local-lvm:64", "net": {"bridge": "vmbr0"}, "ostype": "l26", "hostpci": inventory}
    spec = spec_from_data("vm1", data, source="lab.py", node_data={"proxmox_api_url": f"https://{sim.host}",
                                                                   "proxmox_ca_file": str(sim.ca_file)})

    def backend() -> Any:
        return backend_for(spec, pve_node=TreePveNode(tmp_path / "node", label="node pve1"), poll_interval=0.01)

    monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", sim.root_password)
    backend().apply(spec)
    root = ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))
    root.nodes("pve1").qemu(120).config.put(**{run["key"]: run["stored"]})  # what `qm set` does (update_vm)
    assert root.nodes("pve1").qemu(120).config.get()[run["key"]] == run["stored"]  # kept as given

    monkeypatch.delenv("PROXMOX_USER")
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)
    plan = backend().plan(spec)  # before the fix: "hostpci0 (a PCI device by address) can only be set by root@pam"
    assert plan.action == "none" and plan.changes == []
