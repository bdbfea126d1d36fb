"""labwright.litellm.config (discovery, cloud keys, aliases, rendering) and labwright.default_keys."""

from __future__ import annotations

import pytest
import yaml

from labwright.default_keys import KNOWN_DEFAULT_KEYS, check_not_default, check_text, find_default_keys
from labwright.errors import SafetyCheckFailed
from labwright.litellm.config import (
    ConfigError,
    EngineHost,
    build_gateway,
    cloud_models,
    discover_engines,
    load_defaults,
    metrics_refusal,
    parse_aliases,
    render_config,
    render_secrets,
)

ENGINES = load_defaults()["engines"]
ADDRESSES = {"@lxd/a": "10.99.9.10", "@lxd/b": "10.99.9.11", "ollama-box": "10.99.9.12"}
HAIKU = {"name": "haiku", "model": "openrouter/anthropic/claude-haiku-4.5", "key_env": "OPENROUTER_API_KEY"}


def lab() -> list[EngineHost]:
    return [
        EngineHost("@lxd/gw", {"llamacpp_model": "/srv/models/qwen3.5-4b.gguf"}, is_gateway=True),
        EngineHost("@lxd/a", {"llamacpp_model": "/srv/m.gguf", "llamacpp_alias": "coder-7b", "llamacpp_port": 8080}),
        EngineHost("@lxd/b", {"tabbyapi_model_name": "qwen3.5-9b-exl3"}),
        EngineHost("ollama-box", {"ollama_models": ["llama3.1", "qwen2.5-coder:1.5b"]}),
        EngineHost("@lxd/web", {"timezone": "Etc/UTC"}),
    ]


def engines():
    return discover_engines(lab(), ENGINES, lambda h: ADDRESSES[h.name])


def test_every_engine_host_is_discovered_with_its_address_and_port():
    found = {m.name: (m.model, m.api_base, m.source) for m in engines()}
    assert found == {
        "qwen3.5-4b": ("openai/qwen3.5-4b", "http://127.0.0.1:8001/v1", "llamacpp on @lxd/gw"),
        "coder-7b": ("openai/coder-7b", "http://10.99.9.10:8080/v1", "llamacpp on @lxd/a"),
        "qwen3.5-9b-exl3": ("openai/qwen3.5-9b-exl3", "http://10.99.9.11:5000/v1", "tabbyapi on @lxd/b"),
        "llama3.1": ("ollama_chat/llama3.1", "http://10.99.9.12:11434", "ollama on ollama-box"),
        "qwen2.5-coder:1.5b": ("ollama_chat/qwen2.5-coder:1.5b", "http://10.99.9.12:11434", "ollama on ollama-box"),
    }


def test_a_vllm_host_is_discovered_with_its_directory_name_and_key():
    hosts = [EngineHost("@lxd/gw", {"vllm_model": "/srv/models/Qwen2.5-7B-Instruct-AWQ"}, is_gateway=True),
             EngineHost("@lxd/a", {"vllm_model": "/srv/models/m", "vllm_served_model_name": "coder",
                                   "vllm_port": 8002, "vllm_api_key_file": "/etc/vllm/other-key"})]
    found = discover_engines(hosts, ENGINES, lambda h: ADDRESSES[h.name])
    assert [(m.name, m.api_base, m.source) for m in found] == [
        ("Qwen2.5-7B-Instruct-AWQ", "http://127.0.0.1:8000/v1", "vllm on @lxd/gw"),  # the whole name, not a stem
        ("coder", "http://10.99.9.10:8002/v1", "vllm on @lxd/a")]
    assert [m.key.path for m in found if m.key] == ["/etc/vllm/api-key", "/etc/vllm/other-key"]


def test_aliases_get_their_primary_and_fallbacks_and_render_as_yaml():
    cloud, secrets = cloud_models([HAIKU], {"OPENROUTER_API_KEY": "sk-or-real"})
    gateway = build_gateway(engines(), cloud, secrets,
                            parse_aliases({"fast": ["qwen3.5-4b", "qwen2.5-coder:1.5b"], "coder": "coder-7b, haiku"}))
    config = yaml.safe_load(render_config(gateway, num_retries=0, timeout=600))
    entries = {m["model_name"]: m["litellm_params"] for m in config["model_list"]}
    assert entries["fast"] == entries["qwen3.5-4b"]
    assert entries["coder"] == entries["coder-7b"]
    assert entries["haiku"]["api_key"] == "os.environ/OPENROUTER_API_KEY"
    assert config["router_settings"]["fallbacks"] == [{"fast": ["qwen2.5-coder:1.5b"]}, {"coder": ["haiku"]}]
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    assert "sk-or-real" not in render_config(gateway, 0, 600)
    assert render_secrets(gateway.secrets).splitlines()[-1] == 'OPENROUTER_API_KEY="sk-or-real"'


