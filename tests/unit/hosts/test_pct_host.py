"""PctHost: a node Host plus ``pct exec``, run against a fake ``pct`` whose ``exec`` runs the command here (the
"container" is this machine), reached through a LocalHost node with that pct first on PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from labwright.connectors.pct_commands import CT_PATH
from labwright.hosts.local import LocalHost
from labwright.hosts.pct import PctHost

FAKE_PCT = """#!{python}
import json, os, sys
args = sys.argv[1:]
if args[:1] == ["exec"]:
    rest = args[args.index("--") + 1:]
    os.environ["FAKE_PCT_VMID"] = args[1]
    os.execvp(rest[0], rest)
print(json.dumps(args))
"""


@pytest.fixture
def ct(tmp_path: Path) -> PctHost:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "pct"
    script.write_text(FAKE_PCT.format(python=sys.executable))
    script.chmod(0o755)
    node = LocalHost(wrapper=["env", f"PATH={bindir}:{os.environ['PATH']}"], label="node pve1")
    return PctHost(node, 101)


def test_run_goes_through_pct_exec_with_the_ct_path(ct):
    result = ct.run('echo "$FAKE_PCT_VMID $PATH"; exit 3')
    assert (result.rc, result.stdout) == (3, f"101 {CT_PATH}\n")
    assert ct.label == "CT 101 on node pve1"


def test_an_argv_arrives_word_for_word(ct):
    result = ct.run(["printf", "%s|", "a b", "$HOME", "it's"])
    assert result.ok and result.stdout == "a b|$HOME|it's|"


def test_put_and_get_round_trip_through_the_container(ct, tmp_path):
    target = tmp_path / "file with space"
    data = bytes(range(256)) * 4
    ct.put(data, str(target), mode=0o640)
    assert target.read_bytes() == data and (target.stat().st_mode & 0o777) == 0o640
    assert ct.get(str(target)) == data
    with pytest.raises(OSError, match="cannot read"):
        ct.get(str(tmp_path / "missing"))
