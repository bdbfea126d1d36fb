"""labwright.stacks.deploy_data: the stack deploy's data typed by one schema (data_schema), one line naming the key."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.stacks.deploy_data import flag, settings, value


def test_value_default_only_when_absent_or_none():
    assert value({"a": 0, "b": None}, "a", 5) == 0 and value({"b": None}, "b", 5) == 5 and value({}, "c") is None


@pytest.mark.parametrize(("given", "expected"), [(True, True), ("yes", True), ("ON", True), (" 1 ", True),
                                                 (False, False), ("off", False), ("", False), (None, False)])
def test_flag(given, expected):
    assert flag({"create": given}, "create") is expected


def test_bad_flag_names_the_key():
    with pytest.raises(DeployError, match=r"^create: 'maybe' is not a boolean"):
        flag({"create": "maybe"}, "create")


def refused(data: dict) -> str:
    with pytest.raises(DeployError) as caught:
        settings(data)
    line = str(caught.value)
    assert "\n" not in line, line
    return line


@pytest.mark.parametrize(("key", "given", "line"), [
    ("venv", "/usr", "venv: '/usr' is a system directory"),
    ("venv", "relative/venv", "venv: 'relative/venv' is not an absolute path"),
    ("stacks_root", "/etc/", "stacks_root: '/etc' is a system directory"),
])
def test_directories_the_stack_deploy_owns_are_typed(key, given, line):
    assert refused({key: given}).startswith(line)
    assert getattr(settings({key: "/opt/x//venv/"}), key) == "/opt/x/venv"


def test_defaults_and_typed_values():
    typed = settings({"venv": "/opt/tabbyapi/.venv", "stack": "A", "ssh_user": "root", "tabbyapi_port": 5000})
    assert (typed.venv, typed.stack, typed.stacks_root, typed.keep, typed.health_timeout, typed.installer) == (
        "/opt/tabbyapi/.venv", "A", "/opt/labwright/stacks", 2, 60.0, "auto")
    assert not typed.stack_rollback and not typed.create and not typed.unpinned_dependencies
    typed = settings({"keep": "3", "health_timeout": "2m", "create": "yes", "stack_unpinned_dependencies": True,
                      "service": "tabbyapi", "health": "http://127.0.0.1:5000/health", "installer": "UV"})
    assert (typed.keep, typed.health_timeout, typed.create, typed.unpinned_dependencies, typed.installer) == (
        3, 120.0, True, True, "uv")


@pytest.mark.parametrize(("data", "line"), [
    ({"keep": 0}, "keep: 0 is out of range (1..)"),
    ({"health_timeout": "soon"}, "health_timeout: 'soon' is not a duration"),
    ({"health": "https://127.0.0.1:99999/health"}, "health: 'https://127.0.0.1:99999/health' is not a URL"),
    ({"service": "a;b"}, "service: 'a;b' is not a systemd unit name"),
    ({"installer": "conda"}, "installer: 'conda' is not one of auto, uv, pip"),
    ({"stack_rollback": "perhaps"}, "stack_rollback: 'perhaps' is not a boolean"),
    ({"stack": "A\nB"}, "stack: 'A\\nB' holds the control character"),
    ({"venv": "/opt/t/.venv", "stacks_root": "/opt/t/.venv/s"}, "stacks_root (/opt/t/.venv/s) is inside venv"),
])
def test_bad_values_are_one_line_naming_the_key(data, line):
    assert refused(data).startswith(line), refused(data)
