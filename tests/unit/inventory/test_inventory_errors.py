"""A bad inventory is one line naming the file (and the user's own line), exit 2, from every command that reads one.

Before labwright.inventory, an inventory calling ``sys.exit(0)`` ended ``cluster doctor``, ``guest plan`` and
``lab up`` with status 0 and no output (issue 16), and a raise showed labwright's frames, not the user's line.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.inventory import load_inventory
from support.cli_child import run_cli

# Each command that reads an inventory, as argv with {inv} for the path.
COMMANDS = {
    "lab up": ["lab", "up", "-i", "{inv}"],
    "lab status": ["lab", "status", "-i", "{inv}"],
    "guest plan": ["guest", "plan", "-i", "{inv}"],
    "guest show": ["guest", "show", "-i", "{inv}"],
    "cluster doctor": ["cluster", "doctor", "-i", "{inv}"],
}


def labwright(cli_env: dict[str, str], command: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    argv = [arg.replace("{inv}", str(inventory)) for arg in COMMANDS[command]]
    return run_cli(argv, env=cli_env, cwd=inventory.parent, timeout=120)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("labwright: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


RAISES = "lab = ['@lxd/a']\nsettings = {}\nport = settings['port']\n"
EXITS = "import sys\nlab = ['@lxd/a']\nsys.exit(0)\n"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_inventory_that_exits_0_is_an_error_not_success(tmp_path, cli_env, command):
    inventory = tmp_path / "inv.py"
    inventory.write_text(EXITS)
    line = one_error_line(labwright(cli_env, command, inventory))
    assert f"inventory {inventory}: line 3 `sys.exit(0)`: calls sys.exit(0)" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_inventory_that_raises_shows_the_users_line(tmp_path, cli_env, command):
    inventory = tmp_path / "inv.py"
    inventory.write_text(RAISES)
    line = one_error_line(labwright(cli_env, command, inventory))
    assert f"inventory {inventory}: line 3 `port = settings['port']`: KeyError: 'port'; fix the inventory" in line
    assert "labwright/" not in line and "pyinfra" not in line


@pytest.mark.parametrize(("files", "fragment"), [
    ({"inv.py": "lab = [\n  '@lxd/a',\n"}, "inv.py: line 1: '[' was never closed; fix the Python syntax"),
    ({"inv.py": b"lab = ['@lxd/a']\n# caf\xe9\n"},
     "inv.py: line 2: byte 0xe9 is not UTF-8 text; save the file as UTF-8"),
    ({"inv.py": "import sys\nsys.exit()\n"}, "line 2 `sys.exit()`: calls sys.exit(); an inventory defines groups"),
    ({"inv.py": "raise SystemExit(3)\n"}, "line 1 `raise SystemExit(3)`: calls sys.exit(3)"),
    # os._exit would end labwright at once with that status and no output; an `except Exception` cannot swallow it
    ({"inv.py": "import os\ntry:\n    os._exit(0)\nexcept Exception:\n    pass\n"},
     "line 3 `os._exit(0)`: calls os._exit(0); an inventory defines groups and must not exit"),
    ({"inv.py": "import nosuchmodule_xyz\n"}, "line 1 `import nosuchmodule_xyz`: ModuleNotFoundError"),
    ({"inv.py": "g = ['@pct/pve1']\n"}, "@pct/pve1: expected @pct/NODE/VMID, e.g. @pct/pve1/101"),
    ({"inv.py": "g = ['@pct/pve1/99']\n"},
     "@pct/pve1/99: VMID '99' is not a Proxmox container id (an integer from 100 to 999999999)"),
    ({"inv.py": "g = ['@pct/pve1/1000000000']\n"}, "VMID '1000000000' is not a Proxmox container id"),
    ({"inv.py": "g = ['@pct/pve1/0101']\n"}, "VMID '0101' is not a Proxmox container id"),
    ({"inv.py": "g = ['@pct//101']\n"}, "NODE '' is not a node name"),
    ({"inv.py": "g = ['@pct']\n"}, "@pct needs a node and a container id"),
    ({"inv.py": "g = ['@lxd/1bad']\n"}, "@lxd/1bad: '1bad' is not a valid container name"),
    ({"inv.py": "g = ['@incus/remote:bad_name']\n"}, "'bad_name' is not a valid container name"),
    ({"inv.py": "g = ['@nosuch/x']\n"}, "Invalid connector: nosuch"),
    ({"inv.py": "g = (['@lxd/a'], 'not a dict')\n"}, "pyinfra cannot read its groups"),
    ({"inv.py": "g = ['@lxd/a']\n", "group_data/all.py": "x = 1\ny = x / 0\n"},
     "group_data/all.py: line 2 `y = x / 0`: ZeroDivisionError: division by zero"),
    ({"inv.py": "import helper\ng = helper.hosts()\n",
      "helper.py": "def hosts():\n    raise RuntimeError('no hosts file')\n"},
     "helper.py: line 2 `raise RuntimeError('no hosts file')`: RuntimeError: no hosts file"),
])
def test_bad_inventories_are_one_line_exit_2(tmp_path, cli_env, files, fragment):
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            (tmp_path / name).write_text(content)
    line = one_error_line(labwright(cli_env, "guest plan", tmp_path / "inv.py"))
    assert fragment in line and f"inventory {tmp_path / 'inv.py'}" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_inventory_is_one_line(tmp_path, cli_env, command):
    line = one_error_line(labwright(cli_env, command, tmp_path / "nope.py"))
    assert f"{tmp_path / 'nope.py'}: no such file" in line


def test_a_directory_is_not_an_inventory(tmp_path):
    with pytest.raises(BadInput, match="not a file"):
        load_inventory(tmp_path)


def test_loading_twice_reads_the_file_again(tmp_path):
    # No compiled-code cache keyed by file name (pyinfra_cli keeps one): an edited inventory is re-read.
    path = tmp_path / "inv.py"
    path.write_text("g = ['@lxd/a']\n")
    assert [h.name for h in load_inventory(path, cwd=tmp_path)] == ["@lxd/a"]
    path.write_text("g = ['@lxd/b']\n")
    assert [h.name for h in load_inventory(path, cwd=tmp_path)] == ["@lxd/b"]


@pytest.mark.parametrize("source", ["lab = ['@lxd/a']\n", "import os\nos._exit(1)\n", "raise ValueError('x')\n"])
def test_os_exit_is_the_real_one_again_after_an_inventory_loads(tmp_path, source):
    import os

    from labwright import inventory

    real = os._exit
    path = tmp_path / "inv.py"
    path.write_text(source)
    with contextlib.suppress(inventory._UserCodeFailed):
        inventory._exec_file(str(path))
    assert os._exit is real


@pytest.mark.parametrize(("source", "where"), [
    ('lab = [("@lxd/web", {"guest": {"clone": "a"}}), ("@lxd/web", {"guest": {"image": "b"}})]', "in group lab"),
    ('a = [("@lxd/web", {"x": 1})]\nb = [("@lxd/web", {"y": 2})]', "in groups a and b"),
])
def test_a_host_given_its_own_data_twice_is_refused(tmp_path, source, where):
    """pyinfra keeps the last data of a host listed twice with data of its own and drops the first silently (sweep at
    2b91fd1: a guest declared with clone and again with image was planned from the second alone)."""
    path = tmp_path / "inv.py"
    path.write_text(source + "\n")
    with pytest.raises(BadInput) as caught:
        load_inventory(path)
    assert f"host @lxd/web is given data of its own twice ({where})" in str(caught.value)


def test_a_host_in_several_groups_without_data_of_its_own_loads(tmp_path):
    path = tmp_path / "inv.py"
    path.write_text('a = [("@lxd/web", {"x": 1})]\nb = (["@lxd/web"], {"y": 2})\nc = ["@lxd/web"]\n')
    [host] = load_inventory(path)
    assert host.data["x"] == 1 and host.data["y"] == 2
