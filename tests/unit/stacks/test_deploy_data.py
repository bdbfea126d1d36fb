"""labwright.stacks.deploy_data: the stack deploy's booleans and numbers, one line naming the key."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.stacks.deploy_data import directory, flag, keep, number, seconds, value


def test_value_default_only_when_absent_or_none():
    assert value({"a": 0, "b": None}, "a", 5) == 0 and value({"b": None}, "b", 5) == 5 and value({}, "c") is None


@pytest.mark.parametrize(("given", "expected"), [(True, True), ("yes", True), ("ON", True), (" 1 ", True),
                                                 (False, False), ("off", False), ("", False), (None, False)])
def test_flag(given, expected):
    assert flag({"create": given}, "create") is expected


def test_bad_flag_and_number_name_the_key():
    with pytest.raises(DeployError, match=r"^create: 'maybe' is not a boolean"):
        flag({"create": "maybe"}, "create")
    assert number({"keep": "3"}, "keep", 2) == 3.0 and number({}, "keep", 2) == 2.0
    with pytest.raises(DeployError, match=r"^health_timeout: 'soon' is not a number"):
        number({"health_timeout": "soon"}, "health_timeout", 60.0)


@pytest.mark.parametrize(("key", "given", "line"), [
    ("venv", "/usr", "venv: '/usr' is a system directory"),
    ("venv", "relative/venv", "venv: 'relative/venv' is not an absolute path"),
    ("stacks_root", "/etc/", "stacks_root: '/etc' is a system directory"),
])
def test_directories_the_stack_deploy_owns_are_typed(key, given, line):
    with pytest.raises(DeployError) as caught:
        directory({key: given}, key)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)
    assert directory({key: "/opt/x//venv/"}, key) == "/opt/x/venv"


def test_keep_and_seconds():
    assert keep({}) == 2 and keep({"keep": "3"}) == 3 and seconds({"health_timeout": "2m"}, "health_timeout", 60) == 120
    with pytest.raises(DeployError, match=r"^keep: 0 is out of range \(1\.\.\)"):
        keep({"keep": 0})
    with pytest.raises(DeployError, match=r"^health_timeout: 'soon' is not a duration"):
        seconds({"health_timeout": "soon"}, "health_timeout", 60)
