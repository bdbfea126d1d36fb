"""deploys/tabbyapi.py's data rules (labwright.tabbyapi.deploy_data): defaults, one-line refusals, rendered files."""

from __future__ import annotations

import pytest
import yaml

from labwright.errors import BadInput
from labwright.facts.git import GitCheckout
from labwright.tabbyapi.deploy_data import check_cache_mode, load_defaults, round_cache_size, settings_from


def test_defaults_render_a_config_tabbyapi_can_read():
    s = settings_from({})
    config = yaml.safe_load(s.render_config())
    defaults = load_defaults()["config"]
    assert config["network"] == {"host": defaults["host"], "port": defaults["port"], "disable_auth": False}
    assert config["model"]["cache_mode"] == "8,4" and config["model"]["cache_size"] == defaults["cache_size"]
    assert config["memory"]["sysmem_recurrent_cache"] == 4096
    assert s.stack == load_defaults()["stack"]["default"]
    assert "api_key" not in s.render_config()


@pytest.mark.parametrize(("given", "rounded"), [(1, 256), (256, 256), (257, 512), (5000, 5120), (195072, 195072)])
def test_cache_size_rounds_up_to_whole_pages(given, rounded):
    assert round_cache_size(given) == rounded
    s = settings_from({"tabbyapi_cache_size": given})
    assert s.cache_size == rounded and s.cache_rounded == (given != rounded)
    if given != rounded:
        assert f"{given} is not a multiple of 256; rounded up to {rounded}" in s.cache_note
        assert f"{given} was asked for, rounded up" in s.render_config()


@pytest.mark.parametrize(("mode", "normal"), [("8,4", "8,4"), ("4, 4", "4,4"), ("2,8", "2,8"), ("fp16", "FP16"),
                                              ("Q8", "Q8")])
def test_cache_modes_tabbyapi_accepts(mode, normal):
    assert check_cache_mode(mode) == normal


@pytest.mark.parametrize("mode", ["9,4", "8", "1,4", "8,4,4", "q5", "", "8;4"])
def test_cache_modes_refused_in_one_line(mode):
    with pytest.raises(BadInput) as caught:
        settings_from({"tabbyapi_cache_mode": mode})
    message = str(caught.value)
    assert message.startswith("tabbyapi_cache_mode: ") and "\n" not in message and "8,4" in message


@pytest.mark.parametrize(("data", "key"), [
    ({"tabbyapi_draft_model_name": "tiny-draft"}, "tabbyapi_draft_model_name"),
    ({"tabbyapi_port": 70000}, "tabbyapi_port"),
    ({"tabbyapi_ref": "a b"}, "tabbyapi_ref"),
    ({"tabbyapi_ref": "../x"}, "tabbyapi_ref"),
    ({"tabbyapi_user": "root"}, "tabbyapi_user"),
    ({"tabbyapi_model_name": "a/b"}, "tabbyapi_model_name"),
    ({"tabbyapi_dir": "relative"}, "tabbyapi_dir"),
    ({"tabbyapi_extra": {"model": {"cache_size": 1}}}, "tabbyapi_extra"),
    ({"tabbyapi_gpu": "maybe"}, "tabbyapi_gpu"),
    ({"tabbyapi_restart": "sometimes"}, "tabbyapi_restart"),
    ({"tabbyapi": {"cache_sise": 1}}, "tabbyapi: unknown key"),
])
def test_bad_data_is_one_line_naming_the_key(data, key):
    with pytest.raises(BadInput) as caught:
        settings_from(data)
    assert str(caught.value).startswith(key) and "\n" not in str(caught.value)


def test_a_draft_model_without_ngram_is_fine():
    s = settings_from({"tabbyapi_draft_model_name": "tiny-draft", "tabbyapi_ngram_match_min": 0})
    assert yaml.safe_load(s.render_config())["draft_model"]["draft_model_name"] == "tiny-draft"


def test_flat_keys_win_over_the_inventory_dict_and_stack_is_top_level():
    s = settings_from({"tabbyapi": {"model_name": "a", "port": 5001}, "tabbyapi_model_name": "b", "stack": "C"})
    assert (s.model_name, s.port, s.stack) == ("b", 5001, "C")


