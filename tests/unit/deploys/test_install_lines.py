"""The install steps' shell lines, run by sh: a package index that cannot be reached is one line naming what
failed and the data key, after the tool's own last lines."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from labwright.deploys.common import pip_install


def test_pip_that_cannot_reach_its_index_is_one_line(tmp_path: Path) -> None:
    pip = tmp_path / "pip"
    pip.write_text("#!/bin/sh\nfor i in 1 2 3 4 5 6; do echo \"WARNING: Retrying ($i) after connection broken\"; "
                   "done; echo 'ERROR: No matching distribution found for litellm[proxy]==1.80.0'; exit 1\n")
    pip.chmod(0o755)
    line = pip_install(str(pip), "'litellm[proxy]==1.80.0'", "litellm[proxy]==1.80.0", "http://127.0.0.1:9/simple",
                       "litellm_find_links", where="@lxd/gw")
    result = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == ("labwright: cannot install litellm[proxy]==1.80.0 from http://127.0.0.1:9/simple: pip failed "
                         "(see above); check @lxd/gw's network or litellm_find_links, then re-run (the service was "
                         "not restarted)")
    assert lines[-2] == "ERROR: No matching distribution found for litellm[proxy]==1.80.0"
    assert len(lines) == 5   # pip's last four lines, then ours


def test_pip_that_succeeds_is_quiet(tmp_path: Path) -> None:
    pip = tmp_path / "pip"
    pip.write_text("#!/bin/sh\necho installed\nexit 0\n")
    pip.chmod(0o755)
    result = subprocess.run(["sh", "-c", pip_install(str(pip), "x", "x", "PyPI", "k", where="h")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == "" and result.stdout == ""
