"""The LXD guest backend against the real local daemon: create, update, no-change re-apply (no write sent),
destroy; GPU passthrough with fake mknod nodes; `required` semantics; bad input leaves nothing behind.

Guests are copies of the test lab's template on its profile/pool/bridge, named ``lwg-<hex>``.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator

import pytest

from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.gpu.nvidia.boot_unit import BOOT_UNIT, BOOT_UNIT_PATH
from labwright.guests.base import backend_for
from labwright.guests.lxd import LxdBackend
from labwright.guests.model import Change, GuestSpec, spec_from_data
from labwright.lxd.client import LxdClient
from labwright.testing.lab_fixture import TEMPLATE
from support.fake_nvidia import fake_root_in_dev, make_fake_nvidia_host, reboot, remove_fake_root, run_boot_unit
from support.gpu_host import TreeGpuHost

pytestmark = pytest.mark.lab


class CountingClient(LxdClient):
    """The real client, recording every request it sends (to prove a no-change apply writes nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def raw(self, method, path, body=None, headers=None, params=None):  # type: ignore[override]
        self.sent.append((method, path))
        return super().raw(method, path, body=body, headers=headers, params=params)

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.sent if m != "GET"]


@pytest.fixture
def client(lab) -> Iterator[CountingClient]:
    c = CountingClient()
    yield c
    c.close()


@pytest.fixture
def guest_names(lab) -> Iterator[list[str]]:
    """Names for this test's guests; whatever exists at the end is removed."""
    names: list[str] = []
    yield names
    for name in names:
        lab.remove(name)


def new_name(names: list[str]) -> str:
    name = f"lwg-{secrets.token_hex(3)}"
    names.append(name)
    return name


def guest(name: str, **data) -> GuestSpec:
    base = {"backend": "lxd", "clone": TEMPLATE, "profiles": ["lwtest"]}
    return spec_from_data(f"@lxd/{name}", {**base, **data}, source="test-inv.py")


def run_in(client: LxdClient, name: str, *command: str) -> str:
    result = client.exec(name, list(command))
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.mark.smoke  # a guest on the real LXD: scripts/test --quick
def test_create_update_noop_and_destroy(lab, client, guest_names, tmp_path):
    name = new_name(guest_names)
    backend = LxdBackend(client)
    spec = guest(name, cores=1, memory="512M")

    plan = backend.plan(spec)
    assert plan.action == "create" and client.writes() == []
    assert client.instance_or_none(name) is None  # plan touches nothing

    made = backend.apply(spec)
    assert made[0].what == "instance" and made[-1].what == "state"
    inst = client.instance(name)
    assert inst["status"] == "Running"
    assert inst["config"]["limits.memory"] == "512MiB" and inst["config"]["limits.cpu"] == "1"
    assert inst["config"]["security.privileged"] == "false"
    # The clone does not inherit the template's lab membership (`lab down` must not count it as its own).
    assert "user.labwright.lab" not in inst["config"] and inst["config"]["user.labwright.guest"] == name

    # No change: nothing returned, and nothing but reads sent.
    client.sent.clear()
    assert backend.apply(spec) == []
    assert client.writes() == [] and len(client.sent) <= 2

    # Update: more memory, a read-only mount, nesting.
    shared = tmp_path / "models"
    shared.mkdir()
    (shared / "model.txt").write_text("weights\n")
    os.chmod(tmp_path, 0o755)
    updated = guest(name, cores=1, memory="1G", features={"nesting": True},
                    mounts=[{"host": str(shared), "guest": "/models", "readonly": True}])
    assert {c.what for c in backend.plan(updated).changes} >= {
        "config limits.memory", "config security.nesting", "device mount-models"}
    assert client.instance(name)["config"]["limits.memory"] == "512MiB"  # plan again touched nothing
    changes = backend.apply(updated)
    assert {c.what for c in changes} == {"config limits.memory", "config security.nesting", "device mount-models",
                                         "config user.labwright.devices"}
    config = client.instance(name)["config"]
    assert config["limits.memory"] == "1024MiB" and config["security.nesting"] == "true"
    assert run_in(client, name, "cat", "/models/model.txt") == "weights\n"
    assert "ro" in run_in(client, name, "sh", "-c", "grep ' /models ' /proc/mounts").split()[3].split(",")

    before = client.instance(name)
    client.sent.clear()
    assert backend.apply(updated) == []
    assert client.writes() == []
    assert client.instance(name)["config"] == before["config"]

    # Dropping the mount from the spec removes the device labwright made, and only that.
    client.request("PATCH", f"/1.0/instances/{name}", {"devices": {
        "theirs": {"type": "disk", "source": str(shared), "path": "/theirs"}}})
    back = guest(name, cores=1, memory="1G", features={"nesting": True})
    assert {c.what for c in backend.apply(back)} == {"device mount-models", "config user.labwright.devices"}
    assert set(client.instance(name)["devices"]) == {"theirs"}

    show = backend.show(back)
    assert show["exists"] and show["status"] == "Running" and show["in_sync"] and show["managed"]

    assert backend.destroy(back) == [Change("instance", name, None)]
    assert client.instance_or_none(name) is None
    assert backend.destroy(back) == []


