"""labwright loads an inventory as pyinfra's CLI does: the same hosts, groups and merged data, group_data/ included.

The reference is pyinfra itself, run as a subprocess (importing pyinfra_cli here would monkey-patch the test process
with gevent): ``pyinfra INVENTORY debug-inventory --json`` from the same working directory.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from labwright.cluster.doctor import host_data, load_cluster
from labwright.guests.model import load_guests
from labwright.inventory import load_inventory
from labwright.lab.spec import load_lab_spec

INVENTORY = """
    from pathlib import Path  # an import is no group and no data

    lab = (
        ["@lxd/a1", ("@lxd/b2", {"size": "8", "color": "host"})],
        {"lab_subnet": "10.99.8.1/24", "lab_cpu": "4", "color": "group"},
    )
    pve_nodes = ([("pve1", {"ssh_hostname": "10.0.0.11"}), "pve2"], {"ssh_user": "admin"})
    gpu = ["@lxd/llm1"]
    containers = [("@pct/pve1/201", {"pct_ssh_hostname": "10.0.0.11"})]
    both = ["@lxd/a1", "pve1"]
    _private = ["@lxd/never"]
    helper_value = 3  # not a list or tuple: not a group
"""
GROUP_DATA = {
    "all.py": """
        import os
        timezone = "Etc/UTC"
        color = "all"
        proxmox_api_url = "https://10.0.0.11:8006"
    """,
    "lab.py": """
        color = "lab-file"  # replaces the inventory's own `lab` data for this key
        lab_memory = "3GiB"
    """,
    "gpu.py": """
        guest = {"backend": "lxd", "memory": "4GiB", "gpu": "nvidia"}
    """,
    "pve_nodes.py": """
        __all__ = ["corosync_name_prefix"]
        corosync_name_prefix = "node-"
        not_exported = 1
    """,
    "both.py": """
        color = "both"
    """,
    "@pct.py": """
        pct_ssh_user = "root"  # a group only the @pct connector adds
    """,
}


def make_inventory_dir(root: Path, inventory: str = INVENTORY, group_data: dict[str, str] | None = None) -> Path:
    (root / "group_data").mkdir(parents=True, exist_ok=True)
    for name, text in (GROUP_DATA if group_data is None else group_data).items():
        (root / "group_data" / name).write_text(textwrap.dedent(text))
    path = root / "inv.py"
    path.write_text(textwrap.dedent(inventory))
    return path


def pyinfra_view(cli_env: dict[str, str], inventory: Path, cwd: Path) -> dict[str, tuple[list[str], dict]]:
    proc = subprocess.run(["pyinfra", str(inventory), "debug-inventory", "--json"], capture_output=True, text=True,
                          env=cli_env, cwd=cwd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hosts = json.loads(proc.stdout)
    return {h["name"]: (list(dict.fromkeys(h["groups"])), h["data"]) for h in hosts}


def labwright_view(inventory: Path, cwd: Path) -> dict[str, tuple[list[str], dict]]:
    loaded = load_inventory(inventory, cwd=cwd)
    return {h.name: (list(h.groups), json.loads(json.dumps(dict(h.data)))) for h in loaded}


def test_the_hosts_groups_and_data_are_pyinfras(tmp_path, cli_env):
    inventory = make_inventory_dir(tmp_path)
    ours = labwright_view(inventory, tmp_path)
    assert ours == pyinfra_view(cli_env, inventory, tmp_path)
    # and what that means, spelled out:
    groups, a1 = ours["@lxd/a1"]
    assert groups == ["lab", "both", "inv", "@lxd"]
    assert (a1["color"], a1["lab_cpu"], a1["lab_memory"], a1["timezone"]) == ("both", "4", "3GiB", "Etc/UTC")
    assert ours["@lxd/b2"][1]["color"] == "host" and ours["@lxd/b2"][1]["size"] == "8"
    assert ours["pve2"][1]["corosync_name_prefix"] == "node-" and "not_exported" not in ours["pve2"][1]
    assert ours["@pct/pve1/201"][1]["pct_ssh_user"] == "root" and ours["@pct/pve1/201"][1]["pct_vmid"] == 201
    assert ours["@lxd/llm1"][1]["guest"]["gpu"] == "nvidia"
    assert "os" not in a1 and "Path" not in a1 and "@lxd/never" not in ours


def test_group_data_in_the_working_directory_and_beside_the_inventory(tmp_path, cli_env):
    # pyinfra reads ./group_data (working directory) first, then group_data beside the inventory, which wins.
    inventory = make_inventory_dir(tmp_path / "inventories", group_data={"all.py": "where = 'beside'\n"})
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text("where = 'cwd'\ncwd_only = True\n")
    ours = labwright_view(inventory, tmp_path)
    assert ours == pyinfra_view(cli_env, inventory, tmp_path)
    assert ours["pve1"][1]["where"] == "beside" and ours["pve1"][1]["cwd_only"] is True


def test_an_all_group_in_the_file_sets_the_hosts(tmp_path, cli_env):
    inventory = make_inventory_dir(tmp_path, inventory="""
        all = (["@lxd/a", "pve1"], {"everyone": 1})
        web = [("@lxd/a", {"port": 80}), "not-in-all"]
    """, group_data={})
    ours = labwright_view(inventory, tmp_path)
    assert ours == pyinfra_view(cli_env, inventory, tmp_path)
    assert sorted(ours) == ["@lxd/a", "pve1"] and ours["pve1"][1]["everyone"] == 1


def test_group_data_files_may_read_the_inventory(tmp_path, cli_env):
    inventory = make_inventory_dir(tmp_path, inventory="web = ['@lxd/a', '@lxd/b']\n", group_data={
        "web.py": "from pyinfra import inventory\nweb_count = len(inventory.get_group('web'))\n",
    })
    ours = labwright_view(inventory, tmp_path)
    assert ours == pyinfra_view(cli_env, inventory, tmp_path)
    assert ours["@lxd/a"][1]["web_count"] == 2


def test_the_shipped_inventories_load_as_pyinfra_loads_them(repo, cli_env):
    for name in ("local.py", "lab.py"):
        assert labwright_view(repo / "inventories" / name, repo) == \
            pyinfra_view(cli_env, repo / "inventories" / name, repo)


def test_commands_see_the_group_data(tmp_path, monkeypatch):
    inventory = make_inventory_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    lab = load_lab_spec(inventory)  # labwright lab up/status/down
    assert (lab.cpu, lab.memory, str(lab.subnet)) == ("4", "3GiB", "10.99.8.1/24")
    llm1, = load_guests(inventory)  # labwright guest plan/apply/show/destroy and deploys/guest.py
    assert (llm1.name, llm1.memory, llm1.gpu) == ("llm1", 4096, "nvidia")
    assert llm1.host_data["proxmox_api_url"] == "https://10.0.0.11:8006"  # from group_data/all.py
    runners = load_cluster(inventory)  # labwright cluster doctor/rejoin/ghosts
    assert [(r.name, r.target, r.user) for r in runners] == [("pve1", "10.0.0.11", "admin"), ("pve2", "pve2", "admin")]
    assert host_data(inventory, "pve2")["corosync_name_prefix"] == "node-"


def test_a_guests_node_data_is_that_hosts_merged_data(tmp_path, monkeypatch):
    inventory = make_inventory_dir(tmp_path, inventory="""
        pve_nodes = ["pve1"]
        gpu = [("@pct/pve1/201", {"guest": {"backend": "proxmox", "template": "local:vztmpl/d.tar.zst"}})]
    """, group_data={"pve_nodes.py": "proxmox_api_url = 'https://pve1:8006'\n"})
    monkeypatch.chdir(tmp_path)
    spec, = load_guests(inventory)
    assert (spec.node, spec.vmid, spec.name) == ("pve1", 201, "ct201")
    assert spec.node_data["proxmox_api_url"] == "https://pve1:8006"


def test_only_a_cluster_group_the_file_defines_is_the_cluster(tmp_path, monkeypatch):
    # pyinfra makes a group `cluster` of every host of cluster.py; the doctor still wants the file's own group.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cluster.py"
    path.write_text("pve_nodes = ['pve1']\nother = ['@lxd/x']\n")
    assert [r.name for r in load_cluster(path)] == ["pve1"]


PROBE_DEPLOY = """
import json
from pyinfra import host
from labwright.guests.model import load_guests

