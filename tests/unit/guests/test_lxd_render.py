"""What an LXD instance should look like for a spec, and the diff against what it is (plain dicts, no daemon)."""

from __future__ import annotations

import os

import pytest

from labwright.errors import BadInput
from labwright.gpu.nvidia.host import GpuHost
from labwright.guests.lxd_render import (
    DEVICES_KEY,
    MARKER_KEY,
    GpuWiring,
    diff,
    mount_device_name,
    render,
    resolve_gpu,
    restart_needed,
)
from labwright.guests.model import spec_from_data
from support.fake_nvidia import make_fake_nvidia_host
from support.host_tree import TreeHost

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def spec(**data):
    return spec_from_data("@lxd/web1", {"backend": "lxd", **data}, source="inv.py")


def instance(config=None, devices=None, profiles=("default",), status="Running"):
    return {"architecture": "x86_64", "config": dict(config or {}), "devices": dict(devices or {}),
            "profiles": list(profiles), "ephemeral": False, "stateful": False, "description": "", "status": status}


def test_render_limits_nesting_privilege_and_mounts():
    desired = render(spec(cores=2, memory="2G", swap=0, features={"nesting": True, "keyctl": True}, onboot=True,
                          mounts=[{"host": "/tank/models", "guest": "/models", "readonly": True},
                                  {"host": "/srv/x", "guest": "/srv/data", "required": False, "name": "data"}]),
                     GpuWiring(), root_pool=None)
    assert desired.config == {
        MARKER_KEY: "web1", "security.privileged": "false", "limits.cpu": "2", "limits.memory": "2048MiB",
        "limits.memory.swap": "false", "security.nesting": "true", "boot.autostart": "true",
        DEVICES_KEY: "data,mount-models",
    }
    assert desired.devices == {
        "mount-models": {"type": "disk", "source": "/tank/models", "path": "/models", "readonly": "true"},
        "data": {"type": "disk", "source": "/srv/x", "path": "/srv/data", "required": "false"},
    }
    assert any("keyctl" in note for note in desired.notes)
    assert desired.profiles is None


def test_render_privileged_rootfs_net_and_raw_config():
    desired = render(spec(unprivileged=False, rootfs="fast:16", profiles=["base", "gpu"],
                          net={"bridge": "lxdbr0", "ip": "10.0.0.5/24", "mtu": 1400},
                          lxd_config={"user.note": "x", "security.idmap.isolated": True}),
                     GpuWiring(), root_pool=None)
    assert desired.config["security.privileged"] == "true"
    assert desired.config["user.labwright.config"] == "security.idmap.isolated,user.note"
    assert desired.config["security.idmap.isolated"] == "true"
    assert desired.devices["root"] == {"type": "disk", "path": "/", "pool": "fast", "size": "16GiB"}
    assert desired.devices["eth0"] == {"type": "nic", "nictype": "bridged", "parent": "lxdbr0", "name": "eth0",
                                       "mtu": "1400", "ipv4.address": "10.0.0.5"}
    assert desired.profiles == ["base", "gpu"]
    # rootfs without a pool takes the profiles' pool, and says so when there is none
    assert render(spec(rootfs=8), GpuWiring(), root_pool="lwtest").devices["root"]["pool"] == "lwtest"
    with pytest.raises(BadInput, match="rootfs needs a storage pool"):
        render(spec(rootfs=8), GpuWiring(), root_pool=None)


def test_features_without_an_lxd_switch_are_refused():
    with pytest.raises(BadInput, match="feature force_rw_sys has no LXD equivalent"):
        render(spec(features={"force_rw_sys": True}), GpuWiring(), None)


def test_mount_device_names():
    assert mount_device_name("/models", None) == "mount-models"
    assert mount_device_name("/srv/llm data", None) == "mount-srv-llm-data"
    assert mount_device_name("/x", "named") == "named"