def test_destroy_refuses_an_instance_labwright_did_not_make(lab, client, make_lab_container):
    name = make_lab_container("lwg")
    with pytest.raises(SafetyCheckFailed, match="was not made by labwright"):
        LxdBackend(client).destroy(guest(name))
    assert client.instance_or_none(name) is not None


def test_gpu_passthrough_with_fake_nodes(lab, client, guest_names):
    root = fake_root_in_dev()
    try:
        make_fake_nvidia_host(root, uvm_major=509, caps_major=511)
        backend = LxdBackend(client, gpu_host=TreeGpuHost(root))
        name = new_name(guest_names)
        spec = guest(name, gpu="nvidia")
        assert backend.nvidia_cards() == 0  # no real GPU here: auto picks unix-char nodes
        backend.apply(spec)
        assert client.instance(name)["status"] == "Running"
        # Not `find -type c`: LXD bind-mounts each node over a plain file, which readdir reports as a file.
        listing = run_in(client, name, "sh", "-c", "for f in /dev/nvidia* /dev/nvidia-caps/*; do "
                                                   "[ -c \"$f\" ] && stat -c '%n %t %T %a %G' \"$f\"; done; true")
        seen = {path: (int(major, 16), int(minor, 16), mode, group)
                for path, major, minor, mode, group in (line.split() for line in listing.splitlines())}
        assert seen == {
            # the host's nodes are 0666 (the driver's default): the guest's are 0660, group video
            "/dev/nvidia0": (195, 0, "660", "video"), "/dev/nvidiactl": (195, 255, "660", "video"),
            "/dev/nvidia-modeset": (195, 254, "660", "video"), "/dev/nvidia-uvm": (509, 0, "660", "video"),
            "/dev/nvidia-uvm-tools": (509, 1, "660", "video"),
            # never widened: capability nodes are read-only on the host (0444), 0440 here
            "/dev/nvidia-caps/nvidia-cap1": (511, 1, "440", "video"),
            "/dev/nvidia-caps/nvidia-cap2": (511, 2, "440", "video"),
        }
        # Who may open the GPU: a user in video gets past the permission check to the (absent) driver, ENXIO;
        # any other user is refused by the mode, EACCES.
        opened = run_in(client, name, "sh", "-c",
                        "useradd --system --no-create-home --groups video lwsvc && "
                        "useradd --system --no-create-home lwother && "
                        "for u in lwsvc lwother; do printf '%s: ' $u; "
                        "setpriv --reuid=$u --regid=$u --init-groups sh -c ': 3<>/dev/nvidia0' 2>&1 | "
                        "sed -n 's/.*: //p' | tail -1; done")
        assert opened.splitlines() == ["lwsvc: No such device or address", "lwother: Permission denied"], opened
        client.sent.clear()
        assert backend.apply(spec) == [] and client.writes() == []

        # A host driver update that gives nvidia-uvm a new major: re-applying moves the guest along.
        for node in ("nvidia-uvm", "nvidia-uvm-tools"):
            (root / "dev" / node).unlink()
        (root / "proc" / "devices").write_text((root / "proc" / "devices").read_text().replace("509", "237"))
        os.mknod(root / "dev" / "nvidia-uvm", 0o666 | 0o020000, os.makedev(237, 0))
        os.mknod(root / "dev" / "nvidia-uvm-tools", 0o666 | 0o020000, os.makedev(237, 1))
        assert {c.what for c in backend.apply(spec)} == {"device nvidia-uvm", "device nvidia-uvm-tools"}
        assert run_in(client, name, "stat", "-c", "%t %T", "/dev/nvidia-uvm").split() == ["ed", "0"]
    finally:
        remove_fake_root(root)


