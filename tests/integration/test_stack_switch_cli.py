"""`labwright stack switch|rollback|show` on this machine (no container, no systemd): stand-in stacks from a local
wheelhouse into tmp directories, health decided by a command that imports the extension through the managed path.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support.cli_docs import assert_documented
from support.stacks import StandinStacks, build_standin_stacks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("standin-cli"))


@pytest.fixture
def run(stacks, cli_env, tmp_path):
    venv, root = tmp_path / "app" / ".venv", tmp_path / "stacks"
    venv.parent.mkdir()
    env = {**cli_env, "LABWRIGHT_MATRIX_DIR": str(stacks.matrix_dir), "LABWRIGHT_CACHE": str(tmp_path / "cache")}
    health = f"{venv}/bin/python -c 'import standin_attn; standin_attn._C.set_device(1)'"

    def labwright(command: str, *args: str, health_check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = ["labwright", "stack", command, "--venv", str(venv), "--root", str(root), *args]
        if command == "switch":
            argv += ["--wheelhouse", str(stacks.wheelhouse)]
        if command != "show" and health_check:
            argv += ["--health-cmd", health, "--health-timeout", "2"]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)

    labwright.venv, labwright.root = venv, root  # type: ignore[attr-defined]
    return labwright


def test_dry_changes_nothing_and_a_new_path_needs_create(run):
    dry = run("switch", "--to", "standin-2.9", "--create", "--dry")
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing is changed" in dry.stdout and "swap:" in dry.stdout
    assert not run.root.exists() and not os.path.lexists(run.venv)
    missing = run("switch", "--to", "standin-2.9")
    assert missing.returncode == 2 and "--create" in missing.stderr and missing.stderr.count("\n") == 1


@pytest.mark.smoke  # real pip and venvs: scripts/test --quick
def test_switch_refuse_roll_back_and_show(run):
    first = run("switch", "--to", "standin-2.9", "--create", health_check=False)
    assert first.returncode == 0, first.stderr
    planned = run("switch", "--to", "standin-2.10", "--dry", "--json")
    assert planned.returncode == 0, planned.stderr
    assert_documented("stack switch", json.loads(planned.stdout), variant=1)
    switched = run("switch", "--to", "standin-2.10", "--json")
    assert switched.returncode == 0, switched.stderr
    assert_documented("stack switch", json.loads(switched.stdout))
    assert json.loads(switched.stdout)["changed"] is True
    two_ten = os.readlink(run.venv)
    again = run("switch", "--to", "standin-2.10")
    assert again.returncode == 0 and "nothing to do" in again.stdout

    broken = run("switch", "--to", "standin-2.10-mislabelled")
    assert broken.returncode == 1 and "refused before the swap" in broken.stderr
    assert os.readlink(run.venv) == two_ten

    unhealthy = run("switch", "--to", "standin-2.11")
    assert unhealthy.returncode == 1 and "rolled back by itself to stack standin-2.10" in unhealthy.stderr
    assert os.readlink(run.venv) == two_ten

    planned = run("rollback", "--dry", "--json")
    assert planned.returncode == 0, planned.stderr
    assert_documented("stack switch", json.loads(planned.stdout))  # "as stack switch", dry: true
    assert json.loads(planned.stdout)["dry"] is True and os.readlink(run.venv) == two_ten
    back = run("rollback", "--json")
    assert back.returncode == 0, back.stderr
    assert_documented("stack switch", json.loads(back.stdout))
    assert json.loads(back.stdout)["current"]["stack"] == "standin-2.9"
    assert "/standin-2.9-" in os.readlink(run.venv)
    shown = run("show", "--json")
    assert shown.returncode == 0, shown.stderr
    envs = json.loads(shown.stdout)["environments"]
    assert [(e["role"], e["stack"], e["ok"]) for e in envs] == [("current", "standin-2.9", True),
                                                                 ("previous", "standin-2.10", True)]
    assert {p["package"]: p["verdict"] for p in envs[0]["packages"]} == {"torch": "ok", "standin-attn": "ok"}
    text = run("show")
    assert "current: stack standin-2.9" in text.stdout and "standin_attn._C: ok" in text.stdout
