"""labwright's reading of Proxmox's snapshot list against answers read from PVE's source (tests/conformance/
pve-snapshot/): a snapshot with ``snapstate`` is incomplete, never picked as the one to restore, and refused by name
before the guest is stopped (PVE would refuse the rollback only after stopping it)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright import snapshots
from labwright.errors import BadInput
from labwright.hostnames import parse_host_name
from labwright.snapshots.model import latest_ours
from labwright.snapshots.proxmox import PveSnapshots

CASES = sorted((Path(__file__).resolve().parents[2] / "conformance" / "pve-snapshot").glob("*.toml"))


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


class Node(PveSnapshots):
    """PveSnapshots with the API answered from a case (list only; a stop would be recorded)."""

    def __init__(self, answer: list[dict[str, Any]]):
        self.name = parse_host_name("@pct/pve1/201")  # type: ignore[assignment]
        self.label, self._kind, self.answer, self.calls = "@pct/pve1/201", "lxc", answer, []

    def _require(self) -> None: ...

    @property
    def _ct(self):  # type: ignore[override]
        answer = self.answer

        class Ct:
            class snapshot:
                get = staticmethod(lambda: answer)
        return Ct

    def exists(self) -> bool:
        return True

    def running(self) -> bool:
        return True

    def stop(self) -> None:
        self.calls.append("stop")

    def rollback(self, name: str) -> None:
        self.calls.append(f"rollback {name}")

    def start(self) -> None:
        self.calls.append("start")


def test_both_incomplete_states_are_recorded():
    assert {p.stem for p in CASES} >= {"list-incomplete-prepare", "list-incomplete-delete"}


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_incomplete_snapshots_are_read_passed_over_and_refused_before_the_stop(path):
    case = load(path)
    assert case["provenance"]["sources"]
    node = Node(case["run"]["answer"])
    listed = {s.name: s for s in node.list()}
    assert {name: s.incomplete for name, s in listed.items()} == case["expect"]["incomplete"]
    latest = latest_ours(list(listed.values()))
    assert (latest.name if latest else "") == case["expect"]["latest_restorable"]
    for name, state in case["expect"]["incomplete"].items():
        if state:
            with pytest.raises(BadInput) as caught:
                snapshots.restore(node, name, force=True)
            message = str(caught.value)
            assert f"snapshot {name} is incomplete (snapstate = {state}" in message and "\n" not in message
            assert "pct delsnapshot 201" in message and "--force" in message
            assert node.calls == []  # nothing stopped