def test_missing_uvm_node_starts_and_gets_the_node_with_the_host_major(lab, client, guest_names):
    root = fake_root_in_dev()
    try:
        make_fake_nvidia_host(root, uvm_major=508, with_uvm=False)
        backend = LxdBackend(client, gpu_host=TreeGpuHost(root))
        name = new_name(guest_names)
        plan = backend.plan(guest(name, gpu="nvidia"))
        assert any("nvidia-modprobe -u -c 0" in note for note in plan.notes)
        backend.apply(guest(name, gpu="nvidia"))
        assert client.instance(name)["status"] == "Running"
        assert run_in(client, name, "stat", "-c", "%t %T", "/dev/nvidia-uvm").split() == ["1fc", "0"]
    finally:
        remove_fake_root(root)


def test_gpu_on_a_host_without_a_driver_is_one_line_and_creates_nothing(lab, client, guest_names, tmp_path):
    backend = LxdBackend(client, gpu_host=TreeGpuHost(tmp_path))
    name = new_name(guest_names)
    with pytest.raises(BadInput) as info:
        backend.apply(guest(name, gpu="nvidia"))
    assert "gpu: nvidia, but this host has no NVIDIA driver" in str(info.value) and "\n" not in str(info.value)
    assert client.instance_or_none(name) is None and client.writes() == []


def test_required_semantics_for_mounts(lab, client, guest_names, tmp_path):
    backend = LxdBackend(client)
    missing = str(tmp_path / "not-there")

    optional = new_name(guest_names)
    backend.apply(guest(optional, mounts=[{"host": missing, "guest": "/data", "required": False}]))
    assert client.instance(optional)["status"] == "Running"

    required = new_name(guest_names)
    with pytest.raises(BadInput) as info:
        backend.apply(guest(required, mounts=[{"host": missing, "guest": "/data"}]))
    assert f"mount source {missing} does not exist" in str(info.value) and "required: false" in str(info.value)
    assert client.instance_or_none(required) is None

    # When the source vanishes after the guest was made, LXD refuses the start; the error is one line.
    source = tmp_path / "data"
    source.mkdir()
    spec = guest(required, mounts=[{"host": str(source), "guest": "/data"}])
    backend.apply(spec)
    backend.stop(spec)
    source.rmdir()
    with pytest.raises(OperationFailed) as failed:
        backend.start(spec)
    assert f"guest {required}: LXD could not start it" in str(failed.value)
    assert "\n" not in str(failed.value)


def test_failed_create_removes_what_it_made(lab, client, guest_names):
    name = new_name(guest_names)
    # `lo` exists, so the plan's checks pass and LXD creates the instance, but it cannot start on it.
    with pytest.raises(OperationFailed) as info:
        LxdBackend(client).apply(guest(name, net={"bridge": "lo"}))
    assert f"guest {name}: LXD could not start it" in str(info.value) and "\n" not in str(info.value)
    assert ("POST", "/1.0/instances") in client.sent
    assert client.instance_or_none(name) is None


