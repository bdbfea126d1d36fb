"""SIGKILL in the middle of writing the matrix or a tabbyAPI config.yml: the file is the old one or the new one,
never a partial one (labwright.atomic: temp file + fsync + rename).

A child process writes a large file (tens of MB, so one write takes long enough to be interrupted) through the
same function the command uses, alternating two versions; the parent waits until the child's temporary file
exists (the write is under way, an observable state, polled with a deadline), kills it at a random further point,
and reads the target. Iterations go on until enough kills have landed mid-write (a kill between two writes proves
less), random kill points; every one must find a whole version.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

MID_WRITE_KILLS = 8  # kills that must land while a temporary file is being written (the case under test)
MAX_ITERATIONS = 80  # a kill may land between two writes (the comparison and .prev copy): those count, but go on
DEADLINE_S = 60.0  # generous: the child only has to start and begin writing, on saturated cores too

CHILD = """
import sys
from pathlib import Path
kind, target, a, b = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]).read_text(), Path(sys.argv[4]).read_text()
if kind == "matrix":
    from labwright.matrix.refresh import write_matrix_file as write
else:
    from labwright.tabbyapi.ngram import NgramChange, write_change

    def write(path, text):
        write_change(NgramChange("config", str(path), "", text, ""))
sys.stdout.write("ready\\n")
sys.stdout.flush()
n = 0
while True:
    n += 1
    write(target, a if n % 2 else b)
"""


def _versions(tmp_path: Path, kind: str) -> tuple[str, str]:
    if kind == "matrix":
        row = '  { package = "torch", version = "2.11.0+cu130", url = "https://x.invalid/%s-%d.whl" },\n'
        body = "".join(row % ("a", i) for i in range(200_000))
        return ('kind = "wheel-list"\nwheels = [\n' + body + "]\n",
                'kind = "wheel-list"\nwheels = [\n' + body.replace("/a-", "/b-") + "]\n")
    comment = "# " + "tabbyAPI keeps its settings here; " * 2 + "\n"
    head = comment * 250_000
    return (head + "draft_model:\n  draft_mode: model\n",
            head + "draft_model:\n  draft_mode: ngram\n  ngram_match_min: 3\n")


def _wait_for_temp(target: Path, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    prefix = f".{target.name}.labwright."
    while not any(p.name.startswith(prefix) for p in target.parent.iterdir()):
        if child.poll() is not None:
            raise AssertionError(f"the writer exited ({child.returncode}) before writing: {child.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no temporary file {prefix}* appeared within {DEADLINE_S} s: the writer never "
                                 "started a write")
        time.sleep(0.001)  # a poll interval, not a wait for a state: the loop condition is the state


@pytest.mark.parametrize("kind", ["matrix", "config"])
def test_a_kill_at_any_point_leaves_the_old_or_the_new_file(tmp_path, kind):
    old, new = _versions(tmp_path, kind)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(old)
    b.write_text(new)
    target = tmp_path / ("torch.toml" if kind == "matrix" else "config.yml")
    target.write_text(old)
    rng = random.Random(16)
    outcomes = {"old": 0, "new": 0}
    mid_write = 0
    iteration = 0
    while mid_write < MID_WRITE_KILLS and iteration < MAX_ITERATIONS:
        iteration += 1
        child = subprocess.Popen([sys.executable, "-c", CHILD, kind, str(target), str(a), str(b)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline() == "ready\n", child.stderr.read()
            _wait_for_temp(target, child)
            time.sleep(rng.uniform(0, 0.05))  # the fault's random point within (or after) the write under way
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        text = target.read_text()
        assert text in (old, new), f"iteration {iteration}: a partial file of {len(text)} bytes"
        outcomes["old" if text == old else "new"] += 1
        stale = list(tmp_path.glob(f".{target.name}.labwright.*"))
        mid_write += bool(stale)  # the kill landed while a temporary file was being written
        for leftover in stale:
            leftover.unlink()  # a killed writer leaves its hidden temp file; never under the target's name
    assert sum(outcomes.values()) == iteration
    assert mid_write >= MID_WRITE_KILLS, f"only {mid_write} of {iteration} kills landed mid-write"
