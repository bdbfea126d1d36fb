"""Plans from the repository's real matrix, the --dry description, and the PythonStack fact's parsing.

The shipped matrix has rows without a sha256 (GitHub-release wheels refreshed where api.github.com did not answer),
and a stack with one is refused; the plan-shape tests read a copy with every row pinned (support/pinned_matrix.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import string

import pytest
from hypothesis import HealthCheck as Health
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright import paths
from labwright.errors import BadInput
from labwright.facts.python_stack import PythonStack
from labwright.matrix.load import load_matrix
from labwright.matrix.model import Matrix
from labwright.stacks.from_matrix import describe_plan, plan_for_stack
from labwright.stacks.layout import STATE_SCHEMA, VenvPath
from labwright.stacks.service import HealthCheck
from support.pinned_matrix import pinned_matrix


@pytest.fixture(scope="module", autouse=True)
def _pinned(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LABWRIGHT_MATRIX_DIR", str(pinned_matrix(tmp_path_factory.mktemp("pinned-matrix"))))
        yield


def test_a_wheel_the_shipped_matrix_has_no_sha256_for_is_refused_in_one_line():
    """The packaged matrix as shipped: every stack either plans with a sha256 on each wheel or is refused in one
    line naming the file the row came from and the fix (never "hashed on arrival")."""
    shipped = load_matrix(paths.packaged_matrix_dir())
    for name in shipped.stacks:
        try:
            plan = plan_for_stack(name, "/opt/tabbyapi/.venv", matrix=shipped)
        except BadInput as exc:
            line = str(exc)
            assert "\n" not in line
            if "no recorded sha256" in line:
                assert f"{paths.packaged_matrix_dir()}/" in line and ".toml" in line, line
                assert "labwright matrix refresh" in line, line
                assert "nothing was run" in line
        else:
            assert all(len(w.sha256) == 64 for w in plan.wheels)


_BAD_SHA = st.one_of(st.just(""), st.text(alphabet=string.hexdigits.lower(), max_size=63),
                     st.text(alphabet=string.hexdigits.lower(), min_size=65, max_size=80),
                     st.text(alphabet="ghijklmnopqrstuvwxyz -", min_size=64, max_size=64))


@functools.cache
def _stack_a() -> tuple[Matrix, list[str]]:
    """The pinned matrix and stack A's wheels, planned once for all the examples below (each plans the spoilt one)."""
    matrix = load_matrix()
    return matrix, [w.filename for w in plan_for_stack("A", "/opt/tabbyapi/.venv", matrix=matrix).wheels]


@settings(max_examples=40, deadline=None, suppress_health_check=[Health.function_scoped_fixture])
@given(bad=st.lists(_BAD_SHA, min_size=1, max_size=3), which=st.integers(min_value=0, max_value=5))
def test_any_wheel_of_the_stack_without_a_recorded_sha256_refuses_the_plan(bad, which):
    """Property: whichever wheels of stack A lose their sha256 (empty, short, long, not hex), the plan is refused in
    one line naming the wheel's matrix file and `labwright matrix refresh`; no plan, so nothing reaches a host."""
    matrix, chosen = _stack_a()
    spoilt = {chosen[(which + i) % len(chosen)]: sha for i, sha in enumerate(bad)}
    wheels = [dataclasses.replace(w, sha256=spoilt[w.filename]) if w.filename in spoilt else w
              for w in matrix.wheels]
    broken = dataclasses.replace(matrix, wheels=wheels)
    with pytest.raises(BadInput) as info:
        plan_for_stack("A", "/opt/tabbyapi/.venv", matrix=broken)
    line = str(info.value)
    assert "\n" not in line and "has no recorded sha256 in " in line and "labwright matrix refresh" in line
    named = line.split(": ", 2)[1].split(" has no recorded")[0]
    assert named in spoilt
    origin = next(w.origin for w in matrix.wheels if w.filename == named)
    assert origin.endswith(".toml") and origin in line