@pytest.mark.parametrize(("data", "fragment"), [
    ({"clone": None, "image": "no-such-image"}, "image 'no-such-image' does not exist on LXD local"),
    ({"clone": "no-such-ct"}, "clone source 'no-such-ct' does not exist"),
    ({"clone": None}, "set `image`"),
    ({"profiles": ["lwtest", "no-such-profile"]}, "profile 'no-such-profile' does not exist"),
    ({"net": {"bridge": "nosuchbr0"}}, "bridge 'nosuchbr0' does not exist"),
    ({"rootfs": "nosuchpool:8"}, "storage pool 'nosuchpool' does not exist"),
])
def test_bad_input_against_the_daemon_creates_nothing(lab, client, guest_names, data, fragment):
    name = new_name(guest_names)
    with pytest.raises(BadInput) as info:
        LxdBackend(client).apply(guest(name, **data))
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert client.instance_or_none(name) is None and client.writes() == []


def test_from_an_image_and_dispatch(lab, client, guest_names):
    alias = next(a["name"] for a in client.request("GET", "/1.0/images/aliases", params={"recursion": 1})
                 if a["name"].startswith("labwright/"))
    name = new_name(guest_names)
    spec = guest(name, clone=None, image=alias, start=False)
    backend = backend_for(spec, client=client)
    assert isinstance(backend, LxdBackend)
    assert [c.what for c in backend.apply(spec)][:1] == ["instance"]
    assert client.instance(name)["status"] == "Stopped"
    assert backend.apply(spec) == []
    assert backend.start(spec)[0].after == "Running" and backend.start(spec) == []
    assert backend.stop(spec)[0].after == "Stopped" and backend.stop(spec) == []


def test_gpu_guest_gets_the_boot_unit_and_a_reboot_is_flagged(lab, client, guest_names):
    root = fake_root_in_dev()
    try:
        make_fake_nvidia_host(root, uvm_major=509)
        host = TreeGpuHost(root)
        backend = LxdBackend(client, gpu_host=host)
        name = new_name(guest_names)
        spec = guest(name, gpu="nvidia", start=False)
        plan = backend.plan(spec)
        unit_change = next(c for c in plan.changes if c.what == f"host {BOOT_UNIT}")
        assert "nvidia-modprobe -u -c 0" in unit_change.after and plan.warnings == []
        assert unit_change in backend.apply(spec)
        unit = (root / BOOT_UNIT_PATH.lstrip("/")).read_text()
        assert "lxd.service" in unit and "ExecStart=/usr/bin/nvidia-modprobe -m" in unit
        assert host.ran == [("systemctl", "daemon-reload"), ("systemctl", "enable", BOOT_UNIT),
                            ("systemctl", "restart", BOOT_UNIT)]
        client.sent.clear()
        assert backend.apply(spec) == [] and client.writes() == []

        reboot(root)  # the uvm nodes are gone; so are the MIG capability nodes, which are made on first use too
        shutil.rmtree(root / "dev" / "nvidia-caps")
        plan = LxdBackend(client, gpu_host=TreeGpuHost(root)).plan(spec)
        assert plan.missing_nodes[-2:] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
        assert plan.warnings[0].startswith(f"LXD refuses to start {name} while /dev/nvidia-caps/nvidia-cap1, "
                                           "/dev/nvidia-caps/nvidia-cap2 are missing on this host")
        assert plan.warnings[0].endswith(f"{BOOT_UNIT} makes them at boot: see `systemctl status {BOOT_UNIT}`")
        assert plan.warnings[1].startswith(f"/dev/nvidia-uvm, /dev/nvidia-uvm-tools missing on this host: {name} "
                                           "starts, but CUDA fails inside it")
        run_boot_unit(root, unit)
        assert LxdBackend(client, gpu_host=TreeGpuHost(root)).plan(spec).warnings == []
    finally:
        remove_fake_root(root)