def test_metrics_turn_on_the_prometheus_callback_behind_the_master_key():
    """litellm_metrics (on by default): LiteLLM's prometheus callback, its /metrics only with a key LiteLLM accepts
    (litellm 1.80.0: litellm/proxy/common_utils/callback_utils.py lines 270-273 mount it for ``callbacks``;
    proxy_server.py lines 2301-2305 set ``require_auth_for_metrics_endpoint`` on litellm, which
    prometheus_auth_middleware.py line 72 reads)."""
    assert load_defaults()["service"]["metrics"] is True
    gateway = build_gateway(engines(), [], {}, {})
    on = yaml.safe_load(render_config(gateway, 0, 600, metrics=True))["litellm_settings"]
    assert on == {"drop_params": True, "telemetry": False, "callbacks": ["prometheus"],
                  "require_auth_for_metrics_endpoint": True}
    off = yaml.safe_load(render_config(gateway, 0, 600))["litellm_settings"]
    assert off == {"drop_params": True, "telemetry": False}


@pytest.mark.parametrize(("version", "open_"), [("1.80.0", True), ("1.80.17", True), ("2.0", True),
                                                ("1.79.3", False), ("1.46.0", False)])
def test_metrics_are_refused_below_the_first_open_release(version, open_):
    """1.79.3 takes PrometheusLogger from litellm-enterprise 0.1.20, which serves no metrics without a licence
    (litellm_enterprise/integrations/prometheus.py lines 47-57); 1.80.0 is the first open one."""
    refusal = metrics_refusal(version)
    if open_:
        assert refusal is None
    else:
        assert refusal is not None and refusal.startswith(f"litellm_metrics: LiteLLM {version}'s prometheus ")
        assert "litellm_version=1.80.0 or later, or litellm_metrics=false" in refusal and "\n" not in refusal


@pytest.mark.parametrize(("aliases", "words"), [
    ({"fast": ["qwen9"]}, "litellm_aliases: fast -> qwen9: not a model in this lab (known: coder-7b,"),
    ({"coder-7b": ["llama3.1"]}, "litellm_aliases: coder-7b is already a model's name"),
    ({"fast": []}, "litellm_aliases: fast: needs a list of model names"),
])
def test_bad_aliases(aliases, words):
    with pytest.raises(ConfigError) as error:
        build_gateway(engines(), [], {}, parse_aliases(aliases))
    assert str(error.value).startswith(words)


@pytest.mark.parametrize(("entry", "environ", "words"), [
    (HAIKU, {}, "haiku needs $OPENROUTER_API_KEY in the environment of the pyinfra run"),
    (HAIKU, {"OPENROUTER_API_KEY": "sk-1234"}, "is LiteLLM's documented example master key"),
    ({**HAIKU, "model": "haiku"}, {"OPENROUTER_API_KEY": "x"}, "needs a provider prefix"),
    ({**HAIKU, "key_env": "lower case"}, {}, "is not an environment variable name"),
    ({**HAIKU, "api_base": "http://plain"}, {"OPENROUTER_API_KEY": "x"}, "must be https://"),
    (HAIKU, {"OPENROUTER_API_KEY": 'a"b'}, "contains quotes"),
])
def test_bad_cloud_models(entry, environ, words):
    with pytest.raises(ConfigError) as error:
        cloud_models([entry], environ)
    assert str(error.value).startswith("litellm_cloud_models: ") and words in str(error.value)


def test_two_engines_with_one_name_are_refused():
    hosts = [EngineHost("@lxd/a", {"llamacpp_model": "/m/x.gguf"}),
             EngineHost("@lxd/b", {"llamacpp_model": "/n/x.gguf"})]
    with pytest.raises(ConfigError, match="'x' is served by llamacpp on @lxd/a and by llamacpp on @lxd/b"):
        build_gateway(discover_engines(hosts, ENGINES, lambda h: ADDRESSES[h.name]), [], {}, {})


def test_bad_engine_port_names_the_engine_host_key():
    hosts = [EngineHost("@lxd/a", {"llamacpp_model": "/m/x.gguf", "llamacpp_port": "eighty"})]
    with pytest.raises(ConfigError, match="^llamacpp_port: 'eighty' on @lxd/a is not a port number"):
        discover_engines(hosts, ENGINES, lambda h: ADDRESSES[h.name])


def test_known_default_keys_are_found_by_variable_never_by_value():
    text = "# LITELLM_MASTER_KEY=sk-1234\nLITELLM_MASTER_KEY=\"sk-1234\"\nPIPELINES_API_KEY='0p3n-w3bu!'\nOK=fine\n"
    assert find_default_keys(text) == [("LITELLM_MASTER_KEY", KNOWN_DEFAULT_KEYS["sk-1234"]),
                                       ("PIPELINES_API_KEY", KNOWN_DEFAULT_KEYS["0p3n-w3bu!"])]
    assert find_default_keys("master_key: sk-1234\n") == [("master_key", KNOWN_DEFAULT_KEYS["sk-1234"])]
    assert find_default_keys("Environment=PIPELINES_API_KEY=0p3n-w3bu!\n")[0][0] == "PIPELINES_API_KEY"
    assert find_default_keys("LITELLM_MASTER_KEY=sk-1234-but-longer\n") == []
    with pytest.raises(SafetyCheckFailed) as error:
        check_text(text, "/etc/litellm/master.env")
    assert "LITELLM_MASTER_KEY is LiteLLM's documented example master key" in str(error.value)
    with pytest.raises(SafetyCheckFailed, match="pipelines_api_key is Open WebUI pipelines' default API key"):
        check_not_default("0p3n-w3bu!", "pipelines_api_key")
    check_not_default("a-random-key", "x")
