"""snapshot_command: what a risky pyinfra operation yields before its change (pure: host name and data only)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyinfra.api import FunctionCommand
from pyinfra.api.exceptions import DeployError, OperationError

from labwright.snapshots import Before
from labwright.snapshots.deploy import _take, check_snapshot_data, snapshot_command, snapshot_guest, snapshot_settings


@dataclass
class Host:
    name: str
    data: dict[str, Any] = field(default_factory=dict)


def test_a_container_gets_one_command_with_its_settings():
    host = Host("@pct/pve1/101", {"snapshot_keep": "5", "snapshot_required": "true",
                                  "proxmox_api_url": "https://pve1.lan:8006", "tabbyapi_ref": "x"})
    commands = list(snapshot_command(host, "tabbyapi-ref"))
    assert len(commands) == 1 and isinstance(commands[0], FunctionCommand)
    assert commands[0].function is _take
    assert commands[0].args == ("@pct/pve1/101", "tabbyapi-ref", 5, True,
                                {"proxmox_api_url": "https://pve1.lan:8006"})


@pytest.mark.parametrize("host", [Host("@local"), Host("gpu1.lan"), Host("@ssh/gpu1"),
                                  Host("@lxd/llm1", {"snapshot_before": "false"}),
                                  Host("@lxd/llm1", {"snapshot_before": False})])
def test_nothing_for_hosts_that_are_not_containers_or_opted_out(host):
    assert list(snapshot_command(host, "stack-switch")) == []


@pytest.mark.parametrize("keep, needle", [("three", "whole number"), ("0", "keep 1 to 100"), (0, "keep 1 to 100"),
                                          (-2, "keep 1 to 100")])
def test_bad_keep_is_one_line(keep, needle):
    with pytest.raises(OperationError, match=needle):
        list(snapshot_command(Host("@lxd/llm1", {"snapshot_keep": keep}), "stack-switch"))


def test_unknown_snapshot_key_is_refused_with_the_nearest_one():
    with pytest.raises(OperationError, match=r"^snapshot_kep: unknown data key for this deploy \(did you mean "
                                             r"snapshot_keep\?\)"):
        list(snapshot_command(Host("@lxd/llm1", {"snapshot_kep": 2}), "stack-switch"))


@pytest.mark.parametrize("data, needle", [({"snapshot_before": "maybe"}, "snapshot_before: 'maybe' is not true or "
                                                                          "false"),
                                          ({"snapshot_required": 3}, "snapshot_required: 3 is not true or false"),
                                          ({"snapshot_keep": True}, "snapshot_keep: True is not a whole number"),
                                          ({"snapshot_befor": False}, "did you mean snapshot_before?")])
def test_the_prepare_time_check_is_one_deploy_error_line(data, needle):
    with pytest.raises(DeployError) as caught:
        check_snapshot_data(Host("@lxd/llm1", data))
    assert needle in str(caught.value) and str(caught.value).endswith("(nothing was changed)")
    assert "\n" not in str(caught.value)


def test_the_three_keys_are_accepted_and_read():
    assert snapshot_settings({"snapshot_before": "no", "snapshot_keep": "7", "snapshot_required": "yes",
                              "tabbyapi_ref": "x"}) == (False, 7, True)
    assert snapshot_settings({}) == (True, 3, False)


class Recording:
    """A host whose shell answers are given: records what the snapshot step asked it."""

    def __init__(self, answer: bool):
        self.answer = answer
        self.asked: list[str] = []

    def run_shell_command(self, command):
        self.asked.append(str(command))
        return self.answer, None


def test_one_snapshot_per_host_per_run(monkeypatch):
    from labwright import snapshots

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(snapshots, "before",
                        lambda name, step, **kw: calls.append((name, step)) or Before(name, f"snap-{step}"))

    class State:
        pass

    run, other_run = State(), State()
    _take(run, None, "@lxd/llm1", "packages", 3, False, {})
    _take(run, None, "@lxd/llm1", "stack-switch", 3, False, {})   # same run: the packages snapshot covers it
    _take(run, None, "@lxd/llm2", "stack-switch", 3, False, {})   # another host
    _take(other_run, None, "@lxd/llm1", "stack-switch", 3, False, {})
    assert calls == [("@lxd/llm1", "packages"), ("@lxd/llm2", "stack-switch"), ("@lxd/llm1", "stack-switch")]


def test_only_if_decides_on_the_host_when_the_step_runs(monkeypatch):
    from labwright import snapshots

    calls: list[str] = []
    monkeypatch.setattr(snapshots, "before", lambda name, step, **kw: calls.append(step) or Before(name, "snap"))

    class State:
        pass

    unmoved = Recording(False)
    _take(State(), unmoved, "@lxd/llm1", "tabbyapi-ref", 3, False, {}, only_if="[ a != a ]")
    assert unmoved.asked == ["[ a != a ]"] and calls == []
    moved = Recording(True)
    _take(State(), moved, "@lxd/llm1", "tabbyapi-ref", 3, False, {}, only_if="[ a != b ]")
    assert calls == ["tabbyapi-ref"]
    commands = list(snapshot_command(Host("@lxd/llm1"), "tabbyapi-ref", only_if="true"))
    assert commands[0].kwargs == {"only_if": "true"}


# --- a Proxmox VM deployed to over SSH: the snapshot goes to the VM through the API ------------------------------
class Inventory:
    def __init__(self, *hosts: Host):
        self.hosts = {h.name: h for h in hosts}

    def get_host(self, name, default=None):
        return self.hosts.get(name, default)


@dataclass
class InventoryHost(Host):
    inventory: Any = None


def test_an_ssh_host_naming_its_vm_snapshots_the_vm_with_its_own_proxmox_data_not_its_address():
    host = Host("win1.lan", {"proxmox_vm": "pve1/120", "proxmox_api_url": "https://pve1.lan:8006",
                             "proxmox_ca_file": "/ca.pem", "ssh_hostname": "10.1.2.3", "snapshot_keep": 2})
    (command,) = snapshot_command(host, "packages")
    assert command.function is _take
    assert command.args == ("@pct/pve1/120", "packages", 2, False,
                            {"proxmox_api_url": "https://pve1.lan:8006", "proxmox_ca_file": "/ca.pem"})


def test_a_kind_vm_guest_declaration_names_the_vm_and_the_node_host_gives_the_api_settings():
    node = Host("pve1", {"proxmox_api_url": "https://pve1.lan:8006", "ssh_hostname": "pve1.lan", "cpu": 8})
    host = InventoryHost("win1", {"guest": {"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120},
                                  "proxmox_api_url": "https://wrong:8006"}, Inventory(node))
    assert snapshot_guest(host) == ("@pct/pve1/120", {"proxmox_api_url": "https://pve1.lan:8006",
                                                      "ssh_hostname": "pve1.lan"})
    (command,) = snapshot_command(host, "stack-switch")
    assert command.args[0] == "@pct/pve1/120"


def test_a_container_guest_declaration_on_an_ssh_host_is_no_vm():
    assert snapshot_guest(Host("llm1.lan", {"guest": {"backend": "proxmox", "node": "pve1", "vmid": 201}})) is None
    assert list(snapshot_command(Host("llm1.lan", {"guest": {"kind": "ct", "node": "pve1", "vmid": 1}}), "x")) == []


def test_a_vm_host_opted_out_yields_nothing_even_with_a_bad_vm_name():
    assert list(snapshot_command(Host("win1", {"proxmox_vm": "nonsense", "snapshot_before": False}), "x")) == []
    check_snapshot_data(Host("win1", {"proxmox_vm": "nonsense", "snapshot_before": False}))


@pytest.mark.parametrize("data, needle", [
    ({"proxmox_vm": "120"}, "host win1: proxmox_vm: '120' is not NODE/VMID, the node and id of the VM this host is, "
                            "e.g. proxmox_vm=pve1/120"),
    ({"proxmox_vm": "pve1/99"}, "proxmox_vm: 'pve1/99' is not NODE/VMID"),
    ({"guest": {"kind": "vm", "node": "pve1"}}, "host win1: its guest is a VM (kind: vm) without vmid, so labwright "
                                                "cannot snapshot it before a risky step; give guest vmid, or "
                                                "proxmox_vm: NODE/VMID, or set snapshot_before: false"),
    ({"guest": {"kind": "vm"}}, "without node and vmid"),
])
def test_a_vm_that_cannot_be_named_is_one_line_at_prepare_and_at_run(data, needle):
    with pytest.raises(DeployError) as caught:
        check_snapshot_data(Host("win1", data))
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(OperationError, match=re.escape(needle)):
        list(snapshot_command(Host("win1", data), "packages"))


def test_the_vm_is_named_with_or_without_the_pct_prefix():
    assert snapshot_guest(Host("w", {"proxmox_vm": "@pct/pve2/130"}))[0] == "@pct/pve2/130"
    assert snapshot_guest(Host("w", {"proxmox_vm": " pve2/130 "}))[0] == "@pct/pve2/130"


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12),
                    st.lists(st.integers(), max_size=3),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@given(key=st.sampled_from(["snapshot_before", "snapshot_required"]), value=_values)
def test_any_value_of_a_flag_is_read_as_a_boolean_or_refused_in_one_line_naming_it(key, value):
    from labwright.deploy_data import FALSE, TRUE
    from labwright.errors import BadInput

    try:
        before, _, required = snapshot_settings({key: value})
    except BadInput as exc:
        assert str(exc).startswith(f"{key}: ") and "\n" not in str(exc) and "true or false" in str(exc)
        assert not isinstance(value, bool) and value not in (None, "")
        return
    got = before if key == "snapshot_before" else required
    if isinstance(value, bool):
        assert got is value
    elif value in (None, ""):
        assert got is (key == "snapshot_before")
    else:
        assert str(value).strip().lower() in (*TRUE, *FALSE)
        assert got is (str(value).strip().lower() in TRUE)