specs = load_guests(host.data.guests_inventory)
with open(host.data.probe_out, "w") as out:
    json.dump([[repr(s), sorted(s.host_data), sorted(s.node_data)] for s in specs], out)
"""


def test_guest_plan_and_a_pyinfra_run_see_the_same_guests(tmp_path, cli_env, monkeypatch):
    # deploys/guest.py calls load_guests inside a pyinfra run (gevent, pyinfra's state): the same specs come out.
    inventory = make_inventory_dir(tmp_path)
    (tmp_path / "probe.py").write_text(PROBE_DEPLOY)
    out = tmp_path / "probe.json"
    proc = subprocess.run(["pyinfra", "-y", "@local", "probe.py", "--data", f"guests_inventory={inventory}",
                           "--data", f"probe_out={out}"], capture_output=True, text=True, env=cli_env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    ours = [[repr(s), sorted(s.host_data), sorted(s.node_data)] for s in load_guests(inventory)]
    assert json.loads(out.read_text()) == ours and len(ours) == 1


@pytest.mark.parametrize("override", [{"color": "cli"}])
def test_override_data_is_pyinfras_data_option(tmp_path, cli_env, override):
    inventory = make_inventory_dir(tmp_path)
    loaded = load_inventory(inventory, cwd=tmp_path, override_data=override)
    assert {h.data["color"] for h in loaded} == {"cli"}
