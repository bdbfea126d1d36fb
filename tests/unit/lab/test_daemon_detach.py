"""labwright.lab.daemon._detach: how the LXD daemon is started where systemd is not PID 1."""

from __future__ import annotations

import os

from labwright.lab.daemon import _detach
from labwright.testing.waiting import wait_for


def test_the_daemon_does_not_keep_the_callers_directory(tmp_path, monkeypatch):
    """Started from a directory that is removed later (a clone, a temp dir), the daemon and its children must not
    sit in it: LXD's rsync for an instance copy then fails with getcwd(): No such file or directory."""
    here = tmp_path / "checkout"
    here.mkdir()
    monkeypatch.chdir(here)
    out = tmp_path / "out"
    _detach(["sh", "-c", f"pwd > {out}.part; cut -d' ' -f6 /proc/$$/stat >> {out}.part; echo $$ >> {out}.part; "
                         f"mv {out}.part {out}"], tmp_path / "log")
    wait_for("the detached process to write where it runs", out.exists, timeout=60)
    cwd, sid, pid = out.read_text().split()
    assert cwd == "/"
    assert sid == pid and int(sid) != os.getsid(0)  # the leader of its own session
