"""A deploy's host data of the wrong kind is refused naming the key, never read as its default or as its text: a
list or dict where one value is expected (``llamacpp_build=[]`` was taken as ``auto``, ``tabbyapi_model_name=[]``
became a model directory named ``[]``), a file name too long for the filesystem (a traceback before)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.errors import BadInput
from labwright.llamacpp.deploy_data import build_choice, local_binary, ollama_mode
from labwright.tabbyapi.deploy_data import settings_from as tabbyapi_settings


@pytest.mark.parametrize("value", [[], ["m"], {}, {"a": 1}, ("m",)])
def test_tabbyapi_a_list_or_dict_for_one_value_is_refused_flat_and_nested(value: object) -> None:
    with pytest.raises(BadInput) as flat:
        tabbyapi_settings({"tabbyapi_model_name": value})
    assert str(flat.value).startswith(f"tabbyapi_model_name: {value!r} is a {type(value).__name__}; give one value "
                                      "(a string"), flat.value
    with pytest.raises(BadInput) as nested:
        tabbyapi_settings({"tabbyapi": {"model_name": "m", "cache_size": value}})
    assert str(nested.value).startswith(f"tabbyapi_cache_size: {value!r} is a {type(value).__name__}; give one value "
                                        "(a number"), nested.value


def test_tabbyapi_a_model_name_longer_than_a_file_name_is_refused() -> None:
    with pytest.raises(BadInput, match=r"^tabbyapi_model_name: 'x{80}' must be the model's directory name"):
        tabbyapi_settings({"tabbyapi_model_name": "x" * 256})
    assert tabbyapi_settings({"tabbyapi_model_name": "x" * 255}).model_name == "x" * 255


@pytest.mark.parametrize("value", [[], {}, ["cuda"]])
def test_llamacpp_build_and_ollama_override_take_one_value(value: object) -> None:
    with pytest.raises(DeployError, match=r"^llamacpp_build: .* give one value \(a string, default 'auto'\)$"):
        build_choice({"llamacpp_build": value}, None)
    with pytest.raises(DeployError, match=r"^llamacpp_ollama_override: .* give one value"):
        ollama_mode({"llamacpp_ollama_override": value})
    assert build_choice({"llamacpp_build": "cpu"}, None).kind == "cpu"


def test_llamacpp_binary_src_not_a_path_or_too_long_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match=r"^llamacpp_binary_src: \[\] is not a path"):
        local_binary({"llamacpp_binary_src": []})
    with pytest.raises(DeployError) as long:
        local_binary({"llamacpp_binary_src": str(tmp_path / ("x" * 5000))})
    assert str(long.value).startswith("llamacpp_binary_src: ") and "File name too long" in str(long.value)
    assert "\n" not in str(long.value)
