"""deploys/kokoro.py for real, in a fresh lab container, with the Kokoro-FastAPI STAND-IN as the checkout.

Kokoro's weights (and torch) cannot be had here, so kokoro_source is support.kokoro_standin's tree (the
seed's shape: split_pattern=r'\\n+'); its two requirements (fastapi, uvicorn) come from a wheelhouse cached under
~/.cache/labwright/kokoro-standin/ and attached read-only (lab containers cannot verify PyPI's certificate here).
The shipped verify suite runs as users run it; streaming is measured from this machine with the bench library.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.bench.tts import bench_tts
from labwright.lab.lab import instance_address
from labwright.paths import verify_suite
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import Deployed, DeployRun, run_pyinfra, tool_env
from labwright.wheelhouse import cache_root, download_wheelhouse
from support.kokoro_standin import REQUIREMENTS, write_standin_tree

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WHEELS = "/mnt/kokoro-wheels"
UNIT = "/etc/systemd/system/kokoro.service"
PATCHED_FILE = "/opt/kokoro/api/src/inference/kokoro_v1.py"
PHRASE = "Hi Mediclinic.  Your EHR project sounds interesting and has the potential for a lot of impact."


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def verify(name: str, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", str(verify_suite("kokoro")), f"--hosts=lxc://{name}", "-q",
           "-p", "no:cacheprovider"]
    return subprocess.run(cmd, cwd=REPO, env={**tool_env(), **env}, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_standin_tree(tmp_path_factory.mktemp("src") / "kokoro", "explicit")


@pytest.fixture(scope="module")
def deployed(lab: Lab, source: Path):
    name = lab.fresh("lwkokoro")

    def deploy(*data: str) -> DeployRun:
        items = [f"kokoro_source={source}", f"kokoro_find_links={WHEELS}", 'kokoro_runtime_packages=["python3-venv"]',
                 *data]
        return run_pyinfra(f"@lxd/{name}", "deploys/kokoro.py", *items, cwd=REPO, timeout=900)

    try:
        python = lab.client.exec(name, ["python3", "-c", "import platform; print(platform.python_version())"])
        version = python.stdout.decode().strip()
        wheels = download_wheelhouse(REQUIREMENTS, version, cache_root() / "kokoro-standin" / f"py{version}")
        lab.client.request("PATCH", f"/1.0/instances/{name}", {"devices": {"kokoro-wheels": {
            "type": "disk", "source": str(wheels), "path": WHEELS, "readonly": "true"}}})
        before = verify(name)
        first = deploy()
        assert first.rc == 0, first.output[-5000:]
        state = Deployed(name, instance_address(lab.client, name) or "", before, first)
        yield state, deploy
    finally:
        lab.remove(name)


def main_pid(lab: Lab, name: str) -> str:
    return sh(lab, name, "systemctl show -p MainPID --value kokoro.service").strip()


def test_verify_fails_before_and_passes_after_deploying_the_kokoro_standin(deployed, source):
    state, _ = deployed
    assert state.before.returncode == 1, state.before.stdout[-3000:]
    assert "test_unit_enabled_and_active" in state.before.stdout
    assert state.first.totals.changed > 0 and state.first.totals.error == 0
    assert "(streaming patch applied)" in state.first.output
    print(f"\nfirst deploy: {state.first.seconds:.1f}s, {state.first.totals.changed} changed")
    result = verify(state.name)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # The control machine's checkout is left as it was: the patch is applied to a staged copy.
    assert "split_pattern=r'\\n+'" in (source / "api/src/inference/kokoro_v1.py").read_text()


def loopback_proxy(lab: Lab, name: str) -> str:
    """A URL on this machine's loopback that LXD forwards to 127.0.0.1:8880 INSIDE the guest (a proxy device): what
    something on the same guest sees, since Kokoro listens on nothing else."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lab.client.request("PATCH", f"/1.0/instances/{name}", {"devices": {"kokoro-loopback": {
        "type": "proxy", "listen": f"tcp:127.0.0.1:{port}", "connect": "tcp:127.0.0.1:8880"}}})
    return f"http://127.0.0.1:{port}"


def test_kokoro_has_no_key_so_it_listens_on_loopback_only(lab, deployed):
    """Kokoro-FastAPI has no API key (api/src/core/config.py): from the network the port is closed (connection
    refused, not a 200 to anyone), from the guest itself it answers."""
    state, _ = deployed
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((state.address, 8880), timeout=10).close()
    listening = sh(lab, state.name, "ss -Hltn 'sport = :8880'")
    assert [line.split()[3] for line in listening.splitlines()] == ["127.0.0.1:8880"], listening
    assert "200" in sh(lab, state.name, "python3 -c \"import urllib.request as u; "
                                        "print(u.urlopen('http://127.0.0.1:8880/health', timeout=10).status)\"")


