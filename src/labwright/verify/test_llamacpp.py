"""testinfra checks of what deploys/llamacpp.py promises, on a deployed host.

    labwright verify llamacpp --hosts=@lxd/lw-node1 --llamacpp-model=/srv/models/q.gguf
    labwright verify llamacpp --hosts=@ssh/root@ADDR --llamacpp-flag ctx_size=65536 \
        --llamacpp-flag port=8080

Expected values: templates/llamacpp/defaults.toml overridden by --llamacpp-service, --llamacpp-user,
--llamacpp-model, --llamacpp-alias and --llamacpp-flag KEY=VALUE (see labwright/verify/conftest.py). Flags are read from
the running process's /proc/PID/cmdline, not from the unit file, so a unit edited without a restart is caught too.
The HTTP checks run on the host itself (python3), so they also work when the port is only bound to loopback.
"""

from __future__ import annotations

import json
import warnings

import pytest

from labwright.gpu.check import engine_on_gpu
from labwright.hosts.testinfra import TestinfraHost
from labwright.shell import quote
from labwright.textio import ascii_digits, loads_json

HTTP_GET = (
    "import sys, urllib.request\n"
    "key = next((l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith('#')), '') "
    "if len(sys.argv) > 2 else ''\n"
    "headers = {'Authorization': 'Bearer ' + key} if key else {}\n"
    "with urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers=headers), timeout=10) as r:\n"
    "    sys.stdout.write(str(r.status) + '\\n' + r.read().decode())\n"
)


def http_get(host, url: str, key_file: str = "") -> tuple[int, str]:
    """GET on the host itself, with the key read there from ``key_file`` when given."""
    key = f" {quote(key_file)}" if key_file else ""
    result = host.run(f"python3 -c {quote(HTTP_GET)} {quote(url)}{key}")
    assert result.rc == 0, f"GET {url} failed on the host: {result.stderr.strip()[-500:]}"
    status, _, body = result.stdout.partition("\n")
    return int(status), body


@pytest.fixture(scope="module")
def main_pid(host, llamacpp_expected) -> int:
    pid = host.run(f"systemctl show -p MainPID --value {quote(llamacpp_expected.service)}.service")
    if pid.rc != 0 or not ascii_digits(pid.stdout.strip()) or int(pid.stdout) == 0:
        pytest.fail(f"{llamacpp_expected.service}.service has no running main process", pytrace=False)
    return int(pid.stdout)


@pytest.fixture(scope="module")
def cmdline(host, main_pid) -> list[str]:
    raw = host.run(f"tr '\\0' '\\n' < /proc/{main_pid}/cmdline")
    assert raw.rc == 0, raw.stderr
    return raw.stdout.rstrip("\n").split("\n")


def test_unit_enabled_and_active(host, llamacpp_expected):
    unit = host.service(f"{llamacpp_expected.service}.service")
    assert unit.is_enabled, "unit is not enabled: it would not come back after a reboot"
    assert unit.is_running


def test_unit_restarts_on_failure(host, llamacpp_expected):
    restart = host.run(f"systemctl show -p Restart --value {quote(llamacpp_expected.service)}.service")
    assert restart.stdout.strip() in ("on-failure", "always", "on-abnormal"), restart.stdout


def test_runs_as_the_service_user(host, llamacpp_expected, main_pid):
    owner = host.run(f"ps -o user= -p {main_pid}").stdout.strip()
    assert owner == llamacpp_expected.user
    assert owner != "root"


def test_model_is_the_configured_one(llamacpp_expected, cmdline):
    assert "--model" in cmdline, cmdline
    assert cmdline[cmdline.index("--model") + 1] == llamacpp_expected.model


def flag_mismatches(expected: dict[str, object], cmdline: list[str]) -> list[str]:
    problems = []
    for key, want in expected.items():
        option = "--" + key.replace("_", "-")
        present = option in cmdline
        if want is None or want is False or want == "" or want == {}:
            if present:
                problems.append(f"{option} is set but should be absent")
            continue
        if not present:
            problems.append(f"{option} is missing")
            continue
        index = cmdline.index(option)
        following = cmdline[index + 1] if index + 1 < len(cmdline) else None
        if key == "host" and want == "auto":  # the deploy picks loopback (gateway on this guest only) or 0.0.0.0
            if following not in ("127.0.0.1", "0.0.0.0"):
                problems.append(f"{option} is {following!r}, expected 127.0.0.1 or 0.0.0.0 (auto)")
            continue
        if want is True:
            if following is not None and not following.startswith("-"):
                problems.append(f"{option} has a value {following!r}, expected a bare switch")
        elif isinstance(want, dict | list):
            try:
                got = loads_json(following or "")
            except json.JSONDecodeError:
                got = following
            if got != want:
                problems.append(f"{option} is {following!r}, expected {json.dumps(want)}")
        elif str(following) != str(want):
            problems.append(f"{option} is {following!r}, expected {want!r}")
    return problems


