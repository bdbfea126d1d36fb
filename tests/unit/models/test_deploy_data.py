"""labwright.models.deploy_data: deploys/model.py's host data, checked before anything runs."""

from __future__ import annotations

import json
import shlex

import pytest

from labwright.errors import BadInput
from labwright.models.deploy_data import HUB_REQUIREMENT, settings


def test_defaults_and_the_paths_an_engine_points_at():
    s = settings({"model_repo": "Qwen/Qwen3-0.6B"})
    assert (s.dir, s.cache_dir, s.venv, s.endpoint) == ("/srv/models", "/srv/models/hub",
                                                         "/opt/labwright-models/venv", "https://huggingface.co")
    assert s.runner == "/opt/labwright-models/fetch.py" and s.hub_requirement == HUB_REQUIREMENT
    assert s.path == "/srv/models/Qwen3-0.6B"
    gguf = settings({"model": {"repo": "org/m-GGUF", "file": "m-Q8_0.gguf", "name": "m"}, "model_dir": "/models"})
    assert gguf.path == "/models/m/m-Q8_0.gguf" and gguf.cache_dir == "/models/hub"


def test_the_commands_carry_the_spec_as_one_quoted_argument():
    s = settings({"model_repo": "o/m", "model_allow": ["*.json", "weights/*"], "model_endpoint": "http://10.0.0.1:9"})
    words = shlex.split(s.download_command())
    spec = json.loads(words[words.index("--spec") + 1])
    assert spec == {"repo": "o/m", "revision": "main", "allow": ["*.json", "weights/*"], "ignore": [], "file": None,
                    "name": "m"}
    assert words[words.index("--endpoint") + 1] == "http://10.0.0.1:9"
    assert shlex.split(s.check_command())[:3] == ["python3", s.runner, "--check"]


@pytest.mark.parametrize(("data", "start"), [
    ({"model_repo": "o/m", "model_revison": "v1"}, "model_revison: not a key of deploys/model.py"),
    ({"model_repo": "o/m", "model": {"repo": "o/m"}}, "model: give the model as one table or as model_* keys"),
    ({"model": "o/m"}, "model: 'o/m' is not a table"),
    ({"model": {"repo": "o/m", "revison": "x"}}, "model: unknown key revison"),
    ({}, "model_repo: is required"),
    ({"model_repo": "o/m", "model_dir": "models"}, "model_dir: 'models' must be a dedicated absolute path"),
    ({"model_repo": "o/m", "model_cache_dir": "/srv/a b"}, "model_cache_dir: "),
    ({"model_repo": "o/hub"}, "model_name: 'hub' is the cache directory's name"),
    ({"model_repo": "o/m", "model_hub_version": "1"}, "model_hub_version: not a key"),
    ({"model_repo": "o/m", "model_hub_requirement": "requests"}, "model_hub_requirement: 'requests' is not one"),
    ({"model_repo": "o/m", "model_hub_requirement": "huggingface_hub>=0"},
     "model_hub_requirement: 'huggingface_hub>=0' is not one pinned"),
    ({"model_repo": "o/m", "model_hub_requirement": "huggingface_hub"},
     "model_hub_requirement: 'huggingface_hub' is not one pinned"),
    ({"model_repo": "o/m", "model_hub_requirement": "huggingface_hub; rm -rf /"}, "model_hub_requirement: "),
    ({"model_repo": "o/m", "model_endpoint": "hf.co"}, "model_endpoint: 'hf.co' is not a Hub URL"),
    ({"model_repo": "o/m", "model_download_timeout": "0"}, "model_download_timeout: 0 is out of range"),
    ({"model_repo": "o/m", "model_download_timeout": "soon"}, "model_download_timeout: 'soon' is not a whole"),
    ({"model_repo": "o/m", "model_runtime_packages": ["python3-venv; id"]}, "model_runtime_packages: "),
    ({"model_repo": "o/m", "model_find_links": "wheels"}, "model_find_links: 'wheels' must be"),
])
def test_bad_data_is_one_line_naming_the_key(data, start):
    with pytest.raises(BadInput) as caught:
        settings(data)
    message = str(caught.value)
    assert message.startswith(start) and "\n" not in message, message


def test_planned_model_is_none_without_model_data_and_the_settings_with_it():
    from labwright.models.deploy_data import planned_model

    assert planned_model({"tabbyapi_model_name": "x"}) is None
    planned = planned_model({"model": {"repo": "turboderp/Qwen3-8B-exl3", "revision": "4.0bpw"}})
    assert planned is not None and planned.path == "/srv/models/Qwen3-8B-exl3"
    with pytest.raises(BadInput, match="^model_repo: "):
        planned_model({"model_repo": "a//b"})


@pytest.mark.parametrize(("data", "start"), [
    ({"model_repo": "o/m", "model_endpoint": "http://[::1/v1"}, "model_endpoint: 'http://[::1/v1' is not a Hub URL"),
    ({"model_repo": "o/m", "model_endpoint": "http://hub:0"}, "model_endpoint: 'http://hub:0' is not a Hub URL"),
    ({"model_repo": "o/m", "model_venv": "/usr"}, "model_venv: '/usr' must be a dedicated absolute path"),
    ({"model_repo": "o/m", "model_dir": "/var/lib/"}, "model_dir: '/var/lib/' must be a dedicated absolute path"),
])
def test_typed_keys_refuse_bad_urls_and_system_directories(data, start):
    with pytest.raises(BadInput) as caught:
        settings(data)
    assert str(caught.value).startswith(start) and "\n" not in str(caught.value)
