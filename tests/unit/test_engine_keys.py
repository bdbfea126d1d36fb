"""Every engine behind a key (issue 31): llama-server's --api-key-file made on the host, the refusals about key
files, the gateway's and Open WebUI's wiring of the real keys, Kokoro on loopback.

The shell steps run for real here (``sh``, ``python3``) in a temporary directory standing in for the host."""

from __future__ import annotations

import hashlib
import json
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pyinfra.api.exceptions import DeployError

from labwright.engine_keys import is_loopback, key_file_refusal
from labwright.litellm.config import (
    KEY_VALUE,
    ConfigError,
    EngineHost,
    build_gateway,
    discover_engines,
    load_defaults,
    local_keys_script,
    parse_aliases,
    render_config,
    render_secrets,
)
from labwright.llamacpp import build
from labwright.llamacpp.deploy_data import settings_from
from labwright.operations.secrets import KEY_SCRIPT

ENGINES = load_defaults()["engines"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CPU build in a build cache of its own, as labwright.llamacpp.build leaves it."""
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path))
    version = build.cache_dir()
    version.mkdir(parents=True)
    (version / "llama-server").write_bytes(b"cpu build")
    # its sha256 beside it, as every build leaves it (a binary without one is never trusted: build.cached_build_problem)
    (version / "llama-server.sha256").write_text(hashlib.sha256(b"cpu build").hexdigest() + "\n")
    return version


# --- llama-server: --api-key-file unless open on purpose ---------------------------------------------------------

def test_llama_server_reads_its_key_from_the_file_made_on_the_host(cache: Path) -> None:
    s = settings_from({}, None)
    words = s.exec_start.split()
    assert words[words.index("--api-key-file") + 1] == "/etc/llama-server/api-key"
    assert "--api-key" not in words  # never the key itself on the command line (ps shows it to every user)
    assert s.key_file == "/etc/llama-server/api-key" and not s.open
    moved = settings_from({"llamacpp_api_key_file": "/etc/llm/key"}, None)
    assert "--api-key-file /etc/llm/key" in moved.exec_start


@pytest.mark.parametrize("value", [True, "true", "yes", "on", "1"])
def test_an_open_engine_is_asked_for_by_name_and_has_no_key(cache: Path, value: object) -> None:
    s = settings_from({"llamacpp_open": value}, None)
    assert s.open and s.key_file == "" and "--api-key" not in s.exec_start


@pytest.mark.parametrize(("data", "words"), [
    ({"llamacpp_extra_args": ["--api-key", "abc"]}, "llamacpp_extra_args: --api-key: the API key is made on the host"),
    ({"llamacpp_extra_args": "--api-key-file=/tmp/k"}, "llamacpp_extra_args: --api-key-file: the API key is made"),
    ({"llamacpp_api_key_file": "api-key"}, "llamacpp_api_key_file: "),
    ({"llamacpp_api_key_file": "/api-key"}, "llamacpp_api_key_file: '/api-key' must be a file in a directory"),
    ({"llamacpp_open": "maybe"}, "llamacpp_open: "),
])
def test_bad_key_data_is_one_line_naming_the_key(cache: Path, data: dict[str, object], words: str) -> None:
    with pytest.raises(DeployError) as error:
        settings_from(data, None)
    assert str(error.value).startswith(words) and "\n" not in str(error.value)


@given(st.text(alphabet=";|&<>$`'\" \n\\", min_size=1, max_size=4), st.text(alphabet="abc/", max_size=6))
def test_a_key_file_path_with_shell_characters_is_refused(bad: str, rest: str) -> None:
    with pytest.raises(DeployError) as error:
        settings_from({"llamacpp_api_key_file": f"/etc/{rest}{bad}key", "llamacpp_binary_src": __file__}, None)
    assert str(error.value).startswith("llamacpp_api_key_file: ") and "\n" not in str(error.value)


# --- the key file: refused when open to other users or not root's --------------------------------------------------

@given(st.integers(min_value=0, max_value=0o777), st.sampled_from(["root", "llama", "nobody"]))
def test_a_key_file_is_refused_exactly_when_others_may_use_it_or_root_does_not_own_it(mode: int, user: str) -> None:
    info = {"mode": int(f"{mode:o}"), "user": user, "group": "llama"}  # pyinfra's File fact: octal digits
    refusal = key_file_refusal("llamacpp_api_key_file", "/etc/llama-server/api-key", info, "@lxd/n1")
    if mode & 0o007 or user != "root":
        assert refusal is not None and "\n" not in refusal
        assert refusal.startswith("llamacpp_api_key_file: /etc/llama-server/api-key on @lxd/n1 ")
        assert ("chmod 640 /etc/llama-server/api-key" if mode & 0o007 else "chown root /etc/llama-server/api-key") \
            in refusal
        assert refusal.endswith("(nothing was changed)")
    else:
        assert refusal is None


def test_a_missing_key_file_is_refused_only_where_a_reader_needs_it() -> None:
    assert key_file_refusal("k", "/etc/x/key", False, "h") is None
    refusal = key_file_refusal("llamacpp_api_key_file", "/etc/x/key", None, "@lxd/n1", missing="deploy the engine")
    assert refusal == ("llamacpp_api_key_file: /etc/x/key does not exist on @lxd/n1; deploy the engine (nothing was "
                       "changed)")


def test_the_key_made_on_the_host_is_random_and_one_line() -> None:
    keys = {subprocess.run(["python3", "-c", KEY_SCRIPT], capture_output=True, text=True, check=True).stdout
            for _ in range(3)}
    assert len(keys) == 3
    for key in keys:
        assert key.endswith("\n") and key.count("\n") == 1 and KEY_VALUE.match(key.strip())
        assert len(key.strip()) >= 40  # 32 random bytes, URL-safe


def test_engine_key_command_makes_the_key_once_0640_in_a_0750_directory(tmp_path: Path) -> None:
    """The operation's command (tests/unit/operations/secrets.engine_key/generated_on_the_host.json), run by a real
    sh on a stand-in tree: made once, kept on the second run, modes as promised, no key in the command."""
    case = json.loads((Path(__file__).parent / "operations/secrets.engine_key/generated_on_the_host.json").read_text())
    path = tmp_path / "llama-server" / "api-key"
    command = case["commands"][0].replace("/etc/llama-server", str(path.parent)).replace("root:llama", "root:root")
    sh(command)
    first = path.read_text()
    assert sh(command).returncode == 0 and path.read_text() == first and KEY_VALUE.match(first.strip())
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and stat.S_IMODE(path.parent.stat().st_mode) == 0o750
    assert not (tmp_path / "llama-server" / "api-key.new").exists()


# --- the gateway: the real keys, by reference; local ones copied on the guest --------------------------------------

def lab() -> list[EngineHost]:
    return [
        EngineHost("@lxd/gw", {"llamacpp_model": "/srv/m.gguf", "llamacpp_alias": "tiny-a"}, is_gateway=True),
        EngineHost("@lxd/n2", {"llamacpp_model": "/srv/m.gguf", "llamacpp_alias": "tiny-b",
                               "llamacpp_api_key_file": "/etc/llm/key"}),
        EngineHost("@lxd/gpu", {"tabbyapi_model_name": "qwen", "tabbyapi_dir": "/srv/tabby"}),
        EngineHost("@lxd/gpu2", {"tabbyapi_model_name": "qwen2", "tabbyapi": {"dir": "/srv/tabby2"}}),
        EngineHost("@lxd/open", {"llamacpp_model": "/srv/o.gguf", "llamacpp_alias": "tiny-open",
                                 "llamacpp_open": "true"}),
        EngineHost("@lxd/old", {"ollama_models": ["llama3"]}),
    ]


def test_the_gateway_reads_each_engines_own_key_and_never_sends_none_to_a_keyed_engine() -> None:
    engines = discover_engines(lab(), ENGINES, lambda h: "10.0.0.9")
    gateway = build_gateway(engines, [], {}, parse_aliases({"fast": ["tiny-b", "tiny-a"]}))
    config = yaml.safe_load(render_config(gateway, 0, 600))
    keys = {m["model_name"]: m["litellm_params"]["api_key"] for m in config["model_list"]}
    assert keys == {"tiny-a": "os.environ/ENGINE_KEY_LLAMACPP_LXD_GW",
                    "tiny-b": "os.environ/ENGINE_KEY_LLAMACPP_LXD_N2",
                    "qwen": "os.environ/ENGINE_KEY_TABBYAPI_LXD_GPU",
                    "qwen2": "os.environ/ENGINE_KEY_TABBYAPI_LXD_GPU2",
                    "tiny-open": "none",       # open on purpose
                    "llama3": "none",          # Ollama has no key
                    "fast": "os.environ/ENGINE_KEY_LLAMACPP_LXD_N2"}  # an alias: its primary's key
    where = {k.env: (k.path, k.name, k.local) for k in gateway.engine_keys}
    assert where == {"ENGINE_KEY_LLAMACPP_LXD_GW": ("/etc/llama-server/api-key", "", True),
                     "ENGINE_KEY_LLAMACPP_LXD_N2": ("/etc/llm/key", "", False),
                     "ENGINE_KEY_TABBYAPI_LXD_GPU": ("/srv/tabby/api_tokens.yml", "api_key", False),
                     "ENGINE_KEY_TABBYAPI_LXD_GPU2": ("/srv/tabby2/api_tokens.yml", "api_key", False)}
    text = render_secrets({}, {"ENGINE_KEY_LLAMACPP_LXD_N2": "lw-remote-key-0123456789"})
    assert 'ENGINE_KEY_LLAMACPP_LXD_N2="lw-remote-key-0123456789"' in text.splitlines()


def test_two_hosts_whose_names_map_to_one_key_variable_are_refused() -> None:
    hosts = [EngineHost("@lxd/a-b", {"llamacpp_model": "/m.gguf", "llamacpp_alias": "x"}),
             EngineHost("@lxd/a_b", {"llamacpp_model": "/m.gguf", "llamacpp_alias": "y"})]
    with pytest.raises(ConfigError, match=r"^litellm_engines: @lxd/a-b and @lxd/a_b both map to the key variable "
                                          r"ENGINE_KEY_LLAMACPP_LXD_A_B; rename one"):
        build_gateway(discover_engines(hosts, ENGINES, lambda h: "10.0.0.9"), [], {}, {})


def sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)


def test_local_keys_are_copied_on_the_guest_0600_and_reported_current(tmp_path: Path) -> None:
    llama, tokens, target = tmp_path / "api-key", tmp_path / "api_tokens.yml", tmp_path / "engines-local.env"
    llama.write_text("# made by labwright\nlw-abcdefghijklmnopqrstuvwxyz0123\n")
    tokens.write_text("api_key: 0123456789abcdef0123456789\nadmin_key: ffff\n")
    engines = discover_engines([EngineHost("@lxd/gw", {"llamacpp_model": "/m.gguf", "llamacpp_api_key_file":
                                                       str(llama)}, True),
                                EngineHost("@lxd/gw2", {"tabbyapi_model_name": "q", "tabbyapi_dir": str(tmp_path)},
                                           True)], ENGINES, lambda h: "x")
    keys = build_gateway(engines, [], {}, {}).engine_keys
    assert sh(local_keys_script(keys, str(target), check=True)).stdout.strip() == "stale"
    written = sh(local_keys_script(keys, str(target)))
    assert written.returncode == 0, written.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    lines = target.read_text().splitlines()
    assert lines[1:] == ['ENGINE_KEY_LLAMACPP_LXD_GW="lw-abcdefghijklmnopqrstuvwxyz0123"',
                         'ENGINE_KEY_TABBYAPI_LXD_GW2="0123456789abcdef0123456789"']
    assert sh(local_keys_script(keys, str(target), check=True)).stdout.strip() == "current"
    # no key appears in the scripts themselves: they read the files on the guest
    assert "lw-abcdef" not in local_keys_script(keys, str(target))


@pytest.mark.parametrize("content", ["", "has a space in it 0123456789\n", 'quote"d-0123456789abcdef\n'])
def test_a_missing_or_unusable_local_key_stops_the_write_naming_the_file(tmp_path: Path, content: str) -> None:
    key, target = tmp_path / "api-key", tmp_path / "engines-local.env"
    if content:
        key.write_text(content)
    [engine] = discover_engines([EngineHost("@lxd/gw", {"llamacpp_model": "/m.gguf", "llamacpp_api_key_file":
                                                        str(key)}, True)], ENGINES, lambda h: "x")
    result = sh(local_keys_script(build_gateway([engine], [], {}, {}).engine_keys, str(target)))
    assert result.returncode == 1 and not target.exists()
    assert result.stderr.strip() == f"labwright: no usable key in {key} (deploy the engine on this host first)"


# --- Kokoro: loopback only unless open on purpose -------------------------------------------------------------------

@given(st.ip_addresses())
def test_loopback_is_exactly_127_0_0_0_8_and_ipv6_1(address: object) -> None:
    text = str(address)
    assert is_loopback(text) == (text.startswith("127.") or text == "::1")


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.1.2.3", "lab-host", ""])
def test_every_other_address_is_not_loopback(address: str) -> None:
    assert not is_loopback(address)


def test_kokoro_defaults_to_loopback_and_closed() -> None:
    from labwright.kokoro.deploy_data import load_defaults as kokoro_defaults

    service = kokoro_defaults()["service"]
    assert (service["host"], service["open"]) == ("127.0.0.1", False)
    assert re.search(r"no API key", (Path(__file__).parents[2] / "templates/kokoro/defaults.toml")
                     .read_text())


# --- an engine only the gateway on its own guest uses binds to loopback ---------------------------------------------

def test_auto_host_is_loopback_only_for_the_gateway_on_the_same_guest(cache: Path) -> None:
    assert settings_from({}, None).flags["host"] == "0.0.0.0"
    assert settings_from({}, None, gateway_only=True).flags["host"] == "127.0.0.1"
    assert "--host 127.0.0.1" in settings_from({}, None, gateway_only=True).exec_start
    # an explicit address always wins
    assert settings_from({"llamacpp_host": "0.0.0.0"}, None, gateway_only=True).flags["host"] == "0.0.0.0"
    with pytest.raises(DeployError, match=r"^llamacpp_host: '0.0.0.0;id' is not an IP address or a host name"):
        settings_from({"llamacpp_host": "0.0.0.0;id"}, None)


GATEWAY = {"llamacpp_model": "/m.gguf", "litellm_aliases": {"fast": ["m"]}}
ENGINE_ONLY = {"llamacpp_model": "/m.gguf"}


@pytest.mark.parametrize(("this", "others", "alone"), [
    (GATEWAY, [], True),                                                    # the gateway and its engine, alone
    (GATEWAY, [{"llamacpp_model": "/n.gguf", "litellm_engine_address": "10.0.0.2"}], True),  # other engines only
    (GATEWAY, [{"openwebui_admin_email": "a@b.c"}], False),                 # Open WebUI elsewhere calls it
    (GATEWAY, [{"litellm_port": 4001}], False),                             # another gateway elsewhere
    (ENGINE_ONLY, [], False),                                               # no gateway here: others may call it
    ({"llamacpp_model": "/m.gguf", "litellm_engine_address": "10.0.0.1"}, [], False),  # an engine host's key only
    ({**ENGINE_ONLY, "gateway_clients": "a"}, [], True),                    # the TLS gateway (deploys/gateway.py)
    ({**ENGINE_ONLY, "gateway_clients": "a"}, [{"monitoring_listen": "x"}], False),  # Prometheus elsewhere scrapes it
    ({**ENGINE_ONLY, "monitoring_listen": "x"}, [], False),                 # Prometheus on it, no entrance: as before
    (GATEWAY, [{"gateway_clients": "a"}], False),                           # a TLS gateway elsewhere calls it
])
def test_gateway_only_reads_the_whole_inventory(this: dict, others: list[dict], alone: bool) -> None:
    from labwright.engine_keys import gateway_only

    assert gateway_only(this, others) is alone