def test_flags_as_configured(llamacpp_expected, cmdline):
    problems = flag_mismatches(llamacpp_expected.flags, cmdline)
    assert not problems, "; ".join(problems) + f"\ncommand line: {' '.join(cmdline)}"


def test_port_listening(host, llamacpp_expected, cmdline):
    address = str(llamacpp_expected.flags.get("host") or "0.0.0.0")
    if address == "auto":
        address = cmdline[cmdline.index("--host") + 1]
    assert host.socket(f"tcp://{address}:{llamacpp_expected.port}").is_listening


class OpenEngine(UserWarning):
    """An engine that answers without a key, on purpose (llamacpp_open=true / kokoro_open=true): reported."""


# Run on the host: the status of URL without a key, then with the key from FILE (its first line that is not a
# comment), so the key never leaves the host. Prints "<without> <with>".
KEY_CHECK = (
    "import sys, urllib.error, urllib.request\n"
    "def status(headers):\n"
    "    try:\n"
    "        with urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers=headers), timeout=10) as r:\n"
    "            return r.status\n"
    "    except urllib.error.HTTPError as error:\n"
    "        return error.code\n"
    "key = next(l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith('#'))\n"
    "print(status({}), status({'Authorization': 'Bearer ' + key}))\n"
)


def test_answers_only_with_its_key(host, llamacpp_expected, cmdline):
    """llama-server reads its key from the file the deploy made (--api-key-file, llama.cpp common/arg.cpp): without
    it every endpoint but /health and /v1/health answers 401 (tools/server/server-http.cpp). An engine open on
    purpose is reported as a warning, never silently passed; open without being asked to is a failure."""
    listen = cmdline[cmdline.index("--host") + 1] if "--host" in cmdline else llamacpp_expected.flags.get("host")
    where = f"{listen}:{llamacpp_expected.port}"
    if "--api-key-file" not in cmdline:
        if llamacpp_expected.open:
            warnings.warn(OpenEngine(f"{llamacpp_expected.service} answers without a key on {where}, on purpose "
                                     "(llamacpp_open=true)"), stacklevel=1)
            return
        pytest.fail(f"{llamacpp_expected.service} runs without --api-key-file: every client that reaches {where} "
                    "uses it without a key; deploy it again (llamacpp_open=true if that is on purpose)",
                    pytrace=False)
    key_file = cmdline[cmdline.index("--api-key-file") + 1]
    assert key_file == llamacpp_expected.api_key_file
    owner = host.run(f"stat -c '%a %U %G' {quote(key_file)}").stdout.split()
    assert owner == ["640", "root", llamacpp_expected.user], f"{key_file}: mode/owner {owner}, expected 640 root:user"
    result = host.run(f"python3 -c {quote(KEY_CHECK)} {quote(llamacpp_expected.url + '/v1/models')} "
                      f"{quote(key_file)}")
    assert result.rc == 0, result.stderr[-500:]
    assert result.stdout.split() == ["401", "200"], f"/v1/models without the key, then with it: {result.stdout}"


def test_health_ok(host, llamacpp_expected):
    status, body = http_get(host, llamacpp_expected.url + "/health")
    assert status == 200
    assert loads_json(body).get("status") == "ok", body


def test_models_lists_the_model(host, llamacpp_expected, cmdline):
    key_file = cmdline[cmdline.index("--api-key-file") + 1] if "--api-key-file" in cmdline else ""
    status, body = http_get(host, llamacpp_expected.url + "/v1/models", key_file)
    assert status == 200
    ids = [str(model.get("id")) for model in loads_json(body).get("data", [])]
    model = llamacpp_expected.model
    wanted = {llamacpp_expected.alias} if llamacpp_expected.alias else {model, model.rsplit("/", 1)[-1]}
    assert wanted & set(ids), f"/v1/models lists {ids}, expected one of {sorted(wanted)}"


def test_engine_runs_on_the_gpu(host, llamacpp_expected):
    """On a host with an NVIDIA GPU node, llama-server really uses it: its process holds /dev/nvidiaN open and its log
    names no CPU fallback (labwright.gpu.check; `labwright gpu check GUEST` runs the same and more)."""
    check = engine_on_gpu(TestinfraHost(host), llamacpp_expected.service)
    if check is None:
        pytest.skip("no /dev/nvidiaN GPU node on this host: a CPU host, GPU use not checked")
    assert check.ok, f"{check.detail}; cause: {check.cause}; fix: {check.fix}"
