"""The shipped inventories load in pyinfra itself, and the example keeps secrets out of the file."""

from __future__ import annotations

import re
import subprocess

import pytest

from labwright.inventory import load_inventory

SECRETISH = re.compile(r"(password|secret|token_value|api_key)\s*['\"]?\s*[:=]\s*['\"](?!\$)[^'\"]+['\"]", re.I)


@pytest.mark.parametrize("name", ["local.py", "lab.py"])
def test_pyinfra_loads_the_inventory_without_contacting_anything(repo, cli_env, name):
    # debug-inventory builds hosts and data and connects to nothing.
    proc = subprocess.run(["pyinfra", f"inventories/{name}", "debug-inventory"], capture_output=True, text=True,
                          env=cli_env, cwd=repo, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_example_lab_has_two_proxmox_nodes_gpu_and_desktop_guests(repo):
    inventory = load_inventory(repo / "inventories" / "lab.py")
    assert [h.name for h in inventory.group("pve_nodes")] == ["pve1", "pve2"]
    gpu, = inventory.group("gpu_guests")
    assert gpu.name.startswith("@pct/pve1/") and gpu.data["guest"]["gpu"] == "nvidia"
    desk, = inventory.group("desktop_guests")
    assert desk.data["guest"]["unprivileged"] is True and desk.data["guest"]["gpu"] == "none"


@pytest.mark.parametrize("name", ["local.py", "lab.py"])
def test_no_secret_values_in_inventories(repo, name):
    text = (repo / "inventories" / name).read_text()
    assert not SECRETISH.search(text), SECRETISH.search(text)
    assert "BEGIN" not in text  # no keys pasted in
