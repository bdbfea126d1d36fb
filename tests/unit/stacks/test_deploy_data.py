"""labwright.stacks.deploy_data: the stack deploy's booleans and numbers, one line naming the key."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.stacks.deploy_data import flag, number, value


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