def test_stack_c_becomes_its_exact_wheels_each_with_its_recorded_hash():
    plan = plan_for_stack("C", "/opt/tabbyapi/.venv")
    names = {w.package: w.version for w in plan.wheels}
    assert names["torch"] == "2.11.0+cu130" and names["flash-attn"] == "2.8.3+cu130torch2.11"
    assert "causal-conv1d" in dict(plan.absent)  # the seed: no wheel built for torch 2.11
    assert all(w.source.startswith("https://") and len(w.sha256) == 64 for w in plan.wheels)
    assert plan.python == "3.12" and plan.env_id.startswith("C-")


def test_a_wheelhouse_replaces_the_urls_by_file_name():
    plan = plan_for_stack("A", "/opt/tabbyapi/.venv", wheelhouse="/srv/wheels")
    torch = next(w for w in plan.wheels if w.package == "torch")
    assert torch.source == "/srv/wheels/torch-2.9.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert plan.env_id == plan_for_stack("A", "/opt/tabbyapi/.venv", wheelhouse="/srv/wheels").env_id


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "Z"}, "stack 'Z' is unknown"),
    ({"torch": "2.x"}, "--torch '2.x' is not a torch version"),
    ({"torch": "9.1"}, "stack A cannot be built: torch 9.1: no such torch wheel"),
    ({"wheelhouse": "wheels"}, "--wheelhouse 'wheels' must be an absolute"),
    ({"venv": "tabby/.venv"}, "must be an absolute path"),
])
def test_bad_input_is_one_line(kwargs, message):
    args = {"name": "A", "venv": "/opt/tabbyapi/.venv", **kwargs}
    with pytest.raises(BadInput) as info:
        plan_for_stack(args.pop("name"), args.pop("venv"), **args)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_dry_describes_every_step_in_order():
    plan = plan_for_stack("C", "/opt/tabbyapi/.venv")
    lines = describe_plan(plan, VenvPath(path=None, kind="directory", target="/opt/tabbyapi/.venv"),  # type: ignore
                          "tabbyapi.service", HealthCheck(url="http://127.0.0.1:5000/health"), 2)
    text = "\n".join(lines)
    steps = [next(i for i, line in enumerate(lines) if line.startswith(step))
             for step in ("wheels", "build:", "verify:", "swap:", "restart:", "health:", "keep:")]
    assert steps == sorted(steps)
    assert "nothing is changed" in lines[0] and "absent: causal-conv1d" in text
    assert "moved to /opt/labwright/stacks/original-" in text and "systemctl restart tabbyapi.service" in text


def test_the_fact_reads_kind_target_and_state():
    state = {"schema": STATE_SCHEMA, "venv": "/v", "current": {"id": "A-1", "path": "/r/A-1/venv"},
             "previous": None, "history": []}
    out = ["@@labwright-stack-kind", "symlink", "@@labwright-stack-target", "/r/A-1/venv",
           "@@labwright-stack-state", *json.dumps(state, indent=1).splitlines()]
    fact = PythonStack()
    assert fact.process(out) == {"kind": "symlink", "target": "/r/A-1/venv", "current": state["current"],
                                 "previous": None}
    empty = fact.process(["@@labwright-stack-kind", "absent", "@@labwright-stack-target", "@@labwright-stack-state"])
    assert empty == {"kind": "absent", "target": None, "current": None, "previous": None}
    command = fact.command("/opt/tabby api/.venv")
    assert "'/opt/tabby api/.venv'" in command and "/opt/labwright/stacks/state/" in command


def test_the_gpus_compute_capability_refuses_a_stack_without_kernels_for_it():
    """A GTX 1080 (sm_61): CUDA 13 dropped Pascal, so stack C (torch cu130) is refused while pyinfra prepares,
    naming the stacks and builds that run there; stack A (cu128) plans as without the GPU facts."""
    with pytest.raises(BadInput) as refused:
        plan_for_stack("C", "/opt/tabbyapi/.venv", compute_caps=("6.1",))
    line = str(refused.value)
    assert line.startswith("stack C cannot be built: torch 2.11.0+cu130 (CUDA 13.0) cannot run on this GPU")
    assert "Pascal (sm_61)" in line and "use A, B" in line and "\n" not in line
    venv = "/opt/tabbyapi/.venv"
    assert plan_for_stack("A", venv, compute_caps=("6.1",)) == plan_for_stack("A", venv)
