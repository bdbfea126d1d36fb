"""Plans from the repository's real matrix, the --dry description, and the PythonStack fact's parsing."""

from __future__ import annotations

import json

import pytest

from labwright.errors import BadInput
from labwright.facts.python_stack import PythonStack
from labwright.stacks.from_matrix import describe_plan, plan_for_stack
from labwright.stacks.layout import STATE_SCHEMA, VenvPath
from labwright.stacks.service import HealthCheck


def test_stack_c_becomes_its_exact_wheels_with_hashes_where_known():
    plan = plan_for_stack("C", "/opt/tabbyapi/.venv")
    names = {w.package: w.version for w in plan.wheels}
    assert names["torch"] == "2.11.0+cu130" and names["flash-attn"] == "2.8.3+cu130torch2.11"
    assert "causal-conv1d" in dict(plan.absent)  # the seed: no wheel built for torch 2.11
    assert all(w.source.startswith("https://") for w in plan.wheels)
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
