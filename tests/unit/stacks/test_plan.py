"""The switch plan: its environment id is stable and changes with anything that changes the environment."""

from __future__ import annotations

import json

import pytest

from labwright.errors import BadInput
from labwright.stacks.plan import PlannedWheel, SwitchPlan, check_root, check_venv_path, plan_from_json, safe_name

SHA = "a" * 64


def plan(**overrides) -> SwitchPlan:
    wheels = (PlannedWheel("torch", "2.9.0+cu128", "torch-2.9.0+cu128-cp312-cp312-linux_x86_64.whl",
                           "https://download.pytorch.org/whl/cu128/torch-2.9.0%2Bcu128-cp312-cp312-linux_x86_64.whl",
                           SHA),)
    fields = {"stack": "A", "venv": "/opt/tabbyapi/.venv", "python": "3.12", "wheels": wheels}
    fields.update(overrides)
    return SwitchPlan(**fields)


def test_env_id_is_the_stack_name_and_a_digest_and_is_stable():
    first, second = plan(), plan()
    assert first.env_id == second.env_id
    assert first.env_id.startswith("A-") and len(first.env_id) == len("A-") + 12
    assert first.env_venv == f"/opt/labwright/stacks/{first.env_id}/venv"


@pytest.mark.parametrize("change", [
    {"venv": "/opt/other/.venv"},  # another service: its own directory, so GC of one never hits the other
    {"python": "3.11"},
    {"wheels": (PlannedWheel("torch", "2.9.0+cu128", "t.whl", "/srv/t.whl", "b" * 64),)},
])
def test_env_id_changes_with_what_decides_the_content(change):
    assert plan(**change).env_id != plan().env_id


def test_a_known_sha256_makes_the_source_irrelevant_an_unknown_one_does_not():
    url = plan()
    local = plan(wheels=(PlannedWheel("torch", "2.9.0+cu128", url.wheels[0].filename, "/srv/wh/x.whl", SHA),))
    assert url.env_id == local.env_id  # same bytes from a wheelhouse or the URL: same environment
    unknown = [PlannedWheel("torch", "2.9.0", "t.whl", source) for source in ("/a/t.whl", "/b/t.whl")]
    assert plan(wheels=(unknown[0],)).env_id != plan(wheels=(unknown[1],)).env_id


def test_the_plan_survives_json_and_refuses_tampered_fields():
    original = plan(absent=(("causal-conv1d", "no wheel built for torch 2.11"),))
    again = plan_from_json(json.loads(original.dumps()))
    assert again == original and again.env_id == original.env_id
    data = json.loads(original.dumps())
    data["wheels"][0]["sha256"] = "xyz"
    with pytest.raises(BadInput, match="not 64 hex digits"):
        plan_from_json(data)
    data = json.loads(original.dumps())
    data["venv"] = "relative/.venv"
    with pytest.raises(BadInput, match="absolute path"):
        plan_from_json(data)
    with pytest.raises(BadInput, match="not a labwright.stack-plan/1"):
        plan_from_json({"stack": "A"})


@pytest.mark.parametrize("bad", ["", "venv", "/opt/../etc", "/"])
def test_venv_paths_must_be_absolute_and_plain(bad):
    with pytest.raises(BadInput) as info:
        check_venv_path(bad)
    assert "\n" not in str(info.value)


def test_roots_and_names():
    assert check_root("/srv/stacks/") == "/srv/stacks"
    with pytest.raises(BadInput):
        check_root("stacks")
    assert safe_name("tabbyapi-cu13") == "tabbyapi-cu13"
    assert safe_name("my stack/v2") == "my_stack_v2"
