"""snapshot_command: what a risky pyinfra operation yields before its change (pure: host name and data only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.api.exceptions import OperationError

from labwright.snapshots.deploy import _take, snapshot_command


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
