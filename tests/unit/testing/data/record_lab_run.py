"""Record a real ``pyinfra --json`` run on two lab containers, for tests/unit/testing/test_pyinfra_output.py.

    .venv/bin/python tests/unit/testing/data/record_lab_run.py

Copies the test lab's template into two containers (labwright.testing.lab_fixture), marks the second one so an
operation fails there, runs ``deploys``-style operations on both at once through the @lxd connector, and writes
pyinfra's stdout (the --json line) to lab_two_hosts.json and its stderr (the log) to lab_two_hosts.log, then
deletes the containers.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labwright.testing.lab_fixture import ensure_test_lab
from labwright.testing.pyinfra_output import pyinfra_command, tool_env

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
DEPLOY = """\
from io import StringIO
from pyinfra.operations import files, server
files.put(name="Put the motd", src=StringIO("labwright --json\\n"), dest="/etc/motd")
files.directory(name="Keep /srv", path="/srv")
server.shell(name="Fails where /etc/lw-fail exists", commands=["test ! -e /etc/lw-fail"])
server.shell(name="After the failure", commands=["true"])
"""


def main() -> int:
    lab = ensure_test_lab()
    names = [lab.fresh("lwjson"), lab.fresh("lwjson")]
    try:
        subprocess.run(["lxc", "exec", names[1], "--", "touch", "/etc/lw-fail"], check=True)
        with tempfile.TemporaryDirectory() as tmp:
            deploy = Path(tmp) / "deploy.py"
            deploy.write_text(DEPLOY)
            cmd = pyinfra_command(",".join(f"@lxd/{name}" for name in names), str(deploy))
            start = time.monotonic()
            proc = subprocess.run(cmd, cwd=REPO, env=tool_env(), capture_output=True, text=True, timeout=600)
            seconds = time.monotonic() - start
        (HERE / "lab_two_hosts.json").write_text(proc.stdout)
        (HERE / "lab_two_hosts.log").write_text(proc.stderr)
        print(f"exit {proc.returncode} in {seconds:.1f}s; hosts {names} (the second fails)")
    finally:
        for name in names:
            lab.remove(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
