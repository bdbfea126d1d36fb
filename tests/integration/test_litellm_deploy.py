"""deploys/litellm.py for real: the REAL LiteLLM proxy (PyPI) in front of two REAL llama-servers, in lab containers.

Two fresh containers, each running deploys/llamacpp.py's llama-server on a tiny generated GGUF (aliases tiny-a and
tiny-b); the gateway container also runs the proxy. The inventory lists both engine hosts, so the gateway's
config.yaml comes from discovery, not from a list in the test. litellm[proxy] is installed from a wheelhouse cached
under ~/.cache/labwright/litellm/ (lab containers cannot verify PyPI's certificate here), attached read-only to the
gateway container. Which engine answered is read from llama-server's own /metrics counters.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labwright.lab.lab import instance_address
from labwright.litellm.config import load_defaults
from labwright.litellm.wheelhouse import wheelhouse
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.paths import verify_suite
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, tool_env
from support.tiny_engine import (
    MODEL,
    REPO,
    deploy_tiny_engines,
    engine_key,
    guest_python,
    guest_sh,
    tokens_predicted,
)

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

WHEELS = "/mnt/litellm-wheels"
PORT = 4000
ENGINE_PORT = 8001
UNIT = "/etc/systemd/system/litellm.service"
ALIASES = '{"fast": ["tiny-a", "tiny-b"], "local": ["tiny-b"]}'


class Gateway:
    def __init__(self, lab: Lab, gw: str, engine: str, inventory: Path):
        self.lab, self.gw, self.engine, self.inventory = lab, gw, engine, inventory
        self.gw_address = instance_address(lab.client, gw) or ""
        self.engine_address = instance_address(lab.client, engine) or ""
        self.before: subprocess.CompletedProcess[str] | None = None
        self.first: DeployRun | None = None

    def sh(self, name: str, script: str) -> str:
        return guest_sh(self.lab, name, script)

    def deploy(self, *data: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> DeployRun:
        items = [f"litellm_find_links={WHEELS}", f"litellm_aliases={ALIASES}", *data]
        # --dry without -y: pyinfra prints --diff in its change detection, which -y skips.
        yes = [] if "--dry" in args else ["-y"]
        cmd = [str(Path(sys.executable).parent / "pyinfra"), *yes, *args, "--json", str(self.inventory),
               "deploys/litellm.py", "--limit", f"@lxd/{self.gw}"]
        for item in items:
            cmd += ["--data", item]
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env={**tool_env(), **(env or {})}, capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)
        return DeployRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)

    def verify(self, *models: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pytest", str(verify_suite("litellm")), f"--hosts=lxc://{self.gw}", "-q",
               "-p", "no:cacheprovider"]
        env = {**tool_env(), "LABWRIGHT_LITELLM_MODELS": ",".join(models or ("tiny-a", "tiny-b", "fast", "local"))}
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    def master_key(self) -> str:
        line = self.sh(self.gw, "cat /etc/litellm/master.env").strip()
        return line.split("=", 1)[1].strip('"')

    def main_pid(self) -> str:
        return self.sh(self.gw, "systemctl show -p MainPID --value litellm.service").strip()

    def chat(self, model: str, key: str | None) -> tuple[int, dict]:
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say something."}],
                           "max_tokens": 8, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(f"http://{self.gw_address}:{PORT}/v1/chat/completions", data=body,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def wait_engine(self, address: str, timeout: float = 60) -> None:
        """Until llama-server's /health answers 200 (it is 503 while the model loads)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}:{ENGINE_PORT}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"llama-server on {address} not healthy after {timeout}s"
            time.sleep(0.2)

    def predicted(self, address: str) -> float:
        name = self.gw if address == self.gw_address else self.engine
        return tokens_predicted(address, ENGINE_PORT, engine_key(self.lab, name))


INVENTORY = """\
lab = [
    ("@lxd/{gw}", {{"llamacpp_model": "{model}", "llamacpp_alias": "tiny-a", "llamacpp_ctx_size": 4096}}),
    ("@lxd/{engine}", {{"llamacpp_model": "{model}", "llamacpp_alias": "tiny-b", "llamacpp_ctx_size": 4096}}),
]
"""


