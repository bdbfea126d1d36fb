"""The repository reads nothing outside its checkout (issue 14): no shared/ beside it, no absolute workplace paths.

A copy of the checkout (the files ``git ls-files`` names, tracked or new) goes into a fresh temporary directory
with nothing beside it, and the PVE simulator's tests run there in a subprocess, importing labwright and the test
support from the copy. A static scan checks that no file outside ``docs/`` names a path beside the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Run from the copy: the simulator's own tests, the vendored schema's, and the Proxmox guest renderers.
SUBSET = ["tests/unit/support/test_pve_simulator.py", "tests/unit/support/test_pve_schema_vendored.py",
          "tests/unit/guests/test_proxmox_render.py"]
# Built from pieces so that this file does not match itself.
SHARED = "../" + "shared"
OUTSIDE = re.compile(re.escape(SHARED) + r"|(?<![\w.~-])/" + "work" + r"(?![\w.-])|/ \"shared\" /")


def checkout_files() -> list[str]:
    """The checkout's files as git sees them: tracked ones and new ones not ignored, those that exist."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    return sorted({f for f in listed if f and (REPO / f).is_file()})


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("alone") / "labwright"  # its parent holds nothing else: no shared/ beside it
    for name in checkout_files():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target, follow_symlinks=False)
    assert not (root.parent / "shared").exists()
    return root


def test_no_file_names_a_path_outside_the_checkout(copy):
    found = []
    for path in sorted(p for p in copy.rglob("*") if p.is_file()):
        name = path.relative_to(copy).as_posix()
        if name.startswith("docs/"):
            continue  # prose may cite where a fact came from
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1)
                  if OUTSIDE.search(line)]
    assert not found, "paths outside the checkout:\n" + "\n".join(found)


def test_the_simulator_tests_pass_from_a_copy_with_nothing_beside_it(copy):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABWRIGHT_PVE", "PYTEST_"))}
    env["PYTHONPATH"] = str(copy / "src")  # the copy's labwright, ahead of the editable install's
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    probe = subprocess.run([sys.executable, "-c", "import labwright; print(labwright.__file__)"], cwd=copy, env=env,
                           capture_output=True, text=True, check=True)
    assert Path(probe.stdout.strip()).is_relative_to(copy), probe.stdout
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUBSET], cwd=copy,
                         env=env, capture_output=True, text=True, timeout=300)
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
    assert run.returncode == 0, tail
    assert re.search(r"\d+ passed", tail) and " error" not in tail, tail
