"""A test lab left half done by a killed run is found at the start of the next one and repaired, one line each
(issue 29, "Bad input"): a pool of the wrong driver, a template left running or frozen, containers whose run is gone.

On a lab of its own (``lwhalf``, 10.99.12.0/24), so the shared test lab other workers copy from is never touched."""

from __future__ import annotations

import subprocess

import pytest

from labwright.lab import lab as lab_ops
from labwright.lab.spec import spec_from_group
from labwright.testing import lab_fixture
from labwright.testing.lab_fixture import OWNER_KEY, ensure_test_lab, process_token
from labwright.ui import Reporter

pytestmark = pytest.mark.lab

TEMPLATE = "lwhalf-template"
DATA = {**lab_fixture.TEST_LAB_DATA, "lab_name": "lwhalf", "lab_subnet": "10.99.12.1/24", "lab_bridge": "lwhalfbr0",
        "lab_pool": "lwhalf", "lab_profile": "lwhalf", "lab_pool_driver": "dir"}


def said(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("labwright test lab: ")]


def dead_token() -> str:
    proc = subprocess.Popen(["true"])
    token = process_token(proc.pid)
    proc.wait()
    return token


def test_a_killed_runs_leftovers_are_found_said_and_repaired(lab, capsys):
    spec = spec_from_group([f"@lxd/{TEMPLATE}"], DATA, source="half-state test")
    try:
        made = ensure_test_lab(DATA, TEMPLATE)
        client = made.client
        assert client.get_or_none("/1.0/storage-pools/lwhalf")["driver"] == "dir"
        said(capsys)

        # a run killed while the pool was dir and btrfs works now: the lab is remade on btrfs
        auto = {**DATA, "lab_pool_driver": "auto"}
        refusal = lab_ops.cow_refusal()
        made = ensure_test_lab(auto, TEMPLATE)
        lines = said(capsys)
        if refusal is None:
            assert "labwright test lab: pool lwhalf is dir although btrfs works here now: remaking the test lab on " \
                   "btrfs" in lines, lines
            assert client.get_or_none("/1.0/storage-pools/lwhalf")["driver"] == "btrfs"
        else:  # this host cannot make btrfs: the dir pool stays, and the reason was said when the lab was made
            assert client.get_or_none("/1.0/storage-pools/lwhalf")["driver"] == "dir"

        # and back: a dir pool asked for (LABWRIGHT_TEST_POOL_DRIVER=dir) where the pool is btrfs
        if refusal is None:
            ensure_test_lab(DATA, TEMPLATE)
            assert said(capsys) == ["labwright test lab: pool lwhalf is btrfs, dir is asked for: remaking the test "
                                    "lab on dir"]
            assert client.get_or_none("/1.0/storage-pools/lwhalf")["driver"] == "dir"
            made = ensure_test_lab(auto, TEMPLATE)
            assert client.get_or_none("/1.0/storage-pools/lwhalf")["driver"] == "btrfs"
            said(capsys)

        # containers of a run that is gone, one of a run still going, and the template left running
        live = made.fresh("lwhalf")
        gone = "lwhalf-gone"
        client.create_instance({"name": gone, "type": "container", "source": {"type": "copy", "source": TEMPLATE},
                                "profiles": [spec.profile], "config": {lab_ops.LAB_KEY: spec.name,
                                                                       OWNER_KEY: dead_token()}})
        client.set_state(TEMPLATE, "start")
        made = ensure_test_lab(auto, TEMPLATE)
        lines = said(capsys)
        assert f"labwright test lab: template {TEMPLATE} was left running (a run stopped while preparing it): " \
               "stopping it" in lines, lines
        assert f"labwright test lab: container {gone} (stopped) of a run that is gone: removing it" in lines, lines
        assert not any(live in line for line in lines), lines  # this process is alive: its container is its own
        assert client.instance_or_none(gone) is None
        assert client.instance(live)["status"] == "Running"
        assert client.instance(TEMPLATE)["status"] == "Stopped"
        made.remove(live)

        # the template left frozen (a snapshot that never finished): thawed, rebuilt, stopped, and copies work
        before = client.instance(TEMPLATE)["created_at"]
        client.set_state(TEMPLATE, "start")
        client.set_state(TEMPLATE, "freeze")
        assert client.instance(TEMPLATE)["status"] == "Frozen"
        made = ensure_test_lab(auto, TEMPLATE)
        lines = said(capsys)
        assert lines == [f"labwright test lab: template {TEMPLATE} was left frozen: rebuilding it"], lines
        assert client.instance(TEMPLATE)["status"] == "Stopped"
        assert client.instance(TEMPLATE)["created_at"] != before
        copy = made.fresh("lwhalf")
        assert client.exec(copy, ["true"]).exit_code == 0
        made.remove(copy)

        # and a lab with nothing half done is checked in one pass: nothing said, nothing remade
        again = client.instance(TEMPLATE)["created_at"]
        ensure_test_lab(auto, TEMPLATE)
        assert said(capsys) == []
        assert client.instance(TEMPLATE)["created_at"] == again
    finally:
        lab_ops.down(spec, Reporter(quiet=True))
