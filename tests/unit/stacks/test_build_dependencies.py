"""`stack switch` builds a COMPLETE environment: the plan's wheels exactly (no-deps, hash-checked), then what they
require beyond each other from a hashed lock (--require-hashes --no-deps: nothing resolved on the target): the plan's
own lock from its index, or a wheelhouse's requirements.lock from the wheelhouse alone. Real venv, real pip, real
wheels, a stand-in PyPI on 127.0.0.1 (support.simple_index).

(A real torch needs sympy, filelock and the nvidia-* wheels; with the plan's wheels alone it does not import.)
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.locks import LOCK_NAME
from labwright.stacks.build import build
from labwright.stacks.dependency_lock import lock_dependencies
from labwright.stacks.fetch import LocalWheel, sha256_of
from labwright.stacks.plan import PlannedWheel, SwitchPlan
from labwright.wheelhouse import download_wheelhouse
from support.simple_index import Index, serve
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


PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def make(tmp_path: Path, plan_wheels: list[LocalWheel], **fields: object) -> tuple[SwitchPlan, Path]:
    plan = SwitchPlan("deps", str(tmp_path / "app" / ".venv"), PY, tuple(w.wheel for w in plan_wheels),
                      root=str(tmp_path / "stacks"), **fields)  # type: ignore[arg-type]
    env_dir = tmp_path / "stacks" / plan.env_id
    env_dir.mkdir(parents=True)
    return plan, env_dir


@pytest.fixture
def pypi(tmp_path: Path) -> Iterator[Index]:
    with serve(tmp_path / "pypi") as served:
        yield served


def test_the_dependencies_come_from_the_plans_hashed_lock_and_a_tampered_one_is_refused(tmp_path, pypi):
    """A "torch" from its own index needing a helper from PyPI (as real torch needs sympy): the controller's lock pins
    it by the sha256 PyPI publishes; on the target pip installs exactly that file, and refuses it once it changes."""
    built = tmp_path / "built"
    lwtorch = wheel(built, "lwtorch", "2.11.0", requires=["lwhelper>=1.0"])
    engine = wheel(built, "lwengine", "1.0.0", requires=["lwtorch==2.11.0"])
    for name, version in (("lwtorch", "2.11.0"), ("lwengine", "1.0.0")):
        pypi.publish(built / f"{name}-{version}-{PURE}.whl")
    pypi.publish(write_wheel(built / "pypi", "lwhelper", "1.2.0", {"lwhelper/__init__.py": b"VALUE = 1\n"}, tag=PURE))
    pypi.publish(write_wheel(built / "pypi", "lwtorch", "2.12.0", {"lwtorch/__init__.py": b""}, tag=PURE))
    by_url = [LocalWheel(dataclasses.replace(w.wheel, source=pypi.file_url(w.wheel.filename)), w.path, w.sha256,
                         w.size, True) for w in (lwtorch, engine)]
    plan, env_dir = make(tmp_path, by_url)
    plan = lock_dependencies(plan, index_url=pypi.url, root=tmp_path / "locks")
    assert [line.split(" ")[0] for line in plan.lock_lines] == ["lwhelper==1.2.0"]
    env_dir = env_dir.rename(env_dir.with_name(plan.env_id))

    # The file on the index changes after the lock was made: the real pip refuses it in the second pass.
    good = (pypi.files / f"lwhelper-1.2.0-{PURE}.whl").read_bytes()
    pypi.tamper(f"lwhelper-1.2.0-{PURE}.whl")
    with pytest.raises(SafetyCheckFailed) as refused:
        build(plan, by_url, env_dir, sys.executable, "pip", lambda line: None)
    line = str(refused.value)
    assert line.startswith("install the dependencies of the stack's wheels with pip: lwhelper") and "\n" not in line
    assert f"not the {pypi.published[f'lwhelper-1.2.0-{PURE}.whl']} in the lock" in line and "tampered" in line
    assert "lwhelper" not in installed(env_dir / "venv")

    (pypi.files / f"lwhelper-1.2.0-{PURE}.whl").write_bytes(good)
    lines: list[str] = []
    manifest = build(plan, by_url, env_dir, sys.executable, "pip", lines.append)
    have = installed(env_dir / "venv")
    assert have["lwtorch"] == "2.11.0" and have["lwengine"] == "1.0.0" and have["lwhelper"] == "1.2.0", have
    assert any("from the hashed lock" in line and "--require-hashes --no-deps" in line for line in lines), lines
    assert manifest["dependencies"] == {"pinned": True, "lock": "dependencies.lock", "count": 1, "source": pypi.url,
                                        "required": ["lwhelper"]}
    assert json.loads((env_dir / "stack.json").read_text())["dependencies"]["pinned"] is True
    assert not (env_dir / "constraints.txt").exists()


def test_a_wheelhouse_installs_its_own_lock_from_the_wheelhouse_alone(tmp_path, pypi):
    house = tmp_path / "wheelhouse"
    # A "torch" that needs a helper package (as real torch needs sympy) and an engine pinned to that torch.
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper>=1.0"])
    engine = wheel(house, "lwengine", "1.0.0", requires=["lwtorch==2.11.0"])
    pypi.publish(write_wheel(tmp_path / "pypi", "lwhelper", "1.2.0", {"lwhelper/__init__.py": b""}, tag=PURE))
    # The wheelhouse's lock, made from the index's sha256s (python -m labwright.wheelhouse), downloads lwhelper.
    download_wheelhouse(["lwhelper==1.2.0"], PY, house, index_url=pypi.url)
    wheel(house, "lwtorch", "2.12.0", requires=["lwhelper>=1.0"])  # newer, in the same wheelhouse: must not win
    plan, env_dir = make(tmp_path, [lwtorch, engine])
    lines: list[str] = []
    manifest = build(plan, [lwtorch, engine], env_dir, sys.executable, "pip", lines.append)
    have = installed(env_dir / "venv")
    assert have["lwtorch"] == "2.11.0" and have["lwengine"] == "1.0.0" and have["lwhelper"] == "1.2.0", have
    assert any(f"the wheelhouse {house}" in line and "hashed lock" in line for line in lines), lines
    assert manifest["dependencies"]["pinned"] is True and manifest["dependencies"]["count"] == 1


def test_a_wheelhouse_without_a_lock_is_refused_before_anything_is_installed(tmp_path):
    house = tmp_path / "wheelhouse"
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper>=1.0"])
    wheel(house, "lwhelper", "1.2.0")  # there, but nobody published its sha256
    plan, env_dir = make(tmp_path, [lwtorch])
    with pytest.raises(BadInput) as refused:
        build(plan, [lwtorch], env_dir, sys.executable, "pip", lambda line: None)
    line = str(refused.value)
    assert line.startswith("stack deps needs lwhelper>=1.0 (required by lwtorch-2.11.0-py3-none-any.whl), and there "
                           "is no hashed lock for it: ")
    assert f"labwright wheelhouse stack --stack deps --out {house}/{LOCK_NAME}" in line
    assert "stack_unpinned_dependencies=true" in line and "\n" not in line
    assert not (env_dir / "venv").exists()


def test_a_lock_that_misses_a_requirement_is_refused(tmp_path, pypi):
    house = tmp_path / "wheelhouse"
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper>=1.0", "lwother"])
    pypi.publish(write_wheel(tmp_path / "pypi", "lwhelper", "1.2.0", {"lwhelper/__init__.py": b""}, tag=PURE))
    download_wheelhouse(["lwhelper==1.2.0"], PY, house, index_url=pypi.url)
    plan, env_dir = make(tmp_path, [lwtorch])
    with pytest.raises(SafetyCheckFailed) as refused:
        build(plan, [lwtorch], env_dir, sys.executable, "pip", lambda line: None)
    assert str(refused.value) == (f"stack deps needs lwother (required by lwtorch-2.11.0-py3-none-any.whl), which "
                                  f"{house / LOCK_NAME} does not list: make the lock again for these wheels; nothing "
                                  "was installed")


def test_wheels_that_need_nothing_beyond_each_other_need_no_lock(tmp_path):
    house = tmp_path / "wheelhouse"
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwtypes; python_version < '3'"])
    engine = wheel(house, "lwengine", "1.0.0", requires=["lwtorch==2.11.0"])
    plan, env_dir = make(tmp_path, [lwtorch, engine])
    manifest = build(plan, [lwtorch, engine], env_dir, sys.executable, "pip", lambda line: None)
    assert manifest["dependencies"] == {"pinned": True, "lock": None, "count": 0, "source": "", "required": []}
    assert sorted(p.name for p in env_dir.iterdir()) == ["requirements.txt", "stack.json", "venv"]


def test_unpinned_by_name_resolves_from_the_wheelhouse_without_hashes_and_says_so(tmp_path):
    house = tmp_path / "wheelhouse"
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper>=1.0"])
    engine = wheel(house, "lwengine", "1.0.0", requires=["lwtorch==2.11.0"])
    wheel(house, "lwhelper", "1.2.0")
    wheel(house, "lwtorch", "2.12.0", requires=["lwhelper>=1.0"])  # newer, in the same wheelhouse: must not win
    plan, env_dir = make(tmp_path, [lwtorch, engine], unpinned_dependencies=True)
    lines: list[str] = []
    manifest = build(plan, [lwtorch, engine], env_dir, sys.executable, "pip", lines.append)
    have = installed(env_dir / "venv")
    assert have["lwtorch"] == "2.11.0" and have["lwengine"] == "1.0.0" and have["lwhelper"] == "1.2.0", have
    assert any(line.startswith("WARNING: stack_unpinned_dependencies: ") and "WITHOUT hashes" in line
               and "the wheelhouse only" in line for line in lines), lines
    assert (env_dir / "constraints.txt").read_text().splitlines() == ["lwtorch==2.11.0", "lwengine==1.0.0"]
    assert manifest["dependencies"]["pinned"] is False


def test_a_dependency_missing_from_the_wheelhouse_fails_the_build_in_one_line(tmp_path):
    house = tmp_path / "wheelhouse"
    lwtorch = wheel(house, "lwtorch", "2.11.0", requires=["lwhelper-nowhere>=1.0"])
    plan, env_dir = make(tmp_path, [lwtorch], unpinned_dependencies=True)
    with pytest.raises(OperationFailed) as failed:
        build(plan, [lwtorch], env_dir, sys.executable, "pip", lambda line: None)
    message = str(failed.value)
    assert "install the dependencies of the stack's wheels with pip failed" in message
    assert "lwhelper" in message.lower() and "\n" not in message