@pytest.fixture(scope="module")
def gateway(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    binary = build_llama_server()
    assert binary.is_file()
    model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
    gw, engine = lab.fresh("lwlitegw"), lab.fresh("lwliteng")
    try:
        wheels = wheelhouse(str(load_defaults()["service"]["version"]), guest_python(lab, gw))
        lab.client.request("PATCH", f"/1.0/instances/{gw}", {"devices": {"litellm-wheels": {
            "type": "disk", "source": str(wheels), "path": WHEELS, "readonly": "true"}}})
        inventory = tmp_path_factory.mktemp("inventory") / "lab.py"
        inventory.write_text(INVENTORY.format(gw=gw, engine=engine, model=MODEL))
        deploy_tiny_engines(lab, [gw, engine], model, inventory)
        state = Gateway(lab, gw, engine, inventory)
        state.before = state.verify()
        state.first = state.deploy()
        assert state.first.rc == 0, state.first.output[-5000:]
        yield state
    finally:
        lab.remove(gw)
        lab.remove(engine)


def test_verify_fails_before_and_passes_after_the_deploy(gateway):
    assert gateway.before.returncode == 1, gateway.before.stdout[-3000:]
    assert "test_unit_enabled_and_active" in gateway.before.stdout
    assert gateway.first.totals.changed > 0 and gateway.first.totals.error == 0
    assert len(gateway.first.operation("health: /health/liveliness then /v1/models").success) == 1, \
        gateway.first.output[-3000:]
    print(f"\nfirst deploy: {gateway.first.seconds:.1f}s, {gateway.first.totals.changed} changed")
    result = gateway.verify()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_config_lists_discovered_engines_by_address(gateway):
    config = gateway.sh(gateway.gw, "cat /etc/litellm/config.yaml")
    # The gateway's own engine is reached on loopback, the other one at its container address (found via LXD).
    assert 'api_base: "http://127.0.0.1:8001/v1"' in config, config
    assert f'api_base: "http://{gateway.engine_address}:8001/v1"' in config, config
    assert gateway.master_key() not in config


def test_alias_routes_to_its_primary_and_models_by_name(gateway):
    key = gateway.master_key()
    a0, b0 = gateway.predicted(gateway.gw_address), gateway.predicted(gateway.engine_address)
    status, answer = gateway.chat("fast", key)
    assert status == 200, answer
    a1, b1 = gateway.predicted(gateway.gw_address), gateway.predicted(gateway.engine_address)
    assert (a1 - a0, b1 - b0) == (8, 0), answer
    status, answer = gateway.chat("local", key)
    assert status == 200, answer
    assert (gateway.predicted(gateway.gw_address), gateway.predicted(gateway.engine_address)) == (a1, b1 + 8)


def test_fallback_when_the_primary_is_stopped(gateway):
    key = gateway.master_key()
    gateway.sh(gateway.gw, "systemctl stop llama-server.service")
    try:
        b0 = gateway.predicted(gateway.engine_address)
        status, answer = gateway.chat("fast", key)
        assert status == 200, answer
        assert answer["choices"][0]["message"]["content"], answer
        assert gateway.predicted(gateway.engine_address) == b0 + 8
        # Without a fallback the alias fails: tiny-a alone is down.
        status, answer = gateway.chat("tiny-a", key)
        assert status >= 500 or status == 429, answer
    finally:
        gateway.sh(gateway.gw, "systemctl start llama-server.service")
        gateway.wait_engine(gateway.gw_address)


def engine_chat(address: str, key: str | None) -> int:
    """The status of a chat request straight to an engine, as any client on the LAN would send it."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://{address}:{ENGINE_PORT}/v1/chat/completions", data=body,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_engines_refuse_the_lan_and_the_gateway_holds_their_real_keys(gateway):
    """No client skips the gateway: both engines answer 401 without their key (the "none" LiteLLM used to send
    included); the gateway reaches them with the keys made on their hosts: its own engine's copied on the guest
    into engines-local.env, the other guest's in secrets.env, both root-only; config.yaml and the deploy's output
    hold no key."""
    gw_key, other_key = engine_key(gateway.lab, gateway.gw), engine_key(gateway.lab, gateway.engine)
    assert gw_key != other_key
    for address, key in ((gateway.gw_address, gw_key), (gateway.engine_address, other_key)):
        assert engine_chat(address, None) == 401 and engine_chat(address, "none") == 401
        assert engine_chat(address, key) == 200
    env = gateway.sh(gateway.gw, "stat -c '%a %U' /etc/litellm/engines-local.env /etc/litellm/secrets.env; "
                                 "cat /etc/litellm/engines-local.env /etc/litellm/secrets.env")
    assert env.splitlines()[:2] == ["600 root", "600 root"]
    gw_var = "ENGINE_KEY_LLAMACPP_LXD_" + gateway.gw.upper().replace("-", "_")
    other_var = "ENGINE_KEY_LLAMACPP_LXD_" + gateway.engine.upper().replace("-", "_")
    assert f'{gw_var}="{gw_key}"' in env.splitlines() and f'{other_var}="{other_key}"' in env.splitlines()
    config = gateway.sh(gateway.gw, "cat /etc/litellm/config.yaml")
    assert f"os.environ/{gw_var}" in config and f"os.environ/{other_var}" in config
    assert gw_key not in config and other_key not in config and '"none"' not in config
    assert gw_key not in gateway.first.output and other_key not in gateway.first.output


def test_a_missing_engine_key_is_refused_in_one_line_before_anything_runs(gateway):
    gateway.sh(gateway.engine, "mv /etc/llama-server/api-key /etc/llama-server/api-key.away")
    try:
        run = gateway.deploy()
        assert run.rc != 0
        lines = [line for line in run.output.splitlines() if "llamacpp_api_key_file: " in line]
        assert len(lines) == 1, run.output[-3000:]
        assert (f"llamacpp_api_key_file: /etc/llama-server/api-key does not exist on @lxd/{gateway.engine}; deploy "
                "the engine there first") in lines[0], lines[0]
        assert "Beginning operation run" not in run.output and "Traceback" not in run.output, run.output[-3000:]
    finally:
        gateway.sh(gateway.engine, "mv /etc/llama-server/api-key.away /etc/llama-server/api-key")


def test_requests_without_the_master_key_are_401(gateway):
    a0, b0 = gateway.predicted(gateway.gw_address), gateway.predicted(gateway.engine_address)
    status, body = gateway.chat("fast", None)
    assert status == 401, body
    # A wrong key (here the public default) is refused as well: without a key database LiteLLM 1.80 answers a key
    # that is not the master key with 400 "No connected db." (401 where a database holds virtual keys).
    status, body = gateway.chat("fast", "sk-1234")
    assert status in (400, 401) and "choices" not in body, (status, body)
    # Neither request reached an engine.
    assert (gateway.predicted(gateway.gw_address), gateway.predicted(gateway.engine_address)) == (a0, b0)
    request = urllib.request.Request(f"http://{gateway.gw_address}:{PORT}/v1/models")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=30)
    assert error.value.code == 401


def metrics(address: str, key: str | None) -> tuple[int, str]:
    """GET the gateway's /metrics/ (LiteLLM's prometheus callback mounts it at /metrics; Starlette redirects the bare
    path), as Prometheus asks it: ``Authorization: Bearer KEY``."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    request = urllib.request.Request(f"http://{address}:{PORT}/metrics/", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode(errors="replace")


