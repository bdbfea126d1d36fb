"""deploys/llamacpp.py for real: the REAL llama-server, a tiny GGUF generated here, a fresh lab container, @lxd.

The binary is the pinned llama.cpp built once per machine (labwright.llamacpp.build, cached under
~/.cache/labwright/llama/); the model is a random-weight GGUF (labwright.llamacpp.tiny_model) biased to printable
ASCII, so a completion is exactly max_tokens long. The shipped verify suite runs as users run it.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.support.elf_files import elf_needing_glibc

from labwright.lab.lab import instance_address
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import Deployed, DeployRun, run_pyinfra
from support import apt_cache, guest_apt
from support.verify_run import run_verify

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
PORT = 8001  # the seed's port, from templates/llamacpp/defaults.toml
UNIT = "/etc/systemd/system/llama-server.service"
DROPIN = "/etc/systemd/system/ollama.service.d/50-labwright.conf"
APT_CACHE = "llamacpp-test"  # support.apt_cache: the runtime libraries' .debs and lists between runs


def deploy(name: str, *data: str) -> DeployRun:
    return run_pyinfra(f"@lxd/{name}", "deploys/llamacpp.py", f"llamacpp_model={MODEL}", *data, cwd=REPO, timeout=900)


def verify(name: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The shipped testinfra suite, as a user's install runs it (support.verify_run)."""
    return run_verify("llamacpp", f"lxc://{name}", f"--llamacpp-model={MODEL}", *options)


def assert_passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"verify suite failed:\n{result.stdout[-4000:]}{result.stderr[-2000:]}"


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def main_pid(lab: Lab, name: str) -> str:
    return sh(lab, name, "systemctl show -p MainPID --value llama-server.service").strip()


def health_checked(run: DeployRun) -> bool:
    """The health operation ran and succeeded on the one host (pyinfra --json counts it under success, i.e. it
    ran); it fails the run otherwise."""
    return len(run.operation("health: /health then /v1/models").success) == 1


KEY_FILE = "/etc/llama-server/api-key"


def engine_key(lab: Lab, name: str) -> str:
    """The key the deploy made on the guest (read there, as the gateway on the same guest does)."""
    return sh(lab, name, f"cat {KEY_FILE}").strip()


