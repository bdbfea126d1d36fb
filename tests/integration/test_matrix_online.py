"""`labwright matrix refresh` against the real PyPI: it sees today's newest torch, the one pip sees.

Runs where https://pypi.org answers (CI has it); elsewhere it is skipped, naming what it could not reach.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from labwright.matrix.load import _load
from labwright.matrix.resolve import StackRequest, resolve_stack
from labwright.paths import packaged_matrix_dir

PYPI = "https://pypi.org/pypi"


def _pypi_newest(package: str) -> str:
    try:
        with urllib.request.urlopen(f"{PYPI}/{package}/json", timeout=30) as response:
            return json.loads(response.read())["info"]["version"]
    except OSError as exc:
        pytest.skip(f"{PYPI}/{package}/json is not reachable from here ({exc}); CI runs this test")


def _pip_newest(package: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True,
                          text=True, timeout=120)
    match = re.search(rf"^{package} \(([^)]+)\)", proc.stdout, re.M)
    assert match, f"pip index versions {package} printed no version: {proc.stdout}{proc.stderr}"
    return match.group(1)


def test_refresh_sees_the_newest_torch_on_pypi(tmp_path: Path, cli_env):
    newest = _pypi_newest("torch")
    assert _pip_newest("torch") == newest, "pip and the PyPI JSON API disagree on the newest torch"
    for name in ("components.toml", "cuda.toml", "stacks.toml"):
        (tmp_path / name).write_bytes((packaged_matrix_dir() / name).read_bytes())
    cold = subprocess.run(["labwright", "matrix", "refresh", "--out", str(tmp_path), "--package", "torch"],
                          capture_output=True, text=True, env=cli_env, timeout=600)
    assert cold.returncode == 0, cold.stdout + cold.stderr
    assert f"✓ torch: updated, newest {newest}," in cold.stdout, cold.stdout
    _load.cache_clear()
    matrix = _load(str(tmp_path))
    rows = [w for w in matrix.wheels if w.package == "torch" and w.version == newest]
    assert rows and all(w.cuda for w in rows), f"torch {newest} is not in the refreshed matrix with its CUDA"
    resolution = resolve_stack(StackRequest(torch=newest, python="3.12"), matrix)
    assert [c.wheel.version for c in resolution.chosen("torch")] == [newest], resolution.errors
    # a second refresh finds nothing new and rewrites nothing
    before = (tmp_path / "torch_pypi.toml").stat().st_ino
    again = subprocess.run(["labwright", "matrix", "refresh", "--out", str(tmp_path), "--package", "torch"],
                           capture_output=True, text=True, env=cli_env, timeout=600)
    assert again.returncode == 0 and "= torch: unchanged" in again.stdout, again.stdout + again.stderr
    assert (tmp_path / "torch_pypi.toml").stat().st_ino == before


def test_inspect_classifies_a_real_extension_wheel_whose_name_says_nothing(tmp_path: Path, cli_env):
    """torchao's PyPI wheel carries no local label and no torch pin: what it links is read from its .so files."""
    _pypi_newest("torchao")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "torchao", "-d",
                           str(tmp_path), "-q"], capture_output=True, text=True, timeout=300)
    wheels = list(tmp_path.glob("torchao-*.whl"))
    assert proc.returncode == 0 and wheels, proc.stderr
    out = subprocess.run(["labwright", "matrix", "inspect", str(wheels[0]), "--json"], capture_output=True,
                         text=True, env=cli_env, timeout=300)
    assert out.returncode == 0, out.stderr
    (result,) = json.loads(out.stdout)
    assert result["links_torch"] is True and result["cuda"] in ("12", "13"), result
    assert any(e.startswith(".so links libcudart.so.") for e in result["evidence"]) and not result["contradictions"]