# --- diff -------------------------------------------------------------------------------------
def test_no_change_when_the_instance_matches_and_volatile_keys_are_ignored():
    s = spec(cores=2, memory="1G", features={"nesting": True})
    desired = render(s, GpuWiring(), None)
    current = instance({**desired.config, "volatile.eth0.hwaddr": "00:16:3e:00:00:01", "image.os": "debian",
                        "volatile.last_state.power": "RUNNING"})
    changes, body = diff(s, current, desired)
    assert changes == []
    assert body["config"]["volatile.eth0.hwaddr"] == "00:16:3e:00:00:01" and body["config"]["image.os"] == "debian"


def test_diff_updates_removes_and_leaves_foreign_devices_alone():
    old = spec(memory="1G", mounts=[{"host": "/a", "guest": "/a"}, {"host": "/b", "guest": "/b"}])
    current = instance({**render(old, GpuWiring(), None).config, "volatile.uuid": "u"},
                       {**render(old, GpuWiring(), None).devices, "theirs": {"type": "disk", "source": "/t",
                                                                              "path": "/t"}})
    new = spec(memory="2G", mounts=[{"host": "/a", "guest": "/a", "readonly": True}], features={"nesting": True})
    changes, body = diff(new, current, render(new, GpuWiring(), None))
    described = {c.what: (c.before, c.after) for c in changes}
    assert described["config limits.memory"] == ("1024MiB", "2048MiB")
    assert described["config security.nesting"] == (None, "true")
    assert described["device mount-b"][1] is None
    assert described["device mount-a"][1]["readonly"] == "true"
    assert "device theirs" not in described
    assert set(body["devices"]) == {"mount-a", "theirs"} and body["config"]["volatile.uuid"] == "u"
    assert restart_needed(changes) == ["security.nesting"]


def test_dropped_raw_config_key_is_removed_but_unknown_keys_stay():
    old = spec(lxd_config={"user.a": "1", "user.b": "2"})
    current = instance({**render(old, GpuWiring(), None).config, "user.someone-else": "x"})
    new = spec(lxd_config={"user.a": "1"})
    changes, body = diff(new, current, render(new, GpuWiring(), None))
    assert {c.what for c in changes} == {"config user.b", "config user.labwright.config"}
    assert "user.b" not in body["config"] and body["config"]["user.someone-else"] == "x"


def test_profiles_and_description_changes():
    s = spec(profiles=["lwtest"], description="llm box")
    changes, body = diff(s, instance(render(s, GpuWiring(), None).config), render(s, GpuWiring(), None))
    assert [c.what for c in changes] == ["profiles", "description"]
    assert body["profiles"] == ["lwtest"] and body["description"] == "llm box"


# --- GPU wiring -------------------------------------------------------------------------------
def test_gpu_none_needs_nothing():
    assert resolve_gpu(spec(), None, 0) == GpuWiring()


def test_no_driver_is_one_clear_line(tmp_path):
    make_fake_nvidia_host(tmp_path, driver=None)
    with pytest.raises(BadInput) as info:
        resolve_gpu(spec(gpu="nvidia"), GpuHost(TreeHost(tmp_path)), 0)
    assert str(info.value).startswith("inv.py: guest web1: gpu: nvidia, but this host has no NVIDIA driver")
    assert "\n" not in str(info.value)


def test_remote_daemon_uses_the_gpu_device_and_needs_a_card():
    wiring = resolve_gpu(spec(gpu="nvidia", nvidia_runtime=True), None, 1)
    assert (wiring.mode, wiring.runtime) == ("gpu", True)
    with pytest.raises(BadInput, match="reports no NVIDIA GPU"):
        resolve_gpu(spec(gpu="nvidia"), None, 0)
    with pytest.raises(BadInput, match="only works for the local daemon"):
        resolve_gpu(spec(gpu="nvidia", gpu_mode="unix-char"), None, 1)


