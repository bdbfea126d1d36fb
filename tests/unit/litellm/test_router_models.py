"""LiteLLM in front of a llama.cpp router (llamacpp_models): one model per entry of the list, each by its name, all
on the router's one port and behind its one key."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.litellm.config import EngineHost, discover_engines, load_defaults

ENGINES = load_defaults()["engines"]


def test_every_model_of_a_router_is_one_litellm_model_on_its_port():
    host = EngineHost("@lxd/r", {"llamacpp_models": ["/srv/models/a.gguf", {"path": "/srv/b.gguf", "name": "chat"}],
                                 "llamacpp_port": 8080})
    models = discover_engines([host], ENGINES, lambda h: "10.99.9.20")
    assert [(m.name, m.model, m.api_base) for m in models] == [
        ("a", "openai/a", "http://10.99.9.20:8080/v1"), ("chat", "openai/chat", "http://10.99.9.20:8080/v1")]
    assert {m.key.path for m in models if m.key} == {"/etc/llama-server/api-key"}


def test_a_bad_router_list_is_the_deploys_own_line():
    host = EngineHost("@lxd/r", {"llamacpp_models": ["/srv/a.gguf", "/srv/other/a.gguf"]})
    with pytest.raises(DeployError, match=r"^llamacpp_models: two models are named 'a'"):
        discover_engines([host], ENGINES, lambda h: "10.99.9.20")
