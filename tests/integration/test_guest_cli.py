"""`labwright guest plan|apply|show|stop|start|destroy` as a user runs them, against the real local LXD."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import textwrap

import pytest

from labwright.lxd.client import LxdClient
from labwright.testing.lab_fixture import TEMPLATE

pytestmark = pytest.mark.lab


def lw(cli_env, *args, stdin: str | None = None):
    return subprocess.run(["labwright", "guest", *args], capture_output=True, text=True, env=cli_env, timeout=600,
                          input=stdin)


def the_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and stderr.splitlines()[-1] == errors[0], stderr
    return errors[0]


def write_inventory(path, name: str, **guest) -> str:
    data = {"backend": "lxd", "clone": TEMPLATE, "profiles": ["lwtest"], **guest}
    path.write_text(textwrap.dedent(f"""
        guests = [("@lxd/{name}", {{"guest": {data!r}}})]
        """))
    return str(path)


def test_plan_apply_show_destroy(lab, cli_env, tmp_path):
    name = f"lwg-{secrets.token_hex(3)}"
    inv = write_inventory(tmp_path / "inv.py", name, memory="512M")
    client = LxdClient()
    try:
        plan = lw(cli_env, "plan", "-i", inv)
        assert plan.returncode == 0, plan.stderr
        assert f"guest {name} (lxd local): create" in plan.stdout
        assert "+ config limits.memory: 512MiB" in plan.stdout
        assert client.instance_or_none(name) is None

        applied = lw(cli_env, "apply", "-i", inv)
        assert applied.returncode == 0, applied.stderr
        assert f"guest {name} (lxd local): changed" in applied.stdout and "1 guest(s) changed" in applied.stdout

        again = lw(cli_env, "apply", "-i", inv, "--json")
        assert again.returncode == 0 and json.loads(again.stdout) == [{"guest": name, "backend": "lxd", "changes": []}]

        write_inventory(tmp_path / "inv.py", name, memory="768M")
        plan = lw(cli_env, "plan", "-i", inv, "--guest", name, "--json")
        (result,) = json.loads(plan.stdout)
        assert result["action"] == "update"
        assert result["changes"] == [{"what": "config limits.memory", "before": "512MiB", "after": "768MiB"}]
        assert lw(cli_env, "apply", "-i", inv).returncode == 0

        (shown,) = json.loads(lw(cli_env, "show", "-i", inv, "--json").stdout)
        assert shown["exists"] and shown["in_sync"] and shown["status"] == "Running"
        table = lw(cli_env, "show", "-i", inv)
        assert name in table.stdout and "Running" in table.stdout

        stopped = lw(cli_env, "stop", "-i", inv)
        assert "1 guest(s) stopped" in stopped.stdout and client.instance(name)["status"] == "Stopped"
        assert "1 guest(s) started" in lw(cli_env, "start", "-i", inv).stdout

        # Destructive: dry unless --yes (docs/cli.md), nothing destroyed.
        dry = lw(cli_env, "destroy", "-i", inv)
        assert dry.returncode == 0 and client.instance_or_none(name) is not None, dry.stderr
        assert f"would destroy guest {name}" in dry.stdout and "run again with --yes" in dry.stdout

        gone = lw(cli_env, "destroy", "-i", inv, "--yes")
        assert gone.returncode == 0 and "1 guest(s) destroyed" in gone.stdout
        assert client.instance_or_none(name) is None
        assert "no guest to destroy" in lw(cli_env, "destroy", "-i", inv).stdout
    finally:
        lab.remove(name)


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="this host has an NVIDIA driver")
def test_gpu_without_a_driver_is_one_line_exit_2_and_nothing_made(lab, cli_env, tmp_path):
    name = f"lwg-{secrets.token_hex(3)}"
    inv = write_inventory(tmp_path / "inv.py", name, gpu="nvidia")
    for command in ("plan", "apply"):
        proc = lw(cli_env, command, "-i", inv)
        assert proc.returncode == 2
        assert "gpu: nvidia, but this host has no NVIDIA driver" in the_error(proc.stderr)
    assert LxdClient().instance_or_none(name) is None


def test_missing_image_is_one_line_exit_2(lab, cli_env, tmp_path):
    name = f"lwg-{secrets.token_hex(3)}"
    inv = write_inventory(tmp_path / "inv.py", name, clone=None, image="no-such-image")
    proc = lw(cli_env, "apply", "-i", inv)
    assert proc.returncode == 2
    assert "image 'no-such-image' does not exist on LXD local" in the_error(proc.stderr)
    assert LxdClient().instance_or_none(name) is None
