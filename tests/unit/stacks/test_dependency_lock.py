"""The hashed lock of what a stack's wheels require (labwright.stacks.dependency_lock), made for real: pip resolves the
plan's wheels (direct URLs on a 127.0.0.1 server, as the PyTorch index or a GitHub release serves them) against a
stand-in PyPI on 127.0.0.1 (support.simple_index), and every dependency is pinned by the sha256 that index
publishes; the plan's own packages stay out of the lock."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.errors import BadInput, SafetyCheckFailed
from labwright.stacks.dependency_lock import lock_dependencies, platforms
from labwright.stacks.fetch import sha256_of
from labwright.stacks.plan import PlannedWheel, SwitchPlan, plan_from_json
from support.simple_index import Index, serve
from support.wheels import write_wheel

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
PURE = "py3-none-any"


@pytest.fixture
def pypi(tmp_path: Path) -> Iterator[Index]:
    with serve(tmp_path / "pypi") as served:
        yield served


@pytest.fixture
def torch_index(tmp_path: Path) -> Iterator[Index]:
    """Where the plan's own wheels are downloaded from (the PyTorch index, a GitHub release)."""
    with serve(tmp_path / "torch-index") as served:
        yield served


def build(tmp_path: Path, name: str, version: str, requires: list[str] | None = None, tag: str = PURE) -> Path:
    module = name.replace("-", "_")
    return write_wheel(tmp_path / "build" / f"{name}-{version}", name, version,
                       {f"{module}/__init__.py": f"VERSION = {version!r}\n".encode()}, requires=requires, tag=tag)


def publish_stack(tmp_path: Path, pypi: Index, torch_index: Index) -> SwitchPlan:
    """lwtorch 2.11.0+cu128 (needs lwhelper, which needs lwleaf; and lwtypes only on Python 2) and lwengine
    (needs lwtorch, which the plan has, and lwtokens) on the "PyTorch index"; their dependencies on "PyPI", with a
    newer lwtorch there too that must not be taken."""
    plan_wheels = []
    for name, version, requires in (("lwtorch", "2.11.0+cu128", ["lwhelper>=1.0", "lwtypes; python_version<'3'"]),
                                    ("lwengine", "0.0.5", ["lwtorch>=2.10", "lwtokens>=0.2"])):
        wheel = build(tmp_path, name, version, requires)
        sha = torch_index.publish(wheel)
        plan_wheels.append(PlannedWheel(name, version, wheel.name, torch_index.file_url(wheel.name), sha))
    pypi.publish(build(tmp_path, "lwhelper", "1.2.0", ["lwleaf"]))
    pypi.publish(build(tmp_path, "lwleaf", "3.0.0"))
    pypi.publish(build(tmp_path, "lwtokens", "0.2.1"))
    pypi.publish(build(tmp_path, "lwtorch", "2.12.0"))
    return SwitchPlan("lw", "/opt/app/.venv", PY, tuple(plan_wheels), root="/opt/labwright/stacks")


def test_the_lock_pins_the_dependencies_by_the_published_sha256_and_leaves_the_plans_wheels_out(tmp_path, pypi,
                                                                                                torch_index):
    plan = publish_stack(tmp_path, pypi, torch_index)
    locked = lock_dependencies(plan, index_url=pypi.url, root=tmp_path / "cache")
    assert locked.lock_lines == [f"{name}=={version} --hash=sha256:{pypi.published[f'{name}-{version}-{PURE}.whl']}"
                                 for name, version in (("lwhelper", "1.2.0"), ("lwleaf", "3.0.0"),
                                                       ("lwtokens", "0.2.1"))]
    assert locked.dependency_index == pypi.url and not locked.unpinned_dependencies
    assert locked.env_id != plan.env_id  # what the environment holds changed: another directory
    # It travels in the plan JSON to the target, which reads it back checked.
    import json
    again = plan_from_json(json.loads(locked.dumps()))
    assert again.lock_lines == locked.lock_lines and again.env_id == locked.env_id
    # Made once: kept in the cache, the same text the next time even when the index is gone.
    cached = list((tmp_path / "cache").glob("*.lock"))
    assert len(cached) == 1 and cached[0].read_text() == locked.dependency_lock
    pypi.tamper("lwleaf-3.0.0-py3-none-any.whl")
    assert lock_dependencies(plan, index_url=pypi.url, root=tmp_path / "cache") == locked


def test_the_platforms_are_manylinux_x86_64_and_the_wheels_own(tmp_path):
    wheel = PlannedWheel("lwattn", "2.8.3", "lwattn-2.8.3-cp312-cp312-linux_x86_64.whl", "https://x/y.whl", "0" * 64)
    found = platforms(SwitchPlan("s", "/opt/v", "3.12", (wheel,)))
    assert "manylinux_2_28_x86_64" in found and found[-1] == "linux_x86_64"


def test_a_dependency_the_index_publishes_no_sha256_for_refuses_the_stack_in_one_line(tmp_path, pypi, torch_index):
    plan = publish_stack(tmp_path, pypi, torch_index)
    pypi.publish(build(tmp_path, "lwleaf", "3.0.1"), with_hash=False)
    with pytest.raises(BadInput) as info:
        lock_dependencies(plan, index_url=pypi.url, root=tmp_path / "cache")
    line = str(info.value)
    assert line.startswith("stack lw: the hashed lock of what its wheels require cannot be made from ")
    assert "lwleaf-3.0.1-py3-none-any.whl" in line and "publishes no sha256" in line
    assert "stack_unpinned_dependencies=true" in line and "\n" not in line
    assert not list((tmp_path / "cache").glob("*.lock"))


