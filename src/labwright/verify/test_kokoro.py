"""testinfra checks of what deploys/kokoro.py promises, on a deployed TTS host.

    labwright verify kokoro --hosts=@lxd/tts
    LABWRIGHT_KOKORO_DEVICE=gpu labwright verify kokoro --hosts=@ssh/root@ADDR

Expected values come from the environment, else templates/kokoro/defaults.toml: LABWRIGHT_KOKORO_SERVICE,
LABWRIGHT_KOKORO_USER, LABWRIGHT_KOKORO_PORT, LABWRIGHT_KOKORO_DIR, LABWRIGHT_KOKORO_DEVICE (cpu|gpu; default: the
choice rule's device for conversational use), LABWRIGHT_KOKORO_PATCHED (true: the streaming patch is in place) and
LABWRIGHT_KOKORO_OPEN (true: listening beyond loopback on purpose, reported as a warning instead of a failure).
The patch is checked with the same planner `labwright kokoro patch` uses: on a patched tree it answers "already".
"""

from __future__ import annotations

import os
import tomllib
import warnings

from labwright import paths
from labwright.kokoro.streaming import KOKORO_V1, TTS_SERVICE, KokoroTexts, plan_streaming
from labwright.shell import quote
from labwright.textio import ascii_digits

DEFAULTS = tomllib.loads((paths.templates_dir("kokoro") / "defaults.toml").read_text())


def setting(name: str, default: object) -> str:
    return os.environ.get(f"LABWRIGHT_KOKORO_{name.upper()}") or str(default)


SERVICE = setting("service", DEFAULTS["service"]["service"])
USER = setting("user", DEFAULTS["service"]["user"])
PORT = int(setting("port", DEFAULTS["service"]["port"]))
DIR = setting("dir", DEFAULTS["service"]["dir"])
DEVICE = setting("device", DEFAULTS["choice"]["conversational"])
PATCHED = setting("patched", "true").lower() in ("1", "true", "yes", "on")
OPEN = setting("open", "false").lower() in ("1", "true", "yes", "on")
URL = f"http://127.0.0.1:{PORT}"

POST = """
import json, sys, urllib.request
body = json.dumps({"model": "kokoro", "input": sys.argv[2], "voice": "af_heart", "response_format": "wav",
                   "stream": True}).encode()
request = urllib.request.Request(sys.argv[1], data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=120) as r:
    data = r.read()
    print(r.status, len(data), data[:4].decode("latin-1"))
"""


def main_pid(host) -> str:
    pid = host.run(f"systemctl show -p MainPID --value {SERVICE}.service").stdout.strip()
    assert ascii_digits(pid) and pid != "0", f"{SERVICE}.service has no running main process"
    return pid


def test_unit_enabled_and_active(host):
    unit = host.service(f"{SERVICE}.service")
    assert unit.is_enabled, "unit is not enabled: it would not come back after a reboot"
    assert unit.is_running


def test_runs_as_the_service_user(host):
    owner = host.run(f"ps -o user= -p {main_pid(host)}").stdout.strip()
    assert owner == USER and owner != "root"


def test_device_as_chosen(host):
    environ = host.run(f"tr '\\0' '\\n' < /proc/{main_pid(host)}/environ").stdout.splitlines()
    want = DEFAULTS["device"][DEVICE]["env"]
    missing = [f"{k}={v}" for k, v in want.items() if f"{k}={v}" not in environ]
    assert not missing, f"the server's environment lacks {missing} for device {DEVICE}"


def test_streaming_patch_in_place(host):
    texts = KokoroTexts(host.file(f"{DIR}/{KOKORO_V1}").content_string,
                        host.file(f"{DIR}/{TTS_SERVICE}").content_string, DIR)
    change = plan_streaming(texts)
    if PATCHED:
        assert change.mode == "already", f"{change.mode}: {change.message}"
    else:
        assert change.mode != "already"


def test_port_listening(host):
    assert host.socket(f"tcp://0.0.0.0:{PORT}").is_listening or host.socket(f"tcp://127.0.0.1:{PORT}").is_listening


class OpenEngine(UserWarning):
    """An engine that answers without a key, on purpose (kokoro_open=true): reported."""


def test_listens_on_loopback_only(host):
    """Kokoro-FastAPI has no API key (api/src/core/config.py), so it is reached only from its own guest: every socket
    on its port is a loopback one. Open on purpose (LABWRIGHT_KOKORO_OPEN=true, kokoro_open=true) is reported as a
    warning; open without being asked to is a failure."""
    listening = host.run(f"ss -ltnH 'sport = :{PORT}'")
    assert listening.rc == 0, listening.stderr
    addresses = [line.split()[3].rsplit(":", 1)[0].strip("[]") for line in listening.stdout.splitlines() if line]
    assert addresses, f"nothing listens on port {PORT}"
    exposed = [a for a in addresses if not (a.startswith("127.") or a == "::1")]
    if exposed and OPEN:
        warnings.warn(OpenEngine(f"{SERVICE} answers without a key on {', '.join(exposed)}:{PORT}, on purpose "
                                 "(kokoro_open=true)"), stacklevel=1)
    else:
        assert not exposed, (f"{SERVICE} listens on {', '.join(exposed)}:{PORT}: every client there uses it without a "
                             "key; deploy it again with kokoro_host=127.0.0.1 (kokoro_open=true if on purpose)")


def test_health_ok(host):
    code = "import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1], timeout=10); print(r.status, r.read())"
    result = host.run(f"python3 -c {quote(code)} {quote(URL + '/health')}")
    assert result.rc == 0 and result.stdout.startswith("200 "), result.stdout + result.stderr
    assert "healthy" in result.stdout


def test_speech_streams_wav(host):
    result = host.run(f"python3 -c {quote(POST)} {quote(URL + '/v1/audio/speech')} "
                      f"{quote('Hello there. This is a test.')}")
    assert result.rc == 0, result.stderr[-500:]
    status, size, magic = result.stdout.split()
    assert (status, magic) == ("200", "RIFF") and int(size) > 44
