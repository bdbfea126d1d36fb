"""GPUs by CDI where the daemon offers it (issue 34 item 4): on an LXD with the gpu_cdi extension and a host whose
CDI spec nvidia-ctk wrote, ``gpu: nvidia`` is a ``gpu`` device with ``id=nvidia.com/gpu=N``; on Incus and older LXD
today's wiring stays; ``guest plan`` says which and why. The daemons are tests/support/lxd6_double.py (LXD 6.x as its
source answers, an LXD 5.0.2-like one without gpu_cdi, and Incus); the spec is written as nvidia-ctk writes it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.gpu.nvidia.host import GpuHost
from labwright.guests.lxd import LxdBackend
from labwright.guests.lxd_cdi import CdiOffer, read_spec
from labwright.guests.lxd_render import render, resolve_gpu
from labwright.guests.model import spec_from_data
from labwright.lxd.client import Endpoint, LxdClient, ServerInfo
from support.fake_nvidia import make_fake_nvidia_host
from support.gpu_host import TreeGpuHost
from support.host_tree import TreeHost
from support.lxd6_double import INCUS_EXTENSIONS, LXD6_EXTENSIONS, Lxd6Double, write_nvidia_cdi_spec

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
LXD6 = ServerInfo("lxd", "6.5", frozenset(LXD6_EXTENSIONS))
LXD502 = ServerInfo("lxd", "5.0.2", frozenset(e for e in LXD6_EXTENSIONS if not e.startswith("gpu_cdi")))
INCUS = ServerInfo("incus", "6.0.4", frozenset(INCUS_EXTENSIONS))


def spec(**data):
    return spec_from_data("@lxd/web1", {"backend": "lxd", "gpu": "nvidia", **data}, source="inv.py")


def test_the_spec_nvidia_ctk_writes_is_read_from_etc_or_var_run(tmp_path):
    assert read_spec(TreeHost(tmp_path)) is None
    write_nvidia_cdi_spec(tmp_path, gpus=2, dynamic=True)
    found = read_spec(TreeHost(tmp_path))
    assert found is not None and found.path == "/var/run/cdi/nvidia.yaml"
    assert found.ids() == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")  # the UUID and "all" names are not indexes


def test_lxd_with_gpu_cdi_and_a_spec_gets_a_gpu_device_by_cdi_id(tmp_path):
    write_nvidia_cdi_spec(tmp_path, gpus=2)
    wiring = resolve_gpu(spec(), GpuHost(TreeHost(tmp_path)), 0, CdiOffer(LXD6, read_spec(TreeHost(tmp_path))))
    assert wiring.mode == "cdi" and wiring.cdi_ids == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
    assert "lxd 6.5 offers gpu_cdi and /etc/cdi/nvidia.yaml" in wiring.notes[0]
    devices = render(spec(), wiring, None).devices
    assert devices["gpu"] == {"type": "gpu", "gputype": "physical", "id": "nvidia.com/gpu=0", "gid": "44",
                              "mode": "0660"}
    assert devices["gpu1"]["id"] == "nvidia.com/gpu=1" and "vendorid" not in devices["gpu"]
    assert not any(d["type"] == "unix-char" for d in devices.values())


@needs_root
@pytest.mark.parametrize("server,why", [(LXD502, "lxd 5.0.2 lacks the gpu_cdi API extension (LXD 6.2 or later"),
                                        (INCUS, "incus 6.0.4 has no CDI")])
def test_older_lxd_and_incus_keep_todays_nodes_and_say_why(tmp_path, server, why):
    make_fake_nvidia_host(tmp_path)
    write_nvidia_cdi_spec(tmp_path)
    wiring = resolve_gpu(spec(), GpuHost(TreeHost(tmp_path)), 0, CdiOffer(server, read_spec(TreeHost(tmp_path))))
    assert wiring.mode == "unix-char" and wiring.nodes
    assert wiring.notes[0].startswith("GPU by unix-char nodes, not CDI: ") and why in wiring.notes[0]


@needs_root
def test_no_spec_on_the_host_keeps_todays_wiring(tmp_path):
    make_fake_nvidia_host(tmp_path)
    wiring = resolve_gpu(spec(), GpuHost(TreeHost(tmp_path)), 1, CdiOffer(LXD6, None))
    assert wiring.mode == "gpu" and "no nvidia.com/gpu CDI spec" in wiring.notes[0]
    assert "nvidia-ctk cdi generate" in wiring.notes[0]


@pytest.mark.parametrize("server,spec_written", [(LXD502, True), (INCUS, True), (LXD6, False)])
def test_gpu_mode_cdi_where_it_is_not_offered_is_one_line_naming_the_setting(tmp_path, server, spec_written):
    if spec_written:
        write_nvidia_cdi_spec(tmp_path)
    with pytest.raises(BadInput) as err:
        resolve_gpu(spec(gpu_mode="cdi"), GpuHost(TreeHost(tmp_path)), 1,
                    CdiOffer(server, read_spec(TreeHost(tmp_path))))
    text = str(err.value)
    assert "gpu_mode cdi" in text and "set gpu_mode auto" in text and "\n" not in text


def test_the_remote_daemons_host_spec_is_out_of_reach(tmp_path):
    with pytest.raises(BadInput, match="remote"):
        resolve_gpu(spec(gpu_mode="cdi"), None, 1, CdiOffer(LXD6, None, local=False))
    assert resolve_gpu(spec(), None, 1, CdiOffer(LXD6, None, local=False)).mode == "gpu"


# --- the backend against the daemon doubles -------------------------------------------------------------------
@pytest.fixture
def backend(tmp_path):
    made: list[Lxd6Double] = []

    def start(host_root: Path, **kwargs) -> tuple[Lxd6Double, LxdBackend]:
        path = str(tmp_path / f"d{len(made)}.socket")
        double = Lxd6Double(**kwargs).serve(path)
        double.instances["tmpl"] = {"name": "tmpl", "status": "Stopped", "config": {}, "devices": {}}
        made.append(double)
        return double, LxdBackend(LxdClient(Endpoint(socket_path=path), timeout=10), TreeGpuHost(host_root))

    yield start
    for double in made:
        double.close()


def test_guest_plan_against_lxd6_says_cdi_and_why(tmp_path, backend):
    root = tmp_path / "host"
    write_nvidia_cdi_spec(root)
    _, lxd = backend(root)
    plan = lxd.plan(spec(clone="tmpl"))
    gpu = next(c.after for c in plan.changes if c.what == "device gpu")
    assert gpu["id"] == "nvidia.com/gpu=0" and gpu["type"] == "gpu"
    assert any(n.startswith("GPU by CDI (id=nvidia.com/gpu=0): lxd 6.5 offers gpu_cdi") for n in plan.notes)


@needs_root
def test_guest_plan_against_incus_keeps_nodes_and_says_why(tmp_path, backend):
    root = tmp_path / "host"
    make_fake_nvidia_host(root)
    write_nvidia_cdi_spec(root)
    _, incus = backend(root, flavour="incus", version="6.0.4")
    plan = incus.plan(spec(clone="tmpl"))
    assert any(c.what == "device nvidia0" for c in plan.changes)
    assert any("not CDI: incus 6.0.4 has no CDI" in n for n in plan.notes)


def test_gpu_mode_cdi_on_an_lxd_without_gpu_cdi_creates_nothing(tmp_path, backend):
    root = tmp_path / "host"
    write_nvidia_cdi_spec(root)
    double, old = backend(root, version="5.0.2",
                          extensions=[e for e in LXD6_EXTENSIONS if not e.startswith("gpu_cdi")])
    with pytest.raises(BadInput, match="gpu_mode cdi, but lxd 5.0.2 lacks the gpu_cdi API extension"):
        old.apply(spec(clone="tmpl", gpu_mode="cdi"))
    assert [m for m, _ in double.requests if m != "GET"] == [] and set(double.instances) == {"tmpl"}


def test_guest_show_names_the_server_and_its_version(tmp_path, backend):
    _, lxd = backend(tmp_path, version="6.5")
    info = lxd.show(spec_from_data("@lxd/web1", {"backend": "lxd", "clone": "tmpl"}, source="inv.py"))
    assert (info["server"], info["server_version"]) == ("lxd", "6.5")
