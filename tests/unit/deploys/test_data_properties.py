"""Every deploy's host data, generated (issue 33): any value for any key the deploy reads is either taken or refused
in one line that names the key, never a traceback; a key the host's other deploys use clashes in one line naming
both keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyinfra.api.exceptions import DeployError

from labwright.base import deploy_data as base
from labwright.deploy_data import conflict_error
from labwright.deploys import kokoro, litellm, openwebui
from labwright.errors import BadInput
from labwright.llamacpp import deploy_data as llamacpp
from labwright.models import deploy_data as models
from labwright.stacks import deploy_data as stack
from labwright.tabbyapi import deploy_data as tabbyapi

PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJ0ZXN0a2V5Zm9ydGVzdHNvbmx5MDEyMzQ1Njc4OWFi test"

JUNK = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**6, max_value=10**6), st.floats(),
                 st.text(max_size=30), st.sampled_from(["/", "/etc", "/usr/", "/srv/x", "0", "65536", "999.1.1.1",
                                                        "http://[::1/v1", "yes", "false", "a\nb", "../x", "auto"]),
                 st.lists(st.text(max_size=5), max_size=2), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                            max_size=2))


def schema_reader(module: Any) -> Callable[[Mapping[str, Any]], Any]:
    return lambda data: module.KEYS.over(data).parse(module.data_schema())


def base_reader(tmp: Path) -> Callable[[Mapping[str, Any]], Any]:
    pub = tmp / "id.pub"
    pub.write_text(PUBLIC + "\n")
    return lambda data: base.settings_from({"admin_ssh_public_key_file": str(pub), **data})


def keys_of(prefix: str, keys: Any) -> list[str]:
    return sorted(f"{prefix}_{key}" if prefix else key for key in keys)


DEPLOYS: dict[str, tuple[list[str], Callable[[Path], Callable[[Mapping[str, Any]], Any]]]] = {
    "tabbyapi": (keys_of("tabbyapi", tabbyapi.flat_keys(tabbyapi.load_defaults())), lambda _: tabbyapi.settings_from),
    "llamacpp": (keys_of("llamacpp", [*llamacpp.DEFAULTS["service"], *llamacpp.DEFAULTS["flags"]]),
                 lambda _: llamacpp.settings_from),
    "models": (keys_of("model", models.SETTING_KEYS),
               lambda _: lambda data: models.settings({"model_repo": "o/m", **data})),
    "litellm": (keys_of("litellm", litellm.data_schema().model_fields), lambda _: schema_reader(litellm)),
    "openwebui": (keys_of("openwebui", openwebui.data_schema().model_fields), lambda _: schema_reader(openwebui)),
    "kokoro": (keys_of("kokoro", kokoro.data_schema().model_fields), lambda _: schema_reader(kokoro)),
    "base": (keys_of("", base.DEFAULTS), base_reader),
    # the stack deploy's keys carry no prefix: its schema reads its own keys of the host data
    "stack": (sorted(field.alias or name for name, field in stack.data_schema().model_fields.items()),
              lambda _: stack.settings),
}


@pytest.mark.parametrize("deploy", sorted(DEPLOYS))
def test_every_deploys_defaults_are_valid(deploy: str, tmp_path: Path) -> None:
    keys, reader = DEPLOYS[deploy]
    assert keys
    reader(tmp_path)({})


@pytest.mark.parametrize("deploy", sorted(DEPLOYS))
def test_generated_data_is_taken_or_refused_in_one_line_naming_the_key(deploy: str, tmp_path: Path) -> None:
    keys, make = DEPLOYS[deploy]
    read = make(tmp_path)

    @settings(max_examples=60, deadline=None)
    @given(key=st.sampled_from(keys), value=JUNK)
    def run(key: str, value: Any) -> None:
        try:
            read({key: value})
        except (BadInput, DeployError) as error:
            line = str(error)
            assert "\n" not in line and "\r" not in line, line
            assert key in line.split(":", 1)[0] or line.startswith(key.split("_", 1)[0]), (key, line)
            assert "Traceback" not in line

    run()


@pytest.mark.parametrize(("data", "own", "names"), [
    ({"kokoro_port": 8001}, {"llamacpp_port": 8001}, ("kokoro_port", "llamacpp_port")),
    ({"openwebui_port": "5000"}, {"tabbyapi_port": 5000}, ("openwebui_port", "tabbyapi_port")),
    ({"kokoro_dir": "/opt/litellm/kokoro"}, {"litellm_venv": "/opt/litellm"}, ("kokoro_dir", "litellm_venv")),
    ({}, {"tabbyapi_root": "/opt/tabbyapi/.venv/s", "tabbyapi_venv": "/opt/tabbyapi/.venv"},
     ("tabbyapi_root", "tabbyapi_venv")),
    ({"openwebui_data_dir": "/srv/data/"}, {"kokoro_dir": "/srv/data"}, ("openwebui_data_dir", "kokoro_dir")),
])
def test_a_clash_across_one_hosts_deploys_names_both_keys(data: dict[str, Any], own: dict[str, Any],
                                                         names: tuple[str, str]) -> None:
    line = conflict_error(data, own)
    assert line is not None and all(name in line for name in names) and "\n" not in line


@pytest.mark.parametrize(("data", "own"), [
    ({"openwebui_litellm_port": 4000}, {"litellm_port": 4000}),  # the gateway Open WebUI calls, not a second listener
    ({}, {"tabbyapi_dir": "/opt/tabbyapi", "tabbyapi_venv": "/opt/tabbyapi/.venv"}),  # the deploy's own layout
    ({"tabbyapi_port": 5000}, {"tabbyapi_port": 5000}),  # the same key
    ({"litellm_port": "bad"}, {"kokoro_port": 8880}),  # refused by litellm's own schema, not here
])
def test_no_clash(data: dict[str, Any], own: dict[str, Any]) -> None:
    assert conflict_error(data, own) is None
