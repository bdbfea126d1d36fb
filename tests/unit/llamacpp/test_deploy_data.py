"""labwright.llamacpp.deploy_data: the llama.cpp deploy's flags, command line, unit and refusals, without a host."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyinfra.api.exceptions import DeployError

from labwright.llamacpp.deploy_data import (
    DEFAULTS,
    command_line,
    flag_values,
    local_binary,
    ollama_environment,
    ollama_mode,
    settings_from,
    systemd_quote,
)


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "llama-server"
    path.write_bytes(b"\x7fELF not really")
    return path


def data(binary: Path, **more: object) -> dict[str, object]:
    return {"llamacpp_binary_src": str(binary), **{f"llamacpp_{k}": v for k, v in more.items()}}


def test_defaults_are_the_seed_flags_in_order(binary):
    s = settings_from(data(binary, model="/srv/models/q.gguf"))
    assert list(s.flags) == list(DEFAULTS["flags"])
    args = command_line(s.binary, s.model, s.alias, s.flags, s.extra)
    assert args[:3] == ["/usr/local/bin/llama-server", "--model", "/srv/models/q.gguf"]
    assert args[args.index("--ctx-size") + 1] == "131072" and "--metrics" in args and "--jinja" in args
    assert args[args.index("--chat-template-kwargs") + 1] == '{"enable_thinking":false}'
    assert s.health_url == "http://127.0.0.1:8001" and s.model_ids == ["/srv/models/q.gguf", "q.gguf"]
    assert s.binary_sha256 == hashlib.sha256(binary.read_bytes()).hexdigest()
    assert s.binary_stage == "/usr/local/bin/.llama-server.labwright-new"


def test_unit_quotes_the_json_argument_for_systemd(binary):
    unit = settings_from(data(binary, alias="qwen", extra_args=["--ssl-key-file", "/etc/k$y"])).render_unit()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert '"--chat-template-kwargs" ' not in exec_start and '"{\\"enable_thinking\\":false}"' in exec_start
    assert "--alias qwen" in exec_start and "/etc/k$$y" in exec_start


@pytest.mark.parametrize(("word", "quoted"), [("plain-word_1.2", "plain-word_1.2"), ("50%", '"50%%"'),
                                              ("$HOME", '"$$HOME"'), ('a "b"', '"a \\"b\\""'), ("", '""')])
def test_systemd_quote(word, quoted):
    assert systemd_quote(word) == quoted


def test_false_and_empty_flags_are_left_out(binary):
    flags = flag_values(data(binary, metrics=False, chat_template_kwargs=""))
    args = command_line("/b", "/m", "", flags, [])
    assert "--metrics" not in args and "--chat-template-kwargs" not in args and "--alias" not in args


@pytest.mark.parametrize(("more", "key", "words"), [
    ({"flash_attn": "sometimes"}, "flash_attn", "is not one of on, off, auto"),
    ({"cache_type_k": "q3"}, "cache_type_k", "not a cache type llama.cpp supports"),
    ({"flash_attn": "off"}, "cache_type_v", "quantized V cache"),
    ({"ubatch_size": 4096}, "ubatch_size", "out of range"),
    ({"port": "http"}, "port", "not a whole number"),
    ({"chat_template_kwargs": "{nope"}, "chat_template_kwargs", "not a JSON object"),
    ({"service": "Bad Name"}, "service", "not a user name"),
    ({"user": "root"}, "user", "not a valid name"),
    ({"model": "models/q.gguf"}, "model", "must be an absolute path"),
    ({"model": "/srv/m.gguf "}, "model", "space at an end"),
    ({"model": "/srv/x/../x/m.gguf"}, "model", "'..' part"),
    ({"model": ["/srv/m.gguf"]}, "model", "is a list; give one value"),
    ({"extra_args": [1, 2]}, "extra_args", "list of command-line words"),
    ({"binary_sha256": "abc"}, "binary_sha256", "not a sha256"),
    ({"binary_sha256": "0" * 64}, "binary_sha256", "has sha256"),
    # deploy-data sweep at 2b91fd1: each of these was a dry run with exit 0
    ({"alias": "a\nExecStartPre=/bin/touch /tmp/pwned\nX=\""}, "alias", "control character"),
    ({"llamacpp_binary": "/usr/bin/python3"}, "binary", "system directory"),
    ({"llamacpp_binary": "/etc"}, "binary", "system directory"),
    ({"service": "ssh"}, "service", "the system already has"),
    ({"service": "systemd-networkd"}, "service", "the system already has"),
    ({"user": "nobody"}, "user", "the system already has"),
    ({"restart": "sometimes"}, "restart", "sometimes"),
    ({"extra_args": ["--port", "9"]}, "extra_args", "--port is set by the deploy's own keys"),
    ({"extra_args": ["--ctx-size=9"]}, "extra_args", "--ctx-size is set by the deploy's own keys"),
    ({"extra_args": ["a\nb"]}, "extra_args", "control character"),
    ({"chat_template_kwargs": {"enable_thinking": float("nan")}}, "chat_template_kwargs", "not plain JSON"),
    ({"ctx_size": 99999999999999999999}, "ctx_size", "out of range"),
    ({"parallel": 10**6}, "parallel", "out of range"),
])
def test_refusals_are_one_line_naming_the_key(binary, more, key, words):
    with pytest.raises(DeployError) as error:
        settings_from({**data(binary), **{k if k.startswith("llamacpp_") else f"llamacpp_{k}": v
                                           for k, v in more.items()}})
    message = str(error.value)
    assert message.startswith(f"llamacpp_{key}: ") and words in message and "\n" not in message


def test_a_program_of_its_own_may_live_in_usr_local_or_an_owned_directory(binary):
    for path in ("/usr/local/bin/llama-server", "/opt/llama/bin/llama-server", "/srv/llama/llama-server"):
        assert settings_from({**data(binary), "llamacpp_binary": path}).binary == path


def test_a_missing_binary_says_how_to_build_it(tmp_path):
    with pytest.raises(DeployError, match="llamacpp_binary_src: .* does not exist; build it with"):
        local_binary({"llamacpp_binary_src": str(tmp_path / "none")})


def test_sha256_from_the_sidecar_or_an_all_digit_number(binary):
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    Path(f"{binary}.sha256").write_text(f"{digest}  llama-server\n")
    assert local_binary({"llamacpp_binary_src": str(binary)}) == (str(binary), digest)
    Path(f"{binary}.sha256").write_text("0" * 64 + "\n")
    with pytest.raises(DeployError, match="expected 0000"):
        local_binary({"llamacpp_binary_src": str(binary)})
    # --data turns an all-digit digest into an int, dropping leading zeros: it is spelled back as 64 digits.
    with pytest.raises(DeployError, match="expected 0{60}1234"):
        local_binary({"llamacpp_binary_src": str(binary), "llamacpp_binary_sha256": 1234})


def test_ollama_environment_and_refusals():
    assert ollama_mode({}) == "auto"
    with pytest.raises(DeployError, match="llamacpp_ollama_override: 'maybe'"):
        ollama_mode({"llamacpp_ollama_override": "maybe"})
    assert ollama_environment({}) == {"OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_KV_CACHE_TYPE": "q4_0",
                                      "OLLAMA_KEEP_ALIVE": "-1", "OLLAMA_CONTEXT_LENGTH": "131072"}
    with pytest.raises(DeployError, match="llamacpp_ollama_kv_cache_type: q8_0 needs"):
        ollama_environment({"llamacpp_ollama_kv_cache_type": "q8_0", "llamacpp_ollama_flash_attention": False})
    with pytest.raises(DeployError, match="llamacpp_ollama_keep_alive"):
        ollama_environment({"llamacpp_ollama_keep_alive": "5m$"})


@pytest.mark.parametrize(("more", "line"), [
    ({"llamacpp_api_key_file": "/usr/bin/api-key"}, "llamacpp_api_key_file: '/usr/bin/api-key': its directory "
                                                    "'/usr/bin' is a system directory"),
    ({"llamacpp_host": "999.1.1.1"}, "llamacpp_host: '999.1.1.1' is not a valid IP address"),
    ({"llamacpp_metrics": "maybe"}, "llamacpp_metrics: 'maybe' is not a boolean"),
    ({"llamacpp_port": 8880, "kokoro_port": 8880}, "llamacpp_port and kokoro_port are both port 8880 on this host"),
])
def test_typed_keys_and_clashes_are_one_line(more, line):
    from labwright.llamacpp.deploy_data import settings_from

    with pytest.raises(DeployError) as caught:
        settings_from(more)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("more", "key"), [({"ollama_kv_cache_type": "q5_0"}, "ollama_kv_cache_type"),
                                           ({"ollama_context_length": -1}, "ollama_context_length"),
                                           ({"port": 0}, "port"), ({"prot": 8001}, "prot")])
def test_the_checks_that_need_no_host_run_on_the_data_alone(binary, more, key):
    """Sweep at 2b91fd1: the Ollama keys were checked only where Ollama was found, and every llama.cpp refusal came
    after nvidia-smi had run on the host; check_data is what the deploy runs before its first fact."""
    from labwright.llamacpp.deploy_data import check_data

    with pytest.raises(DeployError, match=f"^llamacpp_{key}"):
        check_data(data(binary, **more))
    check_data(data(binary))
