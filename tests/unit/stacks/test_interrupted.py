"""What a killed switch leaves and how the next run reads it, on a tmp dir (no service): the state follows the
link, an unconfirmed restart stays pending, a root the run created goes away when it fails, and the pending flag
of a state written by an older bundle (no such key) reads as confirmed."""

from __future__ import annotations

import json

import pytest

from labwright.errors import BadInput
from labwright.stacks.layout import MANIFEST, Entry, Layout, State
from labwright.stacks.switch import reconcile


def managed_env(layout: Layout, env_id: str, stack: str) -> Entry:
    env_dir = layout.root / env_id
    (env_dir / "venv" / "bin").mkdir(parents=True)
    (env_dir / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (env_dir / MANIFEST).write_text(json.dumps({"id": env_id, "stack": stack, "venv": str(layout.venv)}))
    return Entry(id=env_id, path=str(env_dir / "venv"), stack=stack)


@pytest.fixture
def layout(tmp_path) -> Layout:
    layout = Layout(tmp_path / "root", tmp_path / "app" / ".venv")
    layout.venv.parent.mkdir()
    return layout


def test_a_link_the_state_does_not_know_becomes_current_and_pending(layout):
    old, new = managed_env(layout, "A-1", "A"), managed_env(layout, "B-2", "B")
    state = State(venv=str(layout.venv))
    state.became_current(old, None)
    layout.write_state(state)
    layout.point_to(new.path)  # the run was killed here: swapped, not recorded
    said: list[str] = []
    fixed = reconcile(layout, layout.read_state(), layout.inspect(), said.append)
    assert fixed.current is not None and fixed.current.id == "B-2" and fixed.current.pending
    assert fixed.previous is not None and fixed.previous.id == "A-1"
    assert "a run was killed after its swap" in said[0]
    again = layout.read_state()  # written, not only in memory
    assert again.current == fixed.current and again.previous == fixed.previous
    assert reconcile(layout, again, layout.inspect(), said.append) == again and len(said) == 1  # nothing more


def test_a_link_that_matches_the_state_changes_nothing(layout):
    old = managed_env(layout, "A-1", "A")
    state = State(venv=str(layout.venv))
    state.became_current(old, None)
    layout.write_state(state)
    layout.point_to(old.path)
    before = layout.state_file.read_text()
    said: list[str] = []
    assert reconcile(layout, layout.read_state(), layout.inspect(), said.append).current == old
    assert said == [] and layout.state_file.read_text() == before


def test_pending_survives_the_state_file_and_old_states_read_as_confirmed(layout):
    entry = managed_env(layout, "A-1", "A")
    entry.pending = True
    state = State(venv=str(layout.venv))
    state.became_current(entry, None)
    layout.write_state(state)
    read = layout.read_state()
    assert read.current is not None and read.current.pending
    data = json.loads(layout.state_file.read_text())
    for raw in (data["current"], *data["history"]):
        del raw["pending"]
    data["current"]["a_key_from_a_newer_bundle"] = 1
    layout.state_file.write_text(json.dumps(data))
    older = layout.read_state()
    assert older.current is not None and older.current.id == "A-1" and not older.current.pending


def test_a_root_the_run_created_is_removed_when_the_run_fails(layout, tmp_path):
    deep = Layout(tmp_path / "new" / "deeper" / "root", layout.venv)
    with pytest.raises(BadInput), deep.locked():
        (deep.root / "state").mkdir()
        raise BadInput("refused")
    assert not (tmp_path / "new").exists()


def test_a_root_that_existed_or_holds_environments_stays(layout):
    layout.root.mkdir()
    with pytest.raises(BadInput), layout.locked():
        raise BadInput("refused")
    assert layout.root.is_dir()
    other = Layout(layout.root.parent / "fresh", layout.venv)
    with pytest.raises(BadInput), other.locked():
        managed_env(other, "A-1", "A")
        raise BadInput("refused after a build")
    assert (other.root / "A-1" / "venv").is_dir()