def chat(address: str, max_tokens: int, key: str | None = None, stream: bool = False) -> dict:
    body = json.dumps({"messages": [{"role": "user", "content": "Say something."}], "max_tokens": max_tokens,
                       "temperature": 0.8, "seed": 1, "stream": stream}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://{address}:{PORT}/v1/chat/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            if stream:
                return {"status": response.status, "events": [line.decode().strip() for line in response
                                                              if line.startswith(b"data: ")]}
            return json.load(response)
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": json.loads(error.read() or b"{}")}


def status_of(url: str, key: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.fixture(scope="module")
def llama_server() -> Path:
    started = time.monotonic()
    binary = build_llama_server()
    print(f"\nllama-server ready in {time.monotonic() - started:.1f}s: {binary}")
    return binary


@pytest.fixture(scope="module")
def deployed(lab: Lab, llama_server: Path, tmp_path_factory: pytest.TempPathFactory):
    """One fresh container with the tiny model pushed in, verified before and deployed once with the seed's flags."""
    model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
    name = lab.fresh("lwllama")
    try:
        sh(lab, name, "mkdir -p /srv/models")
        with model.open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        # libgomp1 from apt lists and .debs kept from an earlier run when there are (support.apt_cache), else the mirror
        missing = "libgomp1" not in sh(lab, name, "dpkg-query -W -f '${Package}\\n' libgomp1 2>/dev/null || true")
        cached = missing and apt_cache.restore(lab.client, name, APT_CACHE)
        if missing and not cached and \
                not guest_apt.mirror_reachable(lab.client, name):
            pytest.skip("the container cannot reach a Debian mirror for libgomp1")
        before = verify(name)
        first = deploy(name)
        assert first.rc == 0, first.output[-4000:]
        if missing and not cached:
            apt_cache.save(lab.client, name, APT_CACHE)
        yield Deployed(name, instance_address(lab.client, name) or "", before, first)
    finally:
        lab.remove(name)


def test_verify_fails_before_and_passes_after_the_deploy(deployed):
    # The suite must be able to fail: a bare container has no unit, no port, no server.
    assert deployed.before.returncode == 1, deployed.before.stdout[-3000:]
    for check in ("test_unit_enabled_and_active", "test_health_ok", "test_flags_as_configured"):
        assert check in deployed.before.stdout
    assert deployed.first.totals.changed > 0 and deployed.first.totals.error == 0
    assert health_checked(deployed.first), deployed.first.output[-3000:]
    print(f"\nfirst deploy: {deployed.first.seconds:.1f}s, {deployed.first.totals.changed} changed")
    assert_passes(verify(deployed.name))


def test_a_real_completion_is_exactly_max_tokens_long(lab, deployed):
    answer = chat(deployed.address, max_tokens=24, key=engine_key(lab, deployed.name))
    choice = answer["choices"][0]
    assert choice["message"]["content"].strip(), answer
    # The tiny model never picks a non-printable or end token, so generation stops only at the limit.
    assert answer["usage"]["completion_tokens"] == 24, answer
    assert choice["finish_reason"] == "length", answer
    assert all(" " <= ch <= "~" for ch in choice["message"]["content"]), choice["message"]["content"]


def test_without_the_key_401_with_it_streams(lab, deployed):
    """From the lab host over the network, as any client on the LAN: every API path refuses a request without the
    key or with a wrong one (401, llama.cpp's "Invalid API Key"); /health stays public (server-http.cpp); with the key
    the chat streams, chunk by chunk, to [DONE]. The key file is root's, 0640, readable by the service's group."""
    key = engine_key(lab, deployed.name)
    assert re.fullmatch(r"lw-[A-Za-z0-9_-]{43}", key), "the key is 32 random bytes, URL-safe"
    assert sh(lab, deployed.name, f"stat -c '%a %U %G' {KEY_FILE} $(dirname {KEY_FILE})").split() == [
        "640", "root", "llama", "750", "root", "llama"]
    base = f"http://{deployed.address}:{PORT}"
    for path in ("/v1/models", "/metrics", "/props", "/slots"):
        assert status_of(base + path) == 401, path
        assert status_of(base + path, "lw-not-the-key") == 401, path
    assert status_of(base + "/v1/models", key) == 200
    assert status_of(base + "/health") == 200
    refused = chat(deployed.address, max_tokens=8)
    assert refused["status"] == 401 and refused["body"]["error"]["message"] == "Invalid API Key", refused
    streamed = chat(deployed.address, max_tokens=16, key=key, stream=True)
    assert streamed["status"] == 200 and streamed["events"][-1] == "data: [DONE]", streamed
    pieces = [json.loads(event[6:])["choices"][0]["delta"].get("content") for event in streamed["events"][:-1]]
    assert len([piece for piece in pieces if piece]) >= 8, pieces  # token by token, not one body
    # The key is on no command line: llama-server's own argv names the file only.
    argv = sh(lab, deployed.name, f"tr '\\0' ' ' < /proc/{main_pid(lab, deployed.name)}/cmdline")
    assert f"--api-key-file {KEY_FILE}" in argv and key not in argv


@pytest.mark.parametrize(("fix", "words"), [
    ("chmod 644", "is open to every user (mode 0644): a key anyone on the host can read is no key; run `chmod 640 "
                  "/etc/llama-server/api-key` there"),
    ("chown llama", "is owned by llama, not root (its owner could swap the key); run `chown root "
                    "/etc/llama-server/api-key` there"),
])
def test_a_key_file_others_may_read_or_swap_is_refused_before_anything_runs(lab, deployed, fix, words):
    key, pid_before = engine_key(lab, deployed.name), main_pid(lab, deployed.name)
    sh(lab, deployed.name, f"{fix} {KEY_FILE}")
    try:
        run = deploy(deployed.name)
        assert run.rc != 0
        lines = [line for line in run.output.splitlines() if "llamacpp_api_key_file: " in line]
        assert len(lines) == 1, run.output[-3000:]
        assert f"llamacpp_api_key_file: {KEY_FILE} on @lxd/{deployed.name} {words}" in lines[0], lines[0]
        assert "Beginning operation run" not in run.output and "Traceback" not in run.output, run.output[-3000:]
        assert main_pid(lab, deployed.name) == pid_before and engine_key(lab, deployed.name) == key
    finally:
        sh(lab, deployed.name, f"chown root:llama {KEY_FILE}; chmod 640 {KEY_FILE}")
    assert deploy(deployed.name).totals.changed == 0


def test_an_open_engine_is_asked_for_by_name_and_verify_reports_it(lab, deployed):
    key = engine_key(lab, deployed.name)
    opened = deploy(deployed.name, "llamacpp_open=true")
    assert opened.rc == 0 and opened.totals.changed >= 1, opened.output[-4000:]
    assert "llamacpp_open=true: llama-server answers without a key" in opened.output
    try:
        assert status_of(f"http://{deployed.address}:{PORT}/v1/models") == 200
        # The check that reads the key (the rest of the suite passes after the next line's run, with the option).
        unasked = verify(deployed.name, "-k", "test_answers_only_with_its_key")
        assert unasked.returncode == 1 and "runs without --api-key-file" in unasked.stdout, unasked.stdout[-3000:]
        asked = verify(deployed.name, "--llamacpp-open=true")
        assert_passes(asked)
        assert "OpenEngine: llama-server answers without a key on 0.0.0.0:8001, on purpose" in asked.stdout, \
            asked.stdout[-3000:]
    finally:
        closed = deploy(deployed.name)
    assert closed.rc == 0 and health_checked(closed), closed.output[-3000:]
    assert status_of(f"http://{deployed.address}:{PORT}/v1/models") == 401
    assert engine_key(lab, deployed.name) == key  # kept: the gateway's copy stays right


def test_an_engine_only_the_gateway_on_its_guest_uses_binds_to_loopback(lab, deployed):
    """llamacpp_host=auto (the default): with this host's data declaring the LiteLLM gateway and no other consumer
    in the inventory (here the inventory is this one host), llama-server listens on 127.0.0.1 only: refused from the
    LAN, reached on the guest. Without that data it is back on 0.0.0.0, behind its key."""
    alone = deploy(deployed.name, "litellm_num_retries=0")
    try:
        assert alone.rc == 0 and alone.totals.changed >= 1, alone.output[-4000:]
        listening = sh(lab, deployed.name, f"ss -Hltn 'sport = :{PORT}'")
        assert [line.split()[3] for line in listening.splitlines()] == [f"127.0.0.1:{PORT}"], listening
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((deployed.address, PORT), timeout=10).close()
        assert_passes(verify(deployed.name))
    finally:
        shared = deploy(deployed.name)
    assert shared.rc == 0 and health_checked(shared), shared.output[-3000:]
    assert status_of(f"http://{deployed.address}:{PORT}/health") == 200


def test_second_run_changes_nothing(deployed):
    again = deploy(deployed.name)
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    print(f"\nno-change re-run: {again.seconds:.2f}s ({again.totals.no_change} operations)")


def test_a_config_change_restarts_with_the_new_flag(lab, deployed):
    pid_before = main_pid(lab, deployed.name)
    changed = deploy(deployed.name, "llamacpp_ctx_size=8192", "llamacpp_cache_type_k=q8_0")
    assert changed.rc == 0 and changed.totals.changed >= 1, changed.output[-4000:]
    assert health_checked(changed), changed.output[-3000:]
    assert main_pid(lab, deployed.name) != pid_before
    assert_passes(verify(deployed.name, "--llamacpp-flag", "ctx_size=8192", "--llamacpp-flag", "cache_type_k=q8_0"))
    stale = verify(deployed.name, "-k", "test_flags_as_configured")  # the check of the flags; the rest passed above
    assert stale.returncode == 1 and "--ctx-size is '8192', expected 131072" in stale.stdout, stale.stdout[-3000:]
    restored = deploy(deployed.name)
    assert restored.rc == 0 and restored.totals.changed >= 1, restored.output[-4000:]
    assert_passes(verify(deployed.name))


@pytest.mark.parametrize(("item", "key", "words"), [
    ("llamacpp_cache_type_v=q3_k", "llamacpp_cache_type_v", "not a cache type llama.cpp supports"),
    ("llamacpp_flash_attn=off", "llamacpp_cache_type_v", "only runs with flash attention"),
    ("llamacpp_model=/srv/models/absent.gguf", "llamacpp_model", "does not exist"),
    ("llamacpp_port=9099", "llamacpp_port", "already in use"),
    ("llamacpp_ollama_override=true", "llamacpp_ollama_override", "no ollama unit or binary"),
    ("llamacpp_binary_sha256=" + "0" * 64, "llamacpp_binary_sha256", "expected " + "0" * 64),
    ("llamacpp_ubatch_size=4096", "llamacpp_ubatch_size", "out of range"),
    ('llamacpp_extra_args=["--api-key", "k"]', "llamacpp_extra_args", "the API key is made on the host"),
    ("llamacpp_api_key_file=/etc/llama server/key", "llamacpp_api_key_file", "contains a space"),
])
def test_bad_input_is_one_line_and_changes_nothing(lab, deployed, item, key, words):
    # Something else holds 9099 for the port case; the others must not be affected by it.
    sh(lab, deployed.name, "systemd-run --unit lw-squatter python3 -m http.server 9099 >/dev/null 2>&1; "
                           "for i in $(seq 50); do ss -Hltn 'sport = :9099' | grep -q . && break; sleep 0.1; done")
    try:
        unit_before, pid_before = sh(lab, deployed.name, f"sha256sum {UNIT}"), main_pid(lab, deployed.name)
        run = deploy(deployed.name, item)
        assert run.rc != 0
        lines = [line for line in run.output.splitlines() if f"{key}: " in line]
        assert len(lines) == 1 and words in lines[0], run.output[-3000:]
        assert "Traceback" not in run.output and "Beginning operation run" not in run.output, run.output[-3000:]
        assert sh(lab, deployed.name, f"sha256sum {UNIT}") == unit_before
        assert main_pid(lab, deployed.name) == pid_before
    finally:
        sh(lab, deployed.name, "systemctl stop lw-squatter >/dev/null 2>&1; "
                               "systemctl reset-failed lw-squatter >/dev/null 2>&1; true")


def test_a_model_the_service_user_cannot_read_is_refused(lab, deployed):
    sh(lab, deployed.name, f"chmod 600 {MODEL}")
    try:
        pid_before = main_pid(lab, deployed.name)
        run = deploy(deployed.name)
        assert run.rc != 0 and "llamacpp_model: " in run.output and "not readable by the service user llama" in \
            run.output, run.output[-3000:]
        assert "Beginning operation run" not in run.output
        assert main_pid(lab, deployed.name) == pid_before
    finally:
        sh(lab, deployed.name, f"chmod 644 {MODEL}")


def test_with_no_build_yet_the_host_is_checked_before_a_build_and_dry_builds_nothing(lab, deployed, tmp_path):
    """No llama-server built on this machine yet (an empty cache): a model missing on the guest is refused before the
    first build starts (sweep at 6d041d3: the run built for 6 minutes, then said the model was missing), and a
    ``--dry`` run with good data says the build is due and builds nothing. The run's own timeout (2 min, the build
    takes ~6) is what a build started too early would run into."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = {"LABWRIGHT_CACHE": str(cache)}
    pid_before = main_pid(lab, deployed.name)
    missing = run_pyinfra(f"@lxd/{deployed.name}", "deploys/llamacpp.py", "llamacpp_model=/srv/models/absent.gguf",
                          cwd=REPO, timeout=120, env=env)
    assert missing.rc != 0, missing.output[-3000:]
    lines = [line for line in missing.output.splitlines() if "llamacpp_model: " in line]
    assert len(lines) == 1 and "/srv/models/absent.gguf does not exist" in lines[0], missing.output[-3000:]
    assert "building" not in missing.output and "no llama-server built yet" not in missing.output
    dry = run_pyinfra(f"@lxd/{deployed.name}", "deploys/llamacpp.py", f"llamacpp_model={MODEL}", cwd=REPO,
                      timeout=120, env=env, args=("--dry",))
    assert dry.rc == 0, dry.output[-3000:]
    assert "--dry: no llama-server is built on this machine yet" in dry.output, dry.output[-3000:]
    assert not (cache / "llama").exists() or not any((cache / "llama").rglob("llama-server")), "--dry built"
    assert main_pid(lab, deployed.name) == pid_before


def test_a_binary_needing_a_newer_glibc_is_refused_before_anything_is_installed(lab, deployed, tmp_path):
    """A llama-server built against a newer glibc than the guest's (the Debian 13 controller's build on this Debian 12
    guest: ``GLIBC_2.38' not found``, then a 120 s health wait) is refused in one line, nothing pushed or restarted;
    here a real ELF needing GLIBC_2.99 (tests/support/elf_files.py), so the case holds on any controller."""
    newer = elf_needing_glibc(tmp_path / "llama-server", "2.99")
    binary_before, pid_before = sh(lab, deployed.name, "sha256sum /usr/local/bin/llama-server"), \
        main_pid(lab, deployed.name)
    run = deploy(deployed.name, f"llamacpp_binary_src={newer}")
    assert run.rc != 0
    lines = [line for line in run.output.splitlines() if "llamacpp_binary_src: " in line]
    assert len(lines) == 1, run.output[-3000:]
    assert re.search(rf"needs glibc 2\.99 \(GLIBC_2\.99, read from its ELF\), @lxd/{deployed.name} has glibc 2\.\d+: "
                     r"it would not start there; give a llama-server built on a machine of the guest's release",
                     lines[0]), lines[0]
    assert "Traceback" not in run.output and "Beginning operation run" not in run.output, run.output[-3000:]
    assert sh(lab, deployed.name, "sha256sum /usr/local/bin/llama-server") == binary_before
    assert main_pid(lab, deployed.name) == pid_before


HOLD = "/etc/systemd/system/llama-server.service.d/50-test-hold.conf"


def service_state(lab: Lab, name: str) -> dict[str, str]:
    """``systemctl show`` of the unit: the properties started_owned reads."""
    shown = sh(lab, name, "systemctl show -p NRestarts,ActiveState,SubState,ExecMainStartTimestampMonotonic "
                          "llama-server.service")
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def held_between_crashes(lab: Lab, name: str) -> dict[str, str]:
    """The crash-looping unit held where systemd says "active (running)" after one of its own restarts: a drop-in
    makes systemd's next automatic restart (RestartSec=5) run a process that stays up, and goes again once that
    restart happened, so the unit on disk is the deploy's broken one, unchanged. Its state then (NRestarts > 0)."""
    sh(lab, name, f"mkdir -p {Path(HOLD).parent} && printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' "
                  f"> {HOLD} && systemctl daemon-reload")
    try:
        # A wait for systemd's own restart, bounded (60 s: RestartSec and a loaded machine), polled in the guest.
        sh(lab, name, "for i in $(seq 600); do pid=$(systemctl show -p MainPID --value llama-server.service); "
                      "[ \"$pid\" != 0 ] && [ \"$(cat /proc/$pid/comm 2>/dev/null)\" = sleep ] && exit 0; sleep 0.1; "
                      "done; echo 'no automatic restart into the held process in 60 s' >&2; exit 1")
    finally:
        sh(lab, name, f"rm -f {HOLD} && systemctl daemon-reload")
    state = service_state(lab, name)
    assert (state["ActiveState"], state["SubState"]) == ("active", "running") and int(state["NRestarts"]) > 0, state
    return state


def test_a_server_that_does_not_come_up_fails_the_run_with_its_own_error(lab, deployed):
    # A health timeout long enough for the engine's complaint to reach the journal on a loaded machine (5 s lost it
    # there: the test must hold under load).
    broken = deploy(deployed.name, 'llamacpp_extra_args=["--no-such-flag"]', "llamacpp_health_timeout=10")
    assert broken.rc != 0
    assert "not healthy after 10s" in broken.output, broken.output[-3000:]
    # The journal tail names the engine's own complaint.
    assert "invalid argument: --no-such-flag" in broken.output, broken.output[-3000:]
    # Re-running the same broken data must not pass as "no change", also when the crash loop is caught between a
    # restart and its next crash, where systemd says "active (running)" (a loaded machine's llama-server sits there
    # for a moment on every restart: the re-run read it there now and then). Held there, the re-run reads it every
    # time: systemd restarted it since the deploy did (NRestarts > 0), so the deploy restarts it and the health check
    # fails again (the shortest timeout will do: no journal is read here).
    held = held_between_crashes(lab, deployed.name)
    again = deploy(deployed.name, 'llamacpp_extra_args=["--no-such-flag"]', "llamacpp_health_timeout=1")
    assert again.rc != 0 and "not healthy after 1s" in again.output, again.output[-3000:]
    assert service_state(lab, deployed.name)["ExecMainStartTimestampMonotonic"] != \
        held["ExecMainStartTimestampMonotonic"]  # the held process was restarted, not left to serve nothing
    repaired = deploy(deployed.name)
    assert repaired.rc == 0 and health_checked(repaired), repaired.output[-3000:]
    assert_passes(verify(deployed.name))


FAKE_OLLAMA = """[Unit]
Description=stand-in for ollama (a sleeping shell; the test only reads its environment)
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
"""


def test_ollama_hosts_get_the_drop_in(lab, deployed):
    lab.client.push_file(deployed.name, "/etc/systemd/system/ollama.service", FAKE_OLLAMA.encode(), mode=0o644)
    sh(lab, deployed.name, "systemctl daemon-reload && systemctl start ollama.service")
    try:
        run = deploy(deployed.name, "llamacpp_ollama_kv_cache_type=q8_0")
        assert run.rc == 0 and run.totals.changed >= 1, run.output[-4000:]
        pid = sh(lab, deployed.name, "systemctl show -p MainPID --value ollama.service").strip()
        environ = sh(lab, deployed.name, f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
        for wanted in ("OLLAMA_FLASH_ATTENTION=1", "OLLAMA_KV_CACHE_TYPE=q8_0", "OLLAMA_KEEP_ALIVE=-1",
                       "OLLAMA_CONTEXT_LENGTH=131072"):
            assert wanted in environ, environ
        again = deploy(deployed.name, "llamacpp_ollama_kv_cache_type=q8_0")
        assert again.rc == 0 and again.totals.changed == 0, again.output[-4000:]
        bad = deploy(deployed.name, "llamacpp_ollama_kv_cache_type=q4_0", "llamacpp_ollama_flash_attention=false")
        assert bad.rc != 0 and "llamacpp_ollama_kv_cache_type: q4_0 needs" in bad.output, bad.output[-3000:]
        off = deploy(deployed.name, "llamacpp_ollama_override=false")
        assert off.rc == 0, off.output[-4000:]
        assert sh(lab, deployed.name, f"test -e {DROPIN} && echo present || echo gone").strip() == "gone"
    finally:
        sh(lab, deployed.name, "systemctl disable --now ollama.service >/dev/null 2>&1; "
                               "rm -rf /etc/systemd/system/ollama.service /etc/systemd/system/ollama.service.d; "
                               "systemctl daemon-reload")
    # Ollama gone: the llama-server side is untouched and still at its no-change state.
    assert deploy(deployed.name).totals.changed == 0


# --- several models on one guest: llama-server's router mode (labwright.llamacpp.router) --------------------------

SECOND = "/srv/models/tiny2.gguf"
HUGE = "/srv/models/huge.gguf"
ROUTED = f'llamacpp_models=["{MODEL}", {{"path": "{SECOND}", "name": "second"}}]'
# The fit's llama.cpp overhead (data/fit.toml: 2.55 GiB, measured on a 27B model with CUDA) is more than this lab
# container's 1 GiB; the tiny model on the CPU needs far less (the single-model server runs in this container).
SMALL = "llamacpp_fit_overhead_gb=0.1"


def routed(name: str, *data: str) -> DeployRun:
    """The deploy with ``llamacpp_models`` and no ``llamacpp_model`` (the list names every model)."""
    return run_pyinfra(f"@lxd/{name}", "deploys/llamacpp.py", *data, cwd=REPO, timeout=900)


def router_models(address: str, key: str) -> dict[str, str]:
    """The router's GET /models: each model's id and status (unloaded, loading, loaded)."""
    request = urllib.request.Request(f"http://{address}:{PORT}/models", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return {model["id"]: model["status"]["value"] for model in json.load(response)["data"]}


def chat_with(address: str, key: str | None, model: str, max_tokens: int = 8) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say something."}],
                       "max_tokens": max_tokens, "seed": 1}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://{address}:{PORT}/v1/chat/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode(errors="replace")}


def test_a_bad_model_list_is_one_line_before_anything_runs(lab, deployed):
    """Two models of one name, an empty list, a model that does not fit (a sparse 64 TiB GGUF: the tiny model's
    header, then a hole): one line naming llamacpp_models each, no operation run, the single-model server as it was."""
    sh(lab, deployed.name, f"cp {MODEL} {HUGE} && truncate -s 64T {HUGE} && chmod 644 {HUGE}")
    unit_before, pid_before = sh(lab, deployed.name, f"sha256sum {UNIT}"), main_pid(lab, deployed.name)
    try:
        for item, words in (
                (f"llamacpp_models={MODEL},/srv/other/tiny.gguf", "two models are named 'tiny': /srv/models/tiny.gguf "
                                                                  "and /srv/other/tiny.gguf; give one another name"),
                ("llamacpp_models=[]", "the list is empty: name at least one GGUF"),
                (f"llamacpp_models={MODEL},{HUGE}", "huge (/srv/models/huge.gguf) does not fit on "),
        ):
            run = routed(deployed.name, item, SMALL)
            lines = [line for line in run.output.splitlines() if "llamacpp_models: " in line]
            assert run.rc != 0 and len(lines) == 1 and words in lines[0], run.output[-3000:]
            assert lines[0].rstrip().endswith("(nothing was changed)"), lines[0]
            assert "Traceback" not in run.output and "Beginning operation run" not in run.output, run.output[-3000:]
    finally:
        sh(lab, deployed.name, f"rm -f {HUGE}")
    assert sh(lab, deployed.name, f"sha256sum {UNIT}") == unit_before and main_pid(lab, deployed.name) == pid_before


def test_several_models_are_served_by_name_and_loaded_on_demand(lab, deployed):
    """llamacpp_models: one llama-server in router mode (the pinned llama.cpp's tools/server/README.md "Using
    multiple models"), each model fit-checked on the guest, none loaded at start; a request naming a model loads it
    (GET /models: unloaded -> loaded; the journal: the router spawning its instance), both answer behind the key."""
    sh(lab, deployed.name, f"cp {MODEL} {SECOND} && chmod 644 {SECOND}")
    key = engine_key(lab, deployed.name)
    started = time.monotonic()
    run = routed(deployed.name, ROUTED, SMALL)
    try:
        assert run.rc == 0 and health_checked(run), run.output[-4000:]
        for line in ("llamacpp_models: tiny (/srv/models/tiny.gguf): ", "llamacpp_models: second "
                     "(/srv/models/tiny2.gguf): ", "llamacpp_models: --models-max 2 (RAM "):
            assert line in run.output, run.output[-4000:]
        argv = sh(lab, deployed.name, f"tr '\\0' ' ' < /proc/{main_pid(lab, deployed.name)}/cmdline")
        assert "--models-preset /etc/llama-server/models.ini --models-max 2" in argv and "--model " not in argv
        assert router_models(deployed.address, key) == {"tiny": "unloaded", "second": "unloaded"}
        first = chat_with(deployed.address, key, "tiny")
        assert first["model"] == "tiny" and first["usage"]["completion_tokens"] == 8, first
        assert router_models(deployed.address, key) == {"tiny": "loaded", "second": "unloaded"}
        second = chat_with(deployed.address, key, "second")
        assert second["model"] == "second" and second["usage"]["completion_tokens"] == 8, second
        assert router_models(deployed.address, key) == {"tiny": "loaded", "second": "loaded"}
        journal = sh(lab, deployed.name, "journalctl -u llama-server -o cat --no-pager -n 400")
        assert "spawning server instance with name=second" in journal, journal[-3000:]
        assert chat_with(deployed.address, None, "second")["status"] == 401
        assert chat_with(deployed.address, key, "absent")["status"] in (400, 404)
        again = routed(deployed.name, ROUTED, SMALL)
        assert again.rc == 0 and again.totals.changed == 0, again.output[-4000:]
        print(f"\nrouter mode: deploy, two models loaded on demand and a no-change run in "
              f"{time.monotonic() - started:.1f}s")
    finally:
        back = deploy(deployed.name)
        sh(lab, deployed.name, f"rm -f {SECOND}")
    assert back.rc == 0 and health_checked(back), back.output[-3000:]
    assert "--model /srv/models/tiny.gguf" in sh(
        lab, deployed.name, f"tr '\\0' ' ' < /proc/{main_pid(lab, deployed.name)}/cmdline")