def series(text: str, name: str) -> float:
    """The sum of one counter's samples in Prometheus's text format (0: none)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_metrics_answer_only_with_the_master_key_and_count_a_request(gateway):
    """litellm_metrics (on by default): the REAL LiteLLM 1.80.0's prometheus callback with
    require_auth_for_metrics_endpoint (litellm/proxy/middleware/prometheus_auth_middleware.py lines 27-45 of the
    wheel: 401 when the key does not pass LiteLLM's own key check), prometheus-client installed from the lock.
    Without a key, or with a wrong one, 401; with the master key LiteLLM's own counters, moved by one request."""
    installed = gateway.sh(gateway.gw, "/opt/litellm/bin/python -c \"import importlib.metadata as m; "
                                       "print(m.version('prometheus_client'))\"")
    assert installed.strip() == "0.20.0"
    config = gateway.sh(gateway.gw, "cat /etc/litellm/config.yaml")
    assert 'callbacks: ["prometheus"]' in config and "require_auth_for_metrics_endpoint: true" in config, config
    assert metrics(gateway.gw_address, None)[0] in (401, 403)
    assert metrics(gateway.gw_address, "sk-" + "w" * 43)[0] in (401, 403)
    key = gateway.master_key()
    status, before = metrics(gateway.gw_address, key)
    assert status == 200, before[-2000:]
    status, answer = gateway.chat("tiny-b", key)
    assert status == 200, answer
    status, after = metrics(gateway.gw_address, key)
    assert status == 200, after[-2000:]
    requests = "litellm_proxy_total_requests_metric_total"
    assert series(after, requests) >= series(before, requests) + 1, after[-3000:]
    tokens = "litellm_total_tokens_metric_total"
    assert series(after, tokens) > series(before, tokens), after[-3000:]
    assert key not in after


def test_a_venv_without_prometheus_client_gets_it_from_the_lock(gateway):
    """A gateway deployed before prometheus-client was in the lock (its venv at the pinned litellm, without it): the
    next run installs from the lock again, which adds it, and /metrics/ answers (else the proxy would stop at start
    on the callback's import)."""
    gateway.sh(gateway.gw, "/opt/litellm/bin/pip uninstall -q -y prometheus-client")
    run = gateway.deploy()
    assert run.rc == 0, run.output[-4000:]
    assert len(run.operation("and prometheus-client in /opt/litellm (was 1.80.0)").success) == 1, run.output[-3000:]
    assert metrics(gateway.gw_address, gateway.master_key())[0] == 200
    print(f"\nprometheus-client added: {run.seconds:.1f}s")


def test_second_run_changes_nothing(gateway):
    again = gateway.deploy()
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    print(f"\nno-change re-run: {again.seconds:.2f}s ({again.totals.no_change} operations)")


@pytest.mark.parametrize(("items", "env", "key", "words"), [
    (['litellm_aliases={"fast": ["tiny-a", "qwen9"]}'], {}, "litellm_aliases",
     "fast -> qwen9: not a model in this lab (known: tiny-a, tiny-b)"),
    (['litellm_cloud_models=[{"name": "haiku", "model": "openrouter/anthropic/claude-haiku-4.5", '
      '"key_env": "LW_TEST_ABSENT_KEY"}]'], {}, "litellm_cloud_models",
     "haiku needs $LW_TEST_ABSENT_KEY in the environment"),
    (["litellm_port=9099"], {}, "litellm_port", "9099 is already in use"),
    (["litellm_master_key=sk-abc"], {}, "litellm_master_key", "never taken from inventory data"),
    (["litellm_venv=/opt/litellm;reboot"], {}, "litellm_venv", "'/opt/litellm;reboot' contains ';'"),
    (["litellm_version=1.79.3"], {}, "litellm_metrics",
     "LiteLLM 1.79.3's prometheus callback is an enterprise feature (no metrics without a licence); it is open from "
     "1.80.0"),
    (['litellm_cloud_models=[{"name": "haiku", "model": "openrouter/anthropic/claude-haiku-4.5", '
      '"key_env": "LW_TEST_KEY"}]'], {"LW_TEST_KEY": "sk-1234"}, "litellm_cloud_models",
     "$LW_TEST_KEY is LiteLLM's documented example master key"),
])
def test_bad_input_is_one_line_and_leaves_the_service_alone(gateway, items, env, key, words):
    gateway.sh(gateway.gw, "systemd-run --unit lw-squatter python3 -m http.server 9099 >/dev/null 2>&1; "
                           "for i in $(seq 50); do ss -Hltn 'sport = :9099' | grep -q . && break; sleep 0.1; done")
    try:
        config_before = gateway.sh(gateway.gw, f"sha256sum /etc/litellm/config.yaml {UNIT}")
        pid_before = gateway.main_pid()
        run = gateway.deploy(*items, env=env)
        assert run.rc != 0
        lines = [line for line in run.output.splitlines() if f"{key}: " in line]
        assert len(lines) == 1 and words in lines[0], run.output[-3000:]
        assert "Traceback" not in run.output and "Beginning operation run" not in run.output, run.output[-3000:]
        assert gateway.sh(gateway.gw, f"sha256sum /etc/litellm/config.yaml {UNIT}") == config_before
        assert gateway.main_pid() == pid_before
    finally:
        gateway.sh(gateway.gw, "systemctl stop lw-squatter >/dev/null 2>&1; "
                               "systemctl reset-failed lw-squatter >/dev/null 2>&1; true")


def test_a_public_default_master_key_on_the_host_is_refused(gateway):
    original = gateway.sh(gateway.gw, "cat /etc/litellm/master.env")
    gateway.sh(gateway.gw, "echo 'LITELLM_MASTER_KEY=sk-1234' > /etc/litellm/master.env")
    try:
        run = gateway.deploy()
        assert run.rc != 0
        assert "litellm_master_key: /etc/litellm/master.env on" in run.output, run.output[-3000:]
        assert "LITELLM_MASTER_KEY to LiteLLM's documented example master key" in run.output
        assert "sk-1234" not in run.output.replace("LITELLM_MASTER_KEY to", "")  # the value itself is never printed
        verify = gateway.verify()
        assert verify.returncode == 1 and "test_no_public_default_key" in verify.stdout, verify.stdout[-3000:]
    finally:
        gateway.lab.client.push_file(gateway.gw, "/etc/litellm/master.env", original.encode(), mode=0o600)


def test_cloud_model_key_goes_to_a_root_only_file(gateway):
    cloud = ('litellm_cloud_models=[{"name": "haiku", "model": "openrouter/anthropic/claude-haiku-4.5", '
             '"key_env": "LW_TEST_KEY"}]')
    secret = "sk-or-test-" + "x7" * 12
    dry = gateway.deploy(cloud, env={"LW_TEST_KEY": secret}, args=("--dry", "--diff"))
    assert dry.rc == 0 and secret not in dry.output, dry.output[-4000:]
    assert "secrets.env (it holds a secret: contents not shown)" in dry.output, dry.output[-4000:]
    run = gateway.deploy(cloud, env={"LW_TEST_KEY": secret})
    assert run.rc == 0, run.output[-4000:]
    assert secret not in run.output
    assert gateway.sh(gateway.gw, "stat -c '%a %U' /etc/litellm/secrets.env").strip() == "600 root"
    assert f'LW_TEST_KEY="{secret}"' in gateway.sh(gateway.gw, "cat /etc/litellm/secrets.env")
    config = gateway.sh(gateway.gw, "cat /etc/litellm/config.yaml")
    assert secret not in config and "os.environ/LW_TEST_KEY" in config
    result = gateway.verify("tiny-a", "tiny-b", "fast", "local", "haiku")
    assert result.returncode == 0, result.stdout[-4000:]
    again = gateway.deploy(cloud, env={"LW_TEST_KEY": secret})
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]
    # A changed key under --diff: pyinfra's files.put would print the old file and the new one; neither shows.
    rotated = "sk-or-test-" + "q3" * 12
    dry = gateway.deploy(cloud, env={"LW_TEST_KEY": rotated}, args=("--dry", "--diff"))
    assert dry.rc == 0, dry.output[-4000:]
    assert secret not in dry.output and rotated not in dry.output, dry.output[-4000:]
    assert "Will modify /etc/litellm/secrets.env (it holds a secret: contents not shown)" in dry.output
    # (The last test of the module: the gateway is not restored to spare a restart.)
