"""`labwright guest snapshot|snapshots|restore` refuse bad input before any request: exit 2, one line naming the
input and the fix, no traceback. (Refusals that need a guest are tested on the lab: tests/integration/
test_snapshots_lxd.py and test_snapshots_pve_simulator.py.)"""

from __future__ import annotations

import pytest

from labwright.cli import guest, guest_snapshots, main


@pytest.fixture(autouse=True)
def registered():
    guest_snapshots.register(guest.app)
    guest_snapshots.register(guest.app)  # a second call adds nothing
    assert [c.name for c in guest.app.registered_commands].count("snapshot") == 1


@pytest.mark.parametrize("args, needles", [
    (["guest", "snapshot", "llm_1"], ["'llm_1'", "@lxd/NAME"]),
    (["guest", "snapshot", "@lxd/9bad"], ["'9bad'", "starting with a letter"]),
    (["guest", "snapshots", "@pct/pve1/42"], ["VMID '42'", "100"]),
    (["guest", "restore", "@ssh/host"], ["'@ssh/host'", "@pct/NODE/VMID"]),
    (["guest", "snapshot", "@lxd/llm1", "--name", "has space"], ["'has space'", "--name"]),
    (["guest", "snapshot", "@lxd/llm1", "--name", "labwright-x"], ["'labwright-x'", "--name"]),
    (["guest", "snapshot", "@lxd/llm1", "--keep", "0"], ["--keep 0", "keep 1 to 100"]),
    (["guest", "snapshot", "@pct/pve1/101", "--data", "proxmox_api_url"], ["--data 'proxmox_api_url'",
                                                                           "KEY=VALUE"]),
    (["guest", "snapshot", "@lxd/llm1", "--keep", "x"], ["--keep", "integer"]),
    # the node's SSH for a running container's run lock: checked before the API is asked anything
    (["guest", "restore", "@pct/pve1/101", "--force", "-y", "--data", "proxmox_api_url=https://127.0.0.1:9",
      "--data", "ssh_port=abc"], ["--data 'ssh_port=abc'", "whole number"]),
])
def test_refused_before_any_request(args, needles, capsys, monkeypatch):
    monkeypatch.setenv("LXD_DIR", "/nonexistent-no-daemon-here")  # a request would fail differently (exit 1)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", "root@pam!labwright")
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "not-used")
    for proxy in ("https_proxy", "HTTPS_PROXY"):  # nothing listens there: a request would be exit 1, not 2
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labwright: error: "), err
    assert "Traceback" not in err + out and out == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