def test_an_unreachable_index_refuses_the_stack_naming_the_index_and_the_fix(tmp_path, torch_index, monkeypatch):
    monkeypatch.setenv("PIP_RETRIES", "0")  # pip would try five times, backing off
    plan = publish_stack(tmp_path, Index(tmp_path / "unused"), torch_index)
    dead = "http://127.0.0.1:9/simple/"  # nothing listens on the discard port
    with pytest.raises(BadInput) as info:
        lock_dependencies(plan, index_url=dead, root=tmp_path / "cache")
    line = str(info.value)
    assert f"cannot be made from {dead} " in line and f"reaches {dead}" in line
    assert "stack_unpinned_dependencies=true" in line and "nothing was installed" in line and "\n" not in line
    assert info.value.exit_code == 2


def test_a_plan_wheel_that_is_not_the_file_the_matrix_recorded_is_refused(tmp_path, pypi, torch_index):
    """pip checks each plan wheel against the matrix's sha256 (its #sha256= fragment) before reading it."""
    plan = publish_stack(tmp_path, pypi, torch_index)
    torch_index.tamper(plan.wheels[0].filename)
    with pytest.raises(SafetyCheckFailed) as info:
        lock_dependencies(plan, index_url=pypi.url, root=tmp_path / "cache")
    line = str(info.value)
    assert line.startswith(f"stack lw: {plan.wheels[0].filename} from {plan.wheels[0].source} has sha256 ")
    assert f"not the {plan.wheels[0].sha256} the matrix records" in line and "\n" not in line


def test_unpinned_by_name_makes_no_lock_and_another_environment(tmp_path, torch_index):
    plan = publish_stack(tmp_path, Index(tmp_path / "unused"), torch_index)
    unpinned = lock_dependencies(plan, unpinned=True, index_url="http://127.0.0.1:9/simple/")
    assert unpinned.unpinned_dependencies and not unpinned.lock_lines and unpinned.env_id != plan.env_id
    assert '"unpinned_dependencies": true' in unpinned.dumps()


def test_a_wheelhouse_plan_gets_no_lock_here(tmp_path):
    """Its files lie on the target and have no publisher: the target reads the wheelhouse's own lock."""
    wheel = build(tmp_path, "lwtorch", "2.11.0", ["lwhelper"])
    sha, _ = sha256_of(wheel)
    plan = SwitchPlan("lw", "/opt/app/.venv", PY, (PlannedWheel("lwtorch", "2.11.0", wheel.name, str(wheel), sha),))
    assert lock_dependencies(plan, index_url="http://127.0.0.1:9/simple/") == plan
    assert '"dependency_lock"' not in plan.dumps()  # a plan without one reads as it always did


def test_the_command_writes_a_stacks_lock_for_a_wheelhouse(tmp_path, pypi, torch_index, monkeypatch, capsys):
    """`labwright wheelhouse stack --stack NAME --out DIR`: the lock a wheelhouse of the stack carries (the matrix's
    URLs resolved here); an unknown stack is one line, exit 2."""
    from labwright.cli import main
    from support.stacks import PY as TAG
    from support.stacks import StandinStacks, write_matrix

    house = tmp_path / "rows"
    sha = {}
    for name, version, requires in (("torch", "2.9.0", ["lwhelper"]), ("standin_attn", "1.0.0+torch2.9", ["torch"])):
        built = build(house, name, version, requires, tag=f"{TAG}-{TAG}-linux_x86_64")
        sha[built.name] = torch_index.publish(built)
    pypi.publish(build(tmp_path, "lwhelper", "1.2.0"))
    matrix = StandinStacks(wheelhouse=house, matrix_dir=tmp_path / "wheels_matrix", sha256=sha)
    write_matrix(matrix, torch_index.base + "files")
    monkeypatch.setenv("LABWRIGHT_MATRIX_DIR", str(matrix.matrix_dir))
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))  # the lock is kept there
    out = tmp_path / "wheelhouse"
    out.mkdir()
    assert main(["wheelhouse", "stack", "--stack", "standin-2.9", "--out", str(out), "--index-url", pypi.url]) == 0
    assert capsys.readouterr().out.strip() == str(out / "requirements.lock")
    lines = [line for line in (out / "requirements.lock").read_text().splitlines() if not line.startswith("#")]
    assert lines == [f"lwhelper==1.2.0 --hash=sha256:{pypi.published['lwhelper-1.2.0-py3-none-any.whl']}"]
    assert main(["wheelhouse", "stack", "--stack", "no-such", "--out", str(out), "--index-url", pypi.url]) == 2
    error = capsys.readouterr().err
    assert error.startswith("labwright: error: ") and "no-such" in error and error.count("\n") == 1


def test_a_wheel_url_that_answers_404_is_a_stale_matrix_row(tmp_path, pypi, torch_index):
    plan = publish_stack(tmp_path, pypi, torch_index)
    (torch_index.files / plan.wheels[1].filename).unlink()
    with pytest.raises(BadInput) as info:
        lock_dependencies(plan, index_url=pypi.url, root=tmp_path / "cache")
    assert str(info.value) == (f"lwengine 0.0.5: {plan.wheels[1].source} answered HTTP 404; the matrix row is stale: "
                               "refresh it (labwright matrix refresh) or pass --wheelhouse with the file; nothing was "
                               "installed")