def test_an_open_kokoro_is_asked_for_by_name_and_verify_reports_it(lab, deployed):
    state, deploy = deployed
    opened = deploy("kokoro_host=0.0.0.0", "kokoro_open=true")
    try:
        assert opened.rc == 0, opened.output[-4000:]
        assert "kokoro_open=true: Kokoro answers without a key on 0.0.0.0:8880" in opened.output
        socket.create_connection((state.address, 8880), timeout=10).close()  # open, as asked
        unasked = verify(state.name)
        assert unasked.returncode == 1 and "test_listens_on_loopback_only" in unasked.stdout, unasked.stdout[-3000:]
        asked = verify(state.name, LABWRIGHT_KOKORO_OPEN="true")
        assert asked.returncode == 0, asked.stdout[-3000:]
        assert "OpenEngine: kokoro answers without a key on 0.0.0.0:8880, on purpose" in asked.stdout, \
            asked.stdout[-3000:]
    finally:
        closed = deploy()
    assert closed.rc == 0, closed.output[-4000:]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((state.address, 8880), timeout=10).close()


def test_the_deployed_kokoro_standin_streams_per_sentence(lab, deployed):
    state, _ = deployed
    assert 'split_pattern=r"(?<=[.!?])\\s+"' in sh(lab, state.name, f"cat {PATCHED_FILE}")
    result = {r.stream: r for r in bench_tts(loopback_proxy(lab, state.name), PHRASE, ["pcm"], runs=2)}
    streamed, whole = result[True], result[False]
    assert not streamed.error and not whole.error, (streamed.error, whole.error)
    assert streamed.first_ms is not None and streamed.total_ms is not None and whole.first_ms is not None
    print(f"\ndeployed stand-in: first audio {streamed.first_ms} ms streamed, {whole.first_ms} ms whole, "
          f"total {streamed.total_ms} ms")
    assert streamed.first_ms < 0.5 * streamed.total_ms
    assert whole.first_ms > 0.8 * (whole.total_ms or 0)


def test_second_run_changes_nothing(deployed):
    state, deploy = deployed
    again = deploy()
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    print(f"\nno-change re-run: {again.seconds:.2f}s ({again.totals.no_change} operations)")


@pytest.fixture
def odd_source(tmp_path: Path, source: Path) -> Path:
    odd = tmp_path / "odd"
    shutil.copytree(source, odd)
    path = odd / "api/src/inference/kokoro_v1.py"
    path.write_text(path.read_text().replace("split_pattern=r'\\n+'", "split_pattern=r'[;]'"))
    return odd


@pytest.mark.parametrize(("items", "key", "words"), [
    (["kokoro_device=gpu"], "kokoro_device", "which has no NVIDIA driver loaded"),
    (["kokoro_use=long_form"], "kokoro_device", "gpu on"),
    (["kokoro_use=podcast"], "kokoro_use", "'podcast' is not one of conversational, long_form"),
    (["kokoro_port=9099"], "kokoro_port", "9099 is already in use"),
    (["kokoro_source=ODD"], "kokoro_patch_streaming", "split_pattern=r'[;]', neither the upstream"),
    (["kokoro_source=/nonexistent/kokoro"], "kokoro_source", "has no pyproject.toml"),
    (["kokoro_extra_index_url=http://plain.example"], "kokoro_extra_index_url", "must be an https:// URL"),
    (["kokoro_venv=/opt/kokoro-venv&&id"], "kokoro_venv", "'/opt/kokoro-venv&&id' contains '&'"),
    (["kokoro_dir=/opt/kokoro;reboot"], "kokoro_dir", "'/opt/kokoro;reboot' contains ';'"),
    (['kokoro_env={"API_KEY": "0p3n-w3bu!"}'], "kokoro_env", "API_KEY is Open WebUI pipelines' default API key"),
    (["kokoro_host=0.0.0.0"], "kokoro_host", "0.0.0.0 would answer every client on the network without a key"),
])
def test_bad_input_is_one_line_and_leaves_the_service_alone(lab, deployed, odd_source, items, key, words):
    state, deploy = deployed
    items = [item.replace("ODD", str(odd_source)) for item in items]
    sh(lab, state.name, "systemd-run --unit lw-squatter python3 -m http.server 9099 >/dev/null 2>&1; "
                        "for i in $(seq 50); do ss -Hltn 'sport = :9099' | grep -q . && break; sleep 0.1; done")
    try:
        before, pid = sh(lab, state.name, f"sha256sum {UNIT} {PATCHED_FILE}"), main_pid(lab, state.name)
        run = deploy(*items)
        assert run.rc != 0
        lines = [line for line in run.output.splitlines() if f"{key}: " in line]
        assert len(lines) == 1 and words in lines[0], run.output[-3000:]
        assert "Traceback" not in run.output and "Beginning operation run" not in run.output, run.output[-3000:]
        assert sh(lab, state.name, f"sha256sum {UNIT} {PATCHED_FILE}") == before
        assert main_pid(lab, state.name) == pid
    finally:
        sh(lab, state.name, "systemctl stop lw-squatter >/dev/null 2>&1; "
                            "systemctl reset-failed lw-squatter >/dev/null 2>&1; true")
