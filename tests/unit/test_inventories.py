"""The shipped inventories load in pyinfra itself, and the example keeps secrets out of the file."""

from __future__ import annotations

import re
import subprocess

import pytest

from labwright.lab.spec import load_inventory_groups

SECRETISH = re.compile(r"(password|secret|token_value|api_key)\s*['\"]?\s*[:=]\s*['\"](?!\$)[^'\"]+['\"]", re.I)


@pytest.mark.parametrize("name", ["local.py", "lab.py"])
def test_pyinfra_loads_the_inventory_without_contacting_anything(repo, cli_env, name):
    # debug-inventory builds hosts and data and connects to nothing.
    proc = subprocess.run(["pyinfra", f"inventories/{name}", "debug-inventory"], capture_output=True, text=True,
                          env=cli_env, cwd=repo, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_example_lab_has_two_proxmox_nodes_gpu_and_desktop_guests(repo):
    groups = load_inventory_groups(repo / "inventories" / "lab.py")
    nodes, _ = groups["pve_nodes"]
    assert [n for n, _ in nodes] == ["pve1", "pve2"]
    (gpu_host, gpu_data), = groups["gpu_guests"][0]
    assert gpu_host.startswith("@pct/pve1/") and gpu_data["guest"]["gpu"] == "nvidia"
    (desk_host, desk_data), = groups["desktop_guests"][0]
    assert desk_data["guest"]["unprivileged"] is True and desk_data["guest"]["gpu"] == "none"


@pytest.mark.parametrize("name", ["local.py", "lab.py"])
def test_no_secret_values_in_inventories(repo, name):
    text = (repo / "inventories" / name).read_text()
    assert not SECRETISH.search(text), SECRETISH.search(text)
    assert "BEGIN" not in text  # no keys pasted in
