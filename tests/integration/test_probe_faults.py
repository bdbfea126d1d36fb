"""`labwright probe ceiling` killed in the middle of a restart, on the lab, with the REAL llama-server and the tabbyAPI
stand-in: the ORIGINAL engine config always comes back.

The probe rewrites the engine's config (a systemd drop-in for llama-server, config.yml for tabbyAPI) and restarts
it. Ctrl-C and SIGTERM restore in the probe's own ``finally``; SIGKILL cannot, so before its first change the
in-guest helper saves what restores the original (/var/lib/labwright/probe/UNIT.json, written atomically), and
`labwright probe restore` or the next `labwright probe ceiling` run it. One test per fault; each prints the time
until the engine serves again (docs/probe.md, "Faults").
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import tool_env
from labwright.testing.waiting import wait_for as _wait_for
from labwright.tuning.probe import MARK
from support.probe_box import UNIT_PATH, llama_box
from support.tabbyapi_standin import MAIN_PY, SEED_CONFIG_SAMPLE, SEED_MODEL_PY

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LABWRIGHT = str(Path(sys.executable).parent / "labwright")
TABBY = "/opt/tabbyapi"
DROPIN = "/etc/systemd/system/llama-server.service.d/90-labwright-probe.conf"
RECORD = "/var/lib/labwright/probe/{}.service.json"
QWEN = REPO / "tests" / "unit" / "tuning" / "configs" / "qwen3.5-9b.json"
STANDIN_LIMIT = 30000
STANDIN_CONFIG = SEED_CONFIG_SAMPLE + f"\nstandin:\n  max_cache_size: {STANDIN_LIMIT}\n"
TABBY_UNIT = f"""[Unit]
Description=tabbyAPI STAND-IN (labwright test double)
[Service]
WorkingDirectory={TABBY}
ExecStart=/usr/bin/python3 {TABBY}/main.py
Restart=always
RestartSec=0
[Install]
WantedBy=multi-user.target
"""
# Generous: the lab runs beside other work on 2 shared cores; each wait names what it waited for.
DEADLINE_S = 240.0


def wait_for(what: str, condition: Callable[[], object]) -> None:
    _wait_for(what, condition, timeout=DEADLINE_S)


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()



def exists(lab: Lab, name: str, path: str) -> bool:
    return lab.client.exec(name, ["test", "-e", path]).exit_code == 0


def serving(lab: Lab, name: str, url: str) -> bool:
    check = f"import urllib.request; urllib.request.urlopen('{url}', timeout=2)"
    return lab.client.exec(name, ["python3", "-c", check]).exit_code == 0


def active(lab: Lab, name: str, unit: str) -> str:
    return sh(lab, name, f"systemctl is-active {unit} || true").strip()


def helpers_running(lab: Lab, name: str) -> str:
    """Probe helpers still running in the guest (one left there could halt the unit when it reaches its verdict)."""
    return sh(lab, name, "pgrep -af '[a]gent-[0-9a-f]*[.]pyz probe' || true").strip()


def labwright(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LABWRIGHT, *args], cwd=REPO, env=tool_env(), capture_output=True, text=True, timeout=900)


def start_probe(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([LABWRIGHT, "probe", "ceiling", *args], cwd=REPO, env=tool_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill(proc: subprocess.Popen[str], sig: signal.Signals) -> tuple[str, str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    return out, err


@pytest.fixture(scope="module")
def box(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    """One container, 512 MiB limit, llama-server deployed (8192 ctx, q4_0), and the tabbyAPI stand-in."""
    name = ""
    try:
        name, config = llama_box(lab, tmp_path_factory.mktemp("faults"), prefix="lwfault")
        sh(lab, name, f"mkdir -p {TABBY}/backends/exllamav3")
        for path, text in ((f"{TABBY}/main.py", MAIN_PY), (f"{TABBY}/backends/exllamav3/model.py", SEED_MODEL_PY),
                           (f"{TABBY}/config.yml", STANDIN_CONFIG),
                           ("/etc/systemd/system/tabbyapi.service", TABBY_UNIT)):
            lab.client.push_file(name, path, text.encode(), mode=0o644)
        sh(lab, name, "systemctl daemon-reload && systemctl enable --now tabbyapi.service")
        wait_for("the tabbyAPI stand-in answering /health", lambda: serving(lab, name, "http://127.0.0.1:5000/health"))
        yield name, config
    finally:
        if name:
            lab.remove(name)


def assert_llama_original(lab: Lab, name: str, unit_sum: str) -> None:
    assert not exists(lab, name, DROPIN), "the probe's drop-in is still there"
    assert not exists(lab, name, RECORD.format("llama-server")), "the record of the interrupted probe is still there"
    assert sh(lab, name, f"sha256sum {UNIT_PATH}") == unit_sum
    assert active(lab, name, "llama-server") == "active"
    cmdline = sh(lab, name, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value llama-server)/cmdline")
    assert "--ctx-size 8192" in cmdline and "--cache-type-k q4_0" in cmdline, cmdline
    assert serving(lab, name, "http://127.0.0.1:8001/health")
    assert helpers_running(lab, name) == "", "a probe helper still runs in the guest and could stop the server later"


def llama_probe(name: str, config: Path) -> subprocess.Popen[str]:
    return start_probe("--engine", "llamacpp", "--guest", name, "--cache-type", "f16", "--lo", "8192",
                       "--hi", "262144", "--model-config", str(config))


@pytest.fixture
def name(box) -> str:
    return box[0]


def test_sigkill_mid_restart_then_probe_restore_puts_the_original_back(lab, box, name):
    _, config = box
    unit_sum = sh(lab, name, f"sha256sum {UNIT_PATH}")
    proc = llama_probe(name, config)
    try:
        wait_for("the probe's drop-in and its restore record in the guest (a restart under way)",
                 lambda: exists(lab, name, DROPIN) and exists(lab, name, RECORD.format("llama-server")))
        proc.kill()  # SIGKILL: no finally, nothing restored by the probe itself
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    record = json.loads(sh(lab, name, f"cat {RECORD.format('llama-server')}"))
    assert record["mode"] == "restore" and record["start"] is True
    assert record["install"] == [{"path": DROPIN, "remove": True}]
    began = time.monotonic()
    run = labwright("probe", "restore", "--guest", name)
    serving_again = time.monotonic() - began
    assert run.returncode == 0, run.stdout + run.stderr
    assert "interrupted probe had left llama-server.service on a candidate config" in run.stdout, run.stdout
    assert "healthy again" in run.stdout, run.stdout
    print(f"\nSIGKILL mid-restart (llama-server): serving again {serving_again:.1f}s after `labwright probe restore` "
          "began")
    assert_llama_original(lab, name, unit_sum)
    again = labwright("probe", "restore", "--guest", name)
    assert again.returncode == 0 and "nothing to restore" in again.stdout, again.stdout + again.stderr


def test_sigkill_of_the_probe_and_its_guest_helper_leaves_a_record_that_restores(lab, box, name):
    """A lost guest connection: the helper inside dies too, so nothing halts the candidate server."""
    _, config = box
    unit_sum = sh(lab, name, f"sha256sum {UNIT_PATH}")
    proc = llama_probe(name, config)
    try:
        wait_for("the probe's drop-in in place and its helper's pid file (a restart under way)",
                 lambda: exists(lab, name, DROPIN) and exists(lab, name, "/run/labwright-probe-llama-server.service"
                                                                         ".pid"))
        proc.kill()
        proc.communicate(timeout=60)
        sh(lab, name, "kill -9 $(cat /run/labwright-probe-llama-server.service.pid) 2>/dev/null || true")
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_for("no probe helper left in the guest", lambda: helpers_running(lab, name) == "")
    began = time.monotonic()
    run = labwright("probe", "restore", "--guest", name, "--service", "llama-server")
    serving_again = time.monotonic() - began
    assert run.returncode == 0, run.stdout + run.stderr
    print(f"\nSIGKILL of the probe and its helper (llama-server): serving again {serving_again:.1f}s after "
          "`labwright probe restore` began")
    assert_llama_original(lab, name, unit_sum)


def test_sigterm_mid_restart_restores_before_exiting(lab, box, name):
    _, config = box
    unit_sum = sh(lab, name, f"sha256sum {UNIT_PATH}")
    proc = llama_probe(name, config)
    try:
        wait_for("the probe's drop-in in the guest (a restart under way)", lambda: exists(lab, name, DROPIN))
        began = time.monotonic()
        _, err = kill(proc, signal.SIGTERM)
        serving_again = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; the original config of llama-server.service was put back" in err, err
    print(f"\nSIGTERM mid-restart (llama-server): serving again {serving_again:.1f}s after the signal")
    assert_llama_original(lab, name, unit_sum)


def test_sigkill_mid_restart_of_tabbyapi_the_next_probe_restores_config_yml_first(lab, box, name):
    """Without the record, the next run would read the killed run's candidate config.yml as the original."""
    original = sh(lab, name, f"sha256sum {TABBY}/config.yml")
    args = ("--engine", "tabbyapi", "--guest", name, "--cache-mode", "8,4", "--lo", "4096", "--hi", "65536",
            "--model-config", str(QWEN), "--budget", str(12288 * 30500), "--timeout", "10")
    proc = start_probe(*args)
    try:
        wait_for("a candidate config.yml written by the probe and its restore record",
                 lambda: sh(lab, name, f"head -c {len(MARK)} {TABBY}/config.yml") == MARK
                 and exists(lab, name, RECORD.format("tabbyapi")))
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sh(lab, name, f"head -c {len(MARK)} {TABBY}/config.yml") == MARK  # the candidate is what is left
    # --dry changes nothing, and says the real run restores first
    dry = labwright("probe", "ceiling", *args, "--dry")
    assert dry.returncode == 0, dry.stderr
    assert "an interrupted probe left /var/lib/labwright/probe/tabbyapi.service.json" in dry.stderr, dry.stderr
    assert sh(lab, name, f"head -c {len(MARK)} {TABBY}/config.yml") == MARK
    began = time.monotonic()
    run = labwright("probe", "ceiling", *args, "--json")
    took = time.monotonic() - began
    assert run.returncode == 0, run.stdout + run.stderr
    assert "interrupted probe had left tabbyapi.service on a candidate config" in run.stderr, run.stderr
    data = json.loads(run.stdout)
    assert data["ceiling"] == STANDIN_LIMIT // 256 * 256, data  # found against the user's config, not a candidate
    assert "healthy again" in data["restored"]
    print(f"\nSIGKILL mid-restart (tabbyAPI stand-in): the next probe restored and completed in {took:.1f}s")
    assert sh(lab, name, f"sha256sum {TABBY}/config.yml") == original
    assert not exists(lab, name, RECORD.format("tabbyapi"))
    assert active(lab, name, "tabbyapi") == "active" and serving(lab, name, "http://127.0.0.1:5000/health")


def test_a_config_changed_by_someone_else_after_the_kill_is_kept(lab, box, name):
    """The record restores only what the probe wrote: a config.yml the user rewrote since is not overwritten."""
    args = ("--engine", "tabbyapi", "--guest", name, "--cache-mode", "Q4", "--lo", "4096", "--hi", "65536",
            "--timeout", "10")
    original = sh(lab, name, f"cat {TABBY}/config.yml")
    proc = start_probe(*args)
    try:
        wait_for("a candidate config.yml written by the probe",
                 lambda: sh(lab, name, f"head -c {len(MARK)} {TABBY}/config.yml") == MARK)
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    users = original + "# the user's own edit, made after the probe was killed\n"
    try:
        lab.client.push_file(name, f"{TABBY}/config.yml", users.encode())
        run = labwright("probe", "restore", "--guest", name)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"kept {TABBY}/config.yml" in run.stdout, run.stdout
        assert sh(lab, name, f"cat {TABBY}/config.yml") == users
    finally:
        lab.client.push_file(name, f"{TABBY}/config.yml", original.encode())
        sh(lab, name, "systemctl restart tabbyapi")
