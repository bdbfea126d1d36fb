"""Layout on a tmp dir: what the managed path is, the atomic symlink swap, the state file, adoption and GC."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from labwright.errors import BadInput, OperationFailed
from labwright.stacks.layout import MANIFEST, Entry, Layout, State, state_slug


def fake_venv(path: Path) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return path


def managed_env(layout: Layout, env_id: str, stack: str = "A") -> Entry:
    env_dir = layout.root / env_id
    fake_venv(env_dir / "venv")
    (env_dir / MANIFEST).write_text(json.dumps({"id": env_id, "stack": stack, "venv": str(layout.venv)}))
    return Entry(id=env_id, path=str(env_dir / "venv"), stack=stack)


@pytest.fixture
def layout(tmp_path) -> Layout:
    return Layout(tmp_path / "root", tmp_path / "app" / ".venv")


def test_inspect_tells_every_kind_of_path(layout, tmp_path):
    assert layout.inspect().kind == "absent"
    fake_venv(layout.venv)
    assert layout.inspect().kind == "directory"
    os.rename(layout.venv, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", layout.venv)
    found = layout.inspect()
    assert found.kind == "linked" and found.target == str(tmp_path / "elsewhere")
    entry = managed_env(layout, "A-000000000001")
    layout.point_to(entry.path)
    assert layout.inspect().kind == "managed" and layout.inspect().target == entry.path


@pytest.mark.parametrize("make", ["dir", "file", "link-to-dir", "dangling"])
def test_a_path_that_is_not_a_venv_is_refused_in_one_line(layout, tmp_path, make):
    layout.venv.parent.mkdir(parents=True)
    if make == "dir":
        layout.venv.mkdir()
    elif make == "file":
        layout.venv.write_text("x")
    elif make == "link-to-dir":
        (tmp_path / "plain").mkdir()
        os.symlink(tmp_path / "plain", layout.venv)
    else:
        os.symlink(tmp_path / "missing", layout.venv)
    with pytest.raises(BadInput) as info:
        layout.inspect()
    assert str(layout.venv) in str(info.value) and "\n" not in str(info.value)


def test_the_swap_is_atomic_readers_never_see_a_missing_path(layout):
    a, b = managed_env(layout, "A-1"), managed_env(layout, "B-2")
    layout.point_to(a.path)
    seen: set[str] = set()
    missing = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.add(os.readlink(layout.venv))
            except FileNotFoundError:
                missing.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    for index in range(2000):
        layout.point_to(b.path if index % 2 == 0 else a.path)
    stop.set()
    reader.join()
    assert not missing and seen <= {a.path, b.path}
    assert not [p for p in layout.venv.parent.iterdir() if p.name != layout.venv.name]  # no temp links left


def test_state_round_trips_and_history_keeps_the_latest_first(layout):
    state = layout.read_state()
    assert state.current is None and state.history == []
    a, b = managed_env(layout, "A-1", "A"), managed_env(layout, "B-2", "B")
    state.became_current(a, None)
    state.became_current(b, a)
    state.became_current(a, b)  # back to A: it moves to the front, not twice in the list
    layout.write_state(state)
    again = layout.read_state()
    assert again.current.id == "A-1" and again.previous.id == "B-2"
    assert [e.id for e in again.history] == ["A-1", "B-2"]
    adopted = Entry(id="original-1", path="/x/original-1/venv", stack="original")
    again.became_current(b, adopted)  # a previous the history never saw (adopted) still lands right after it
    assert [e.id for e in again.history] == ["B-2", "original-1", "A-1"]
    assert layout.state_file.parent.name == "state" and layout.state_file.name.endswith(".json")


@pytest.mark.parametrize("junk", ["{not json", "[1, 2]", "[" * 100_000 + "]" * 100_000, "1" * 5000, "\udcff",
                                  '{"schema": "labwright.stack-state/1", "venv": "/x", "history": "x"}'])
def test_a_corrupt_state_file_is_named_not_ignored(layout, junk):
    # junk in a state file is bad input: one line naming the file, exit 2 (BadInput), never an internal error
    layout.state_file.parent.mkdir(parents=True)
    layout.state_file.write_text(junk, errors="surrogateescape")
    with pytest.raises(BadInput, match=str(layout.state_file)) as refused:
        layout.read_state()
    assert "\n" not in str(refused.value)


def test_a_file_given_as_the_stack_root_is_named(layout):
    layout.root.parent.mkdir(parents=True, exist_ok=True)
    layout.root.write_text("not a directory")
    with pytest.raises(BadInput, match=f"stack root {layout.root}: {layout.root} is a file, not a directory"):
        layout.read_state()


def test_adopt_moves_a_plain_venv_into_the_root(layout):
    fake_venv(layout.venv)
    (layout.venv / "marker").write_text("original")
    entry = layout.adopt()
    layout.point_to(entry.path)
    assert (layout.venv / "marker").read_text() == "original"
    assert entry.stack == "original" and layout.inspect().kind == "managed"


def test_collect_keeps_the_n_most_recent_and_never_the_other_paths(layout, tmp_path):
    entries = [managed_env(layout, f"S{i}-{i}") for i in range(4)]
    other = Layout(layout.root, tmp_path / "other" / ".venv")
    foreign = managed_env(other, "X-9")  # another service's environment under the same root
    (layout.root / "S9-half").mkdir()
    (layout.root / "S9-half" / ".building").write_text(str(layout.venv))  # an interrupted build of this path
    state = State(venv=str(layout.venv))
    previous = None
    for entry in entries:
        state.became_current(entry, previous)
        previous = entry
    removed = layout.collect(state, keep=2)
    assert sorted(Path(p).name for p in removed) == ["S0-0", "S1-1", "S9-half"]
    assert Path(entries[3].path).exists() and Path(entries[2].path).exists() and Path(foreign.path).exists()
    assert [e.id for e in state.history] == ["S3-3", "S2-2"] and state.previous.id == "S2-2"


def test_state_files_are_per_path():
    assert state_slug("/opt/tabbyapi/.venv").startswith("opt_tabbyapi_.venv-")
    assert state_slug("/opt/a/.venv") != state_slug("/opt/b/.venv")


def test_only_one_switch_at_a_time(layout):
    with layout.locked(), pytest.raises(OperationFailed, match="another stack switch"), layout.locked():
        pass
