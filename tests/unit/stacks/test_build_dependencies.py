"""`stack switch` builds a COMPLETE environment: the plan's wheels exactly (no-deps, hash-checked), then what they
require beyond each other from the wheelhouse, with the plan's own packages pinned. Real venv, real pip, real wheels.

(A real torch needs sympy, filelock and the nvidia-* wheels; with the plan's wheels alone it does not import.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labwright.errors import OperationFailed
from labwright.stacks.build import build
from labwright.stacks.fetch import LocalWheel, sha256_of
from labwright.stacks.plan import PlannedWheel, SwitchPlan
from support.wheels import write_wheel

PURE = "py3-none-any"


def wheel(house: Path, name: str, version: str, requires: list[str] | None = None) -> LocalWheel:
    module = name.replace("-", "_")
    path = write_wheel(house, name, version, {f"{module}/__init__.py": f"VERSION = {version!r}\n".encode()},
                       requires=requires, tag=PURE)
    sha, size = sha256_of(path)
    planned = PlannedWheel(name, version, path.name, str(path), sha)
    return LocalWheel(planned, path, sha, size, True)


def installed(venv: Path) -> dict[str, str]:
    code = "import importlib.metadata as m; print('\\n'.join(f'{d.name}=={d.version}' for d in m.distributions()))"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    return dict(line.split("==", 1) for line in out.stdout.split())


def make(tmp_path: Path, plan_wheels: list[LocalWheel]) -> tuple[SwitchPlan, Path]:
    plan = SwitchPlan("deps", str(tmp_path / "app" / ".venv"), f"{sys.version_info[0]}.{sys.version_info[1]}",
                      tuple(w.wheel for w in plan_wheels), root=str(tmp_path / "stacks"))
    env_dir = tmp_path / "stacks" / plan.env_id
    env_dir.mkdir(parents=True)
    return plan, env_dir


def test_the_plans_wheels_bring_their_dependencies_from_the_wheelhouse(tmp_path):
    house = tmp_path / "wheelhouse"
    # A "torch" that needs a helper package (as real torch needs sympy) and an engine pinned to that torch.
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper>=1.0"])
    engine = wheel(house, "lwengine", "1.0.0", requires=["lwtorch==2.11.0"])
    wheel(house, "lwhelper", "1.2.0")
    wheel(house, "lwtorch", "2.12.0", requires=["lwhelper>=1.0"])  # newer, in the same wheelhouse: must not win
    plan, env_dir = make(tmp_path, [lwtorch, engine])
    lines: list[str] = []
    build(plan, [lwtorch, engine], env_dir, sys.executable, "pip", lines.append)
    have = installed(env_dir / "venv")
    assert have["lwtorch"] == "2.11.0" and have["lwengine"] == "1.0.0" and have["lwhelper"] == "1.2.0", have
    assert any("dependencies" in line and "wheelhouse only" in line for line in lines), lines
    assert (env_dir / "constraints.txt").read_text().splitlines() == ["lwtorch==2.11.0", "lwengine==1.0.0"]


def test_a_dependency_missing_from_the_wheelhouse_fails_the_build_in_one_line(tmp_path):
    house = tmp_path / "wheelhouse"
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper-nowhere>=1.0"])
    plan, env_dir = make(tmp_path, [lwtorch])
    with pytest.raises(OperationFailed) as failed:
        build(plan, [lwtorch], env_dir, sys.executable, "pip", lambda line: None)
    message = str(failed.value)
    assert "install the dependencies of the stack's wheels with pip failed" in message
    assert "lwhelper" in message.lower() and "\n" not in message
