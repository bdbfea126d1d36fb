"""The engine deploys take deploys/model.py's keys: which model they download and where their config then points
(pure: host data in, settings out; every refusal one line naming the key)."""

from __future__ import annotations

import pytest
import yaml

from labwright.errors import BadInput
from labwright.llamacpp.deploy_data import downloaded_model as llamacpp_model
from labwright.llamacpp.deploy_data import settings_from as llamacpp_settings
from labwright.models.deploy_data import engine_model
from labwright.tabbyapi.deploy_data import downloaded_model as tabbyapi_model
from labwright.tabbyapi.deploy_data import settings_from as tabbyapi_settings

GGUF = {"model_repo": "unsloth/Qwen3-0.6B-GGUF", "model_file": "Qwen3-0.6B-Q8_0.gguf", "model_name": "qwen3-0.6b"}
EXL3 = {"model_repo": "turboderp/Qwen3-8B-exl3", "model_revision": "4.0bpw", "model_name": "Qwen3-8B-exl3"}


def test_no_model_keys_no_download():
    assert engine_model({"llamacpp_model": "/srv/models/x.gguf"}, "llama.cpp", gguf=True) is None
    data, planned = llamacpp_model({"llamacpp_model": "/srv/models/x.gguf"})
    assert planned is None and data == {"llamacpp_model": "/srv/models/x.gguf"}


def test_llamacpp_serves_the_downloaded_gguf(tmp_path):
    data, planned = llamacpp_model({**GGUF, "model_dir": "/tank/models"})
    assert planned is not None and planned.path == "/tank/models/qwen3-0.6b/Qwen3-0.6B-Q8_0.gguf"
    assert data["llamacpp_model"] == planned.path
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"stand-in binary")
    settings = llamacpp_settings({**data, "llamacpp_binary_src": str(binary)})
    assert settings.exec_start.split()[1:3] == ["--model", planned.path]  # llama-server -m points at it


def test_llamacpp_same_path_given_twice_is_fine_another_is_refused():
    same = f"/srv/models/{GGUF['model_name']}/{GGUF['model_file']}"
    assert llamacpp_model({**GGUF, "llamacpp_model": same})[0]["llamacpp_model"] == same
    with pytest.raises(BadInput, match=r"^llamacpp_model: '/srv/models/other.gguf' and model_repo "
                                       r"unsloth/Qwen3-0.6B-GGUF both name the model: drop llamacpp_model"):
        llamacpp_model({**GGUF, "llamacpp_model": "/srv/models/other.gguf"})


def test_llamacpp_needs_one_gguf_file():
    with pytest.raises(BadInput, match=r"^model_file: llama.cpp serves one GGUF file: name it with model_file"):
        llamacpp_model(EXL3)


def test_tabbyapi_points_model_dir_and_name_at_the_download():
    data, planned = tabbyapi_model({**EXL3, "model_dir": "/models"})
    assert planned is not None and planned.spec.revision == "4.0bpw"
    settings = tabbyapi_settings(data)
    assert (settings.model_dir, settings.model_name, settings.model_path) == ("/models", "Qwen3-8B-exl3",
                                                                             "/models/Qwen3-8B-exl3")
    model = yaml.safe_load(settings.render_config())["model"]
    assert (model["model_dir"], model["model_name"]) == ("/models", "Qwen3-8B-exl3")


def test_tabbyapi_the_table_form_works_too():
    data, planned = tabbyapi_model({"model": {"repo": "turboderp/Qwen3-8B-exl3", "allow": ["*.json"]}})
    assert planned is not None and data["tabbyapi_model_name"] == "Qwen3-8B-exl3"
    assert data["tabbyapi_model_dir"] == "/srv/models"


@pytest.mark.parametrize("extra, needle", [
    ({"tabbyapi_model_name": "other"}, "tabbyapi_model_name: 'other' and model_repo turboderp/Qwen3-8B-exl3 both name"),
    ({"tabbyapi": {"model_dir": "/elsewhere"}}, "tabbyapi_model_dir: '/elsewhere' and model_repo"),
])
def test_tabbyapi_another_model_place_is_refused(extra, needle):
    with pytest.raises(BadInput) as caught:
        tabbyapi_model({**EXL3, **extra})
    assert str(caught.value).startswith(needle) and "\n" not in str(caught.value)


def test_tabbyapi_refuses_a_gguf():
    with pytest.raises(BadInput, match=r"^model_file: 'Qwen3-0.6B-Q8_0.gguf': tabbyAPI loads a model directory"):
        tabbyapi_model(GGUF)


@pytest.mark.parametrize("data, needle", [
    ({"model_revision": "v1"}, "model_repo: is required with the other model_* keys"),
    ({"model_repo": "lab/x--y", "model_file": "a.gguf"}, "model_repo: 'lab/x--y' contains '--'"),
    ({"model_repo": "lab/x", "model_file": "a.gguf", "model_revison": "v1"}, "model_revison: not a key"),
    ({"model_repo": "lab/x", "model_file": "a.gguf", "model_revision": "abc1234"}, "model_revision: 'abc1234' looks "
                                                                                   "like an abbreviated"),
])
def test_bad_model_data_is_one_line_naming_the_key(data, needle):
    with pytest.raises(BadInput) as caught:
        llamacpp_model(data)
    assert str(caught.value).startswith(needle) and "\n" not in str(caught.value)