@needs_root
def test_local_auto_without_a_card_lxd_sees_passes_each_node(tmp_path):
    make_fake_nvidia_host(tmp_path, uvm_major=236)
    wiring = resolve_gpu(spec(gpu="nvidia"), GpuHost(TreeHost(tmp_path)), 0)
    assert wiring.mode == "unix-char" and not wiring.runtime
    devices = render(spec(gpu="nvidia"), wiring, None).devices
    assert devices["nvidia0"] == {"type": "unix-char", "source": str(tmp_path / "dev/nvidia0"),
                                  "path": "/dev/nvidia0", "major": "195", "minor": "0", "gid": "44", "mode": "0660"}
    assert devices["nvidiactl"]["minor"] == "255"
    # never others' bits: the host's 0666 becomes 0660, a read-only capability node's 0444 becomes 0440, group video
    assert {name: (d["mode"], d["gid"]) for name, d in devices.items() if d["type"] == "unix-char"} == {
        **{n: ("0660", "44") for n in ("nvidia0", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools")},
        "nvidia-cap1": ("0440", "44"), "nvidia-cap2": ("0440", "44")}
    assert devices["nvidia-uvm"]["major"] == "236" and devices["nvidia-uvm"]["required"] == "false"
    assert devices["nvidia-cap1"]["path"] == "/dev/nvidia-caps/nvidia-cap1"


@needs_root
def test_missing_uvm_is_passed_optional_with_the_major_from_proc_devices(tmp_path):
    make_fake_nvidia_host(tmp_path, uvm_major=510, with_uvm=False)
    wiring = resolve_gpu(spec(gpu="nvidia"), GpuHost(TreeHost(tmp_path)), 0)
    uvm = {n.name: n for n in wiring.nodes}
    assert (uvm["nvidia-uvm"].major, uvm["nvidia-uvm"].minor) == (510, 0)
    assert (uvm["nvidia-uvm-tools"].major, uvm["nvidia-uvm-tools"].minor) == (510, 1)
    assert wiring.preflight == (("nvidia-modprobe", "-u", "-c", "0"),)
    notes = render(spec(gpu="nvidia"), wiring, None).notes
    assert any("nvidia-modprobe -u -c 0" in n for n in notes) and any("optional" in n for n in notes)


@needs_root
def test_local_with_a_card_and_container_tools_uses_the_gpu_device_and_runtime(tmp_path):
    make_fake_nvidia_host(tmp_path)
    host = GpuHost(TreeHost(tmp_path))
    assert resolve_gpu(spec(gpu="nvidia"), host, 1) == GpuWiring("gpu", runtime=False)
    with pytest.raises(BadInput, match="no nvidia-container-cli"):
        resolve_gpu(spec(gpu="nvidia", nvidia_runtime=True), host, 1)
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-container-cli").write_text("")
    wiring = resolve_gpu(spec(gpu="nvidia"), host, 1)
    assert wiring.runtime
    desired = render(spec(gpu="nvidia"), wiring, None)
    assert desired.devices["gpu"] == {"type": "gpu", "gputype": "physical", "vendorid": "10de", "gid": "44",
                                      "mode": "0660"}
    assert desired.config["nvidia.runtime"] == "true"
    # gpu_mode forces unix-char even where LXD sees the card
    assert resolve_gpu(spec(gpu="nvidia", gpu_mode="unix-char"), host, 1).mode == "unix-char"


@needs_root
def test_host_driver_upgrade_that_moves_the_uvm_major_shows_as_a_device_change(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    make_fake_nvidia_host(before, uvm_major=509)
    make_fake_nvidia_host(after, uvm_major=237)
    s = spec(gpu="nvidia")
    old = render(s, resolve_gpu(s, GpuHost(TreeHost(before)), 0), None)
    new = render(s, resolve_gpu(s, GpuHost(TreeHost(after)), 0), None)
    # Same layout under another root: compare majors only, as a real host's paths stay the same.
    current = instance(old.config, {n: {**d, "source": d["source"].replace(str(before), str(after))}
                                    for n, d in old.devices.items()})
    changes, _ = diff(s, current, new)
    assert {c.what for c in changes} == {"device nvidia-uvm", "device nvidia-uvm-tools"}
    assert all(c.before["major"] == "509" and c.after["major"] == "237" for c in changes)
