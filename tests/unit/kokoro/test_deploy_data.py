"""labwright.kokoro.deploy_data: the seed's CPU/GPU rule as data, and the requirements read from pyproject.toml."""

from __future__ import annotations

import pytest

from labwright.kokoro.deploy_data import DataError, choose_device, load_defaults, requirements
from support.kokoro_standin import PYPROJECT, REQUIREMENTS

CHOICE = load_defaults()["choice"]


@pytest.mark.parametrize(("use", "device", "expected"), [
    ("conversational", "", "cpu"),
    ("long_form", "", "gpu"),
    ("long-form", "", "gpu"),
    ("long_form", "cpu", "cpu"),
    ("conversational", "GPU", "gpu"),
])
def test_device_by_use_unless_given(use, device, expected):
    assert choose_device(use, device, CHOICE) == expected


@pytest.mark.parametrize(("use", "device", "words"), [
    ("podcast", "", "kokoro_use: 'podcast' is not one of conversational, long_form"),
    ("conversational", "tpu", "kokoro_device: 'tpu' is not cpu or gpu"),
])
def test_bad_choice(use, device, words):
    with pytest.raises(DataError, match=words):
        choose_device(use, device, CHOICE)


def test_requirements_are_dependencies_plus_the_device_group():
    text = PYPROJECT.replace("gpu = []", 'gpu = ["torch==2.6.0 ; sys_platform == \\"linux\\""]')
    assert requirements(text, "cpu", "p") == REQUIREMENTS
    assert requirements(text, "gpu", "p") == [*REQUIREMENTS, 'torch==2.6.0 ; sys_platform == "linux"']
    with pytest.raises(DataError, match="has no optional-dependencies group 'rocm' \\(has: cpu, gpu\\)"):
        requirements(text, "rocm", "p")
    with pytest.raises(DataError, match="no \\[project\\] dependencies"):
        requirements("[tool.x]\n", "cpu", "p")
    with pytest.raises(DataError, match="will not pass to pip"):
        requirements(PYPROJECT.replace('cpu = []', 'cpu = ["--index-url=http://x"]'), "cpu", "p")
