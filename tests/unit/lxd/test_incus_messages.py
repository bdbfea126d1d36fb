"""Every message an ``@incus/`` host can meet names Incus and its client (``incus``), never LXD or ``lxc``: the
snapshot backend (freezes, thaws, storage, a snapshot past its deadline), the client's operation deadline and
remotes, the guest model and backend, gpu check, desktop check and the probe's guest. They are walked against the
Incus double (tests/support/lxd6_double.py, ``flavour="incus"``: Incus's answers as lxc/incus's source gives them),
reached the way the commands reach it: ``INCUS_SOCKET`` and ``resolve_endpoint(flavour="incus")``. The same messages
for an ``@lxd/`` host keep saying LXD (their own tests: test_operation_deadline.py, test_remotes.py, ...)."""

from __future__ import annotations

import re

import pytest

from labwright.cli import main
from labwright.errors import LabwrightError
from labwright.guests.lxd import LxdBackend
from labwright.guests.model import spec_from_data
from labwright.hostnames import BadHostName, LxdName, lxd_guest
from labwright.lxd.client import Endpoint, LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.snapshots.lxd import LxdSnapshots, freeze_note
from support.lxd6_double import Lxd6Double

#: what an Incus user must not read: the other daemon's name or its client
LXD_WORDS = re.compile(r"\bLXD\b|`lxc |\(lxc ")


def names_incus_only(message: str) -> str:
    assert "Incus" in message or "`incus " in message, message
    assert not LXD_WORDS.search(message), message
    return message


@pytest.fixture
def incus(tmp_path, monkeypatch):
    """The Incus double on the socket ``INCUS_SOCKET`` names (as the @incus commands find it), and a client of it
    as ``@incus/`` hosts get one."""
    sock = str(tmp_path / "incus.socket")
    double = Lxd6Double(flavour="incus", version="6.0.4").serve(sock)
    monkeypatch.setenv("INCUS_SOCKET", sock)
    monkeypatch.setenv("INCUS_CONF", str(tmp_path / "no-client-config"))
    endpoint, project = resolve_endpoint(None, flavour="incus")
    client = LxdClient(endpoint, project=project, timeout=10)
    yield double, client
    client.close()
    double.close()


def add(double: Lxd6Double, name: str, status: str = "Running", pool: str = "default") -> None:
    double.instances[name] = {"name": name, "status": status, "status_code": 103, "type": "container",
                              "config": {}, "expanded_config": {}, "devices": {}, "profiles": ["default"],
                              "expanded_devices": {"root": {"type": "disk", "path": "/", "pool": pool}}}


def raised(call, *args, **kwargs) -> str:
    with pytest.raises(LabwrightError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def test_the_endpoint_of_an_incus_host_is_incus_whatever_its_socket(incus, tmp_path):
    _, client = incus
    assert (client.endpoint.title, client.endpoint.tool) == ("Incus", "incus")
    # a socket an @incus remote names at any path, and an HTTPS one: the URL does not say which daemon it is
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yml").write_text("remotes:\n  other:\n    addr: unix:///srv/odd.socket\n"
                                                  "  far:\n    addr: https://127.0.0.1:8443\n")
    (tmp_path / "conf" / "client.crt").write_text("cert")
    for remote in ("other", "far"):
        endpoint, _ = resolve_endpoint(remote, tmp_path / "conf", flavour="incus")
        assert (endpoint.title, endpoint.tool) == ("Incus", "incus")
    assert resolve_endpoint("far", tmp_path / "conf")[0].title == "LXD"  # the lxc client's remote: LXD's


def test_snapshot_messages_name_incus(incus):
    double, client = incus
    snaps = LxdSnapshots(LxdName("incus", None, "g1"), client=client, snapshot_timeout=1)
    add(double, "g1", "Frozen")
    notes = [freeze_note(client, "g1", "Frozen"), snaps.thaw_left_frozen()]
    assert "`incus start g1` thaws it" in notes[0] and "`incus pause`" in notes[1] and "thawed it" in notes[1]
    double.hold_operations = True  # a snapshot that runs past its deadline, holding the guest
    message = raised(snaps.create, "s1", "")
    assert "Incus goes on copying" in message and "`incus operation show " in message
    double.instances["g1"]["status"] = "Freezing"
    notes.append(freeze_note(client, "g1", "Freezing"))
    assert "Freezing by Incus's running Snapshotting instance" in notes[-1]
    double.finish()
    add(double, "g2", pool="shared")
    double.pools["shared"] = {"name": "shared", "driver": "cephfs"}
    refused = LxdSnapshots(LxdName("incus", None, "g2"), client=client).support()
    assert not refused.supported
    missing = LxdSnapshots(LxdName("incus", None, "nosuch"), client=client).missing()
    for text in [*notes, message, refused.reason, missing]:
        names_incus_only(text)


def test_client_deadline_and_remote_messages_name_incus(incus, tmp_path):
    double, client = incus
    double.hold_operations = True
    op = client.request("POST", "/1.0/instances", {"name": "g3"}, wait=False)
    waited = raised(client.wait_operation, f"/1.0/operations/{op['id']}", timeout=1)
    assert f"Incus operation {op['id']} still running" in waited
    double.finish()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yml").write_text("remotes:\n  plain:\n    addr: http://127.0.0.1:8080\n"
                                     "  far:\n    addr: https://127.0.0.1:8443\n")
    remotes = [raised(resolve_endpoint, name, conf, flavour="incus") for name in ("nas", "plain", "far")]
    assert "`incus remote add nas https://HOST:8443`" in remotes[0]
    remotes.append(raised(Endpoint(url="http://127.0.0.1:8443", daemon="Incus").address))
    for text in [waited, *remotes]:
        names_incus_only(text)


def test_guest_model_and_backend_messages_name_incus(incus):
    _, client = incus
    texts = [raised(spec_from_data, "@incus/web", {"backend": "proxmox", "node": "pve1", "vmid": 101}),
             raised(spec_from_data, "@incus/web", {"name": "bad_name"})]
    backend = LxdBackend(client)
    for data in ({"image": "nosuch"}, {}, {"clone": "nosuch"}):
        texts.append(raised(backend.plan, spec_from_data("@incus/web", {"memory": "1G", **data})))
    with pytest.raises(BadHostName) as bad:
        lxd_guest("@incus/$(id)")
    texts.append(str(bad.value))
    assert "(an Incus guest)" in texts[0] and "`incus image list`" in texts[2]
    for text in texts:
        names_incus_only(text)


def test_gpu_desktop_and_probe_guest_messages_name_incus(incus, capsys):
    from labwright.gpu.guest import check_guest
    from labwright.tuning.probe_guest import LxdGuest

    double, client = incus
    add(double, "nogpu")
    add(double, "off", "Stopped")
    texts = [raised(check_guest, "@incus/nosuch"), raised(check_guest, "@incus/nogpu"),
             raised(check_guest, "@incus/far:x"),
             raised(LxdGuest, "@incus/nosuch", client), raised(LxdGuest, "@incus/off", client)]
    assert "in its Incus config" in texts[1] and "`incus start off`" in texts[-1]
    for guest in ("@incus/nosuch", "@incus/off"):
        assert main(["desktop", "check", guest]) == 2
        texts.append(capsys.readouterr().err)
    assert "no such Incus instance (see `incus list`)" in texts[-2] and "`incus start off`" in texts[-1]
    for text in texts:
        names_incus_only(text)