def test_extra_sections_are_rendered():
    s = settings_from({"tabbyapi_extra": {"logging": {"log_prompt": False}}})
    assert yaml.safe_load(s.render_config())["logging"] == {"log_prompt": False}


def test_unit_runs_main_py_from_the_venv_with_a_restart_policy():
    unit = settings_from({"tabbyapi_restart_sec": 7}).render_unit()
    assert "ExecStart=/opt/tabbyapi/.venv/bin/python /opt/tabbyapi/main.py" in unit
    assert "Restart=on-failure" in unit and "RestartSec=7" in unit and "User=tabbyapi" in unit


def test_git_checkout_fact_parses_and_resolves_only_tags_and_commits_locally():
    fact = GitCheckout()
    tag = fact.command("/opt/t", "v1")
    assert "refs/tags/v1^{commit}" in tag and "'v1^{commit}'" not in tag
    assert "'abc1234^{commit}'" in fact.command("/opt/t", "abc1234")
    out = ["@@labwright-git-head", "a" * 40, "@@labwright-git-origin", "http://x/", "@@labwright-git-ref_commit"]
    assert fact.process(out) == {"head": "a" * 40, "origin": "http://x/", "ref_commit": None}


def test_the_example_inventory_is_valid_tabbyapi_data():
    from pathlib import Path

    from labwright.inventory import load_inventory

    gpu, = load_inventory(Path(__file__).resolve().parents[3] / "inventories" / "lab.py").group("gpu_guests")
    data = gpu.data
    s = settings_from(data)
    assert (s.stack, s.model_path, s.cache_mode) == ("C", "/models/Qwen3-14B-exl3-4.0bpw", "8,4")
    assert s.model_dir == data["guest"]["mounts"][0]["guest"]  # the model mount the guest declares


def test_out_of_vram_message_names_the_cache_and_the_key():
    from labwright.tabbyapi.deploy_data import OOM_LINE

    message = settings_from({"tabbyapi_cache_size": 4096, "tabbyapi_cache_mode": "4,4"}).oom_message
    assert message.startswith("tabbyapi: out of VRAM at start: cache_size 4096 (cache_mode 4,4)")
    assert OOM_LINE in message and "lower tabbyapi_cache_size" in message and "\n" not in message


@pytest.mark.parametrize(("data", "line"), [
    ({"tabbyapi_dir": "/etc"}, "tabbyapi_dir: '/etc' is a system directory"),
    ({"tabbyapi_venv": "/usr/"}, "tabbyapi_venv: '/usr' is a system directory"),
    ({"tabbyapi_root": "/var"}, "tabbyapi_root: '/var' is a system directory"),
    ({"tabbyapi_host": "999.1.1.1"}, "tabbyapi_host: '999.1.1.1' is not a valid IP address"),
    ({"tabbyapi_port": "0"}, "tabbyapi_port: 0 is out of range"),
])
def test_typed_keys_refuse_system_directories_and_bad_addresses(data, line):
    with pytest.raises(BadInput) as caught:
        settings_from(data)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("data", "line"), [
    ({"litellm_port": 5000}, "tabbyapi_port and litellm_port are both port 5000 on this host"),
    ({"tabbyapi_root": "/opt/tabbyapi/.venv/stacks"}, "tabbyapi_root (/opt/tabbyapi/.venv/stacks) is inside "
                                                      "tabbyapi_venv (/opt/tabbyapi/.venv), a venv"),
    ({"kokoro_venv": "/opt/tabbyapi/"}, "tabbyapi_dir and kokoro_venv are both /opt/tabbyapi"),
])
def test_a_clash_with_the_hosts_other_deploys_names_both_keys(data, line):
    with pytest.raises(BadInput) as caught:
        settings_from(data)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


def test_the_deploys_own_nesting_is_no_clash():
    assert settings_from({"tabbyapi_dir": "/srv/tabby", "tabbyapi_venv": "/srv/tabby/.venv"}).venv == "/srv/tabby/.venv"
