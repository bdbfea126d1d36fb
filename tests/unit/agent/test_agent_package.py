"""labwright's agent: standard library only, built reproducibly, pushed to a host once (no lab: this machine is the
host, through hosts.local, with the agent's directory moved under the test's own)."""

from __future__ import annotations

import ast
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from labwright.agent import zipapp
from labwright.hosts import agent as host_agent
from labwright.hosts.local import LocalHost

AGENT = Path(zipapp.__file__).resolve().parent
# What the agent may import besides the standard library: itself, labwright's exceptions and the run lock (both in
# the zipapp, their top level stdlib only too).
OWN = ("labwright.agent", "labwright.errors", "labwright.guestlock")


def imports(path: Path, top_only: bool = False) -> list[str]:
    """The modules ``path`` imports (``from labwright import x`` as ``labwright.x``); ``top_only``: at its top."""
    tree = ast.parse(path.read_text())
    names = []
    for node in (tree.body if top_only else ast.walk(tree)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "labwright":
            names += [f"labwright.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


# guestlock.py's controller half imports labwright (hosts, shell) inside its functions; what the guest runs of it
# needs its top level alone (the lock subcommand calls its _main).
@pytest.mark.parametrize(("path", "top_only"), [*((p, False) for p in sorted(AGENT.glob("*.py"))),
                                                (AGENT.parent / "errors.py", False),
                                                (AGENT.parent / "guestlock.py", True)],
                         ids=lambda p: getattr(p, "name", ""))
def test_the_agent_imports_only_the_standard_library(path, top_only):
    for name in imports(path, top_only):
        top = name.split(".")[0]
        assert top in sys.stdlib_module_names or top == "__future__" or name.startswith(OWN), \
            f"{path.name} imports {name}: a host has python3 alone, the agent must run there"


def test_every_agent_module_is_in_the_zipapp():
    names = zipfile.ZipFile(io.BytesIO(zipapp.agent()[0])).namelist()
    assert names[0] == "__main__.py"
    assert {f"labwright/agent/{p.name}" for p in AGENT.glob("*.py")} | {"labwright/errors.py",
                                                                        "labwright/guestlock.py"} <= set(names)


def test_same_sources_same_sha256(tmp_path):
    files = [(name, path.read_bytes()) for name, path in zipapp.sources()]
    first, second = zipapp.build(files), zipapp.build(list(reversed(files)))
    assert first == second == zipapp.agent()[0]
    changed = zipapp.build([*files[:-1], (files[-1][0], files[-1][1] + b"\n# changed\n")])
    assert hashlib.sha256(changed).digest() != hashlib.sha256(first).digest()
    assert zipapp.remote_path() == f"/usr/local/lib/labwright/agent-{zipapp.agent()[1][:12]}.pyz"


def test_the_zipapp_runs_in_a_bare_interpreter(tmp_path):
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(zipapp.agent()[0])
    # -I -S: no site-packages, no labwright installed: what a guest's python3 has
    proc = subprocess.run([sys.executable, "-I", "-S", str(pyz), "nothing"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("labwright: agent: subcommand 'nothing' unknown")
    env_file = tmp_path / "master.env"
    env_file.write_text("LITELLM_MASTER_KEY=sk-1234\n")
    proc = subprocess.run([sys.executable, "-I", "-S", str(pyz), "default-keys", '{"sk-1234": "public"}',
                           str(env_file)], capture_output=True, text=True)
    assert proc.returncode == 0 and '"variable": "LITELLM_MASTER_KEY"' in proc.stdout, proc.stderr


@pytest.fixture
def host_dir(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the agent lands in a root-owned directory: run as root")
    directory = tmp_path / "lib" / "labwright"
    monkeypatch.setattr(zipapp, "REMOTE_DIR", str(directory))
    return directory


def test_pushed_once_then_reused(host_dir):
    host = LocalHost()
    path = Path(host_agent.ensure(host))
    assert path.parent == host_dir and path.name == f"agent-{zipapp.agent()[1][:12]}.pyz"
    assert path.read_bytes() == zipapp.agent()[0]
    stat = path.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (0, 0, 0o644)
    assert host_dir.stat().st_mode & 0o7777 == 0o755
    assert Path(host_agent.ensure(LocalHost())) == path  # another look (a new host object) finds it there
    again = path.stat()
    assert (again.st_ino, again.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)  # not written a second time
    path.unlink()
    assert Path(host_agent.ensure(host)) == path and not path.exists()  # the same host object is not asked again
    result = host_agent.run(LocalHost(), "restart")
    assert result.rc == 2 and result.stderr.strip() == "labwright: usage: restart UNIT"


def test_a_changed_or_foreign_agent_is_replaced(host_dir):
    path = Path(host_agent.ensure(LocalHost()))
    path.write_bytes(b"print('not the agent')\n")
    assert Path(host_agent.ensure(LocalHost())).read_bytes() == zipapp.agent()[0]
    os.chown(path, 65534, 65534)  # the right bytes, but someone else's file: root must not run it
    host_agent.ensure(LocalHost())
    assert (path.stat().st_uid, path.read_bytes()) == (0, zipapp.agent()[0])


def test_the_default_keys_fact_runs_the_agents_scan_on_its_own(tmp_path):
    """The fact (run before any operation could push the agent) sends the agent module's source: it runs alone."""
    from labwright.facts.default_keys import DefaultKeysIn

    env_file = tmp_path / "pipelines.env"
    env_file.write_text("# PIPELINES_API_KEY=sk-1234\nPIPELINES_API_KEY='0p3n-w3bu!'\n")
    command = DefaultKeysIn().command([str(env_file), str(tmp_path / "missing")])
    proc = subprocess.run(["sh", "-c", command.replace("python3", f"{sys.executable} -I -S", 1)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert DefaultKeysIn().process(proc.stdout.splitlines()) == [
        {"path": str(env_file), "variable": "PIPELINES_API_KEY", "why": "Open WebUI pipelines' default API key"}]


def test_the_check_after_a_pyinfra_upload_refuses_other_bytes(host_dir):
    from labwright.operations.agent import verify_command

    path = Path(host_agent.ensure(LocalHost()))
    assert subprocess.run(["sh", "-c", verify_command()], capture_output=True, text=True).returncode == 0
    path.write_bytes(zipapp.agent()[0][:-1])  # a transfer cut one byte short
    proc = subprocess.run(["sh", "-c", verify_command()], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith(f"labwright: {path} is not the agent labwright sent")
