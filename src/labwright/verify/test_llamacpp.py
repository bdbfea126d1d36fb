"""testinfra checks of what deploys/llamacpp.py promises, on a deployed host.

    labwright verify llamacpp --hosts=lxc://lw-node1 --llamacpp-model=/srv/models/q.gguf
    labwright verify llamacpp --hosts=ssh://root@ADDR --llamacpp-flag ctx_size=65536 \
        --llamacpp-flag port=8080

Expected values: labwright/data/templates/llamacpp/defaults.toml overridden by --llamacpp-service, --llamacpp-user,
--llamacpp-model, --llamacpp-alias and --llamacpp-flag KEY=VALUE (see labwright/verify/conftest.py). Flags are read from
the running process's /proc/PID/cmdline, not from the unit file, so a unit edited without a restart is caught too.
The HTTP checks run on the host itself (python3), so they also work when the port is only bound to loopback.
"""

from __future__ import annotations

import json

import pytest

from labwright.gpu.check import engine_on_gpu
from labwright.shell import quote

HTTP_GET = (
    "import sys, urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=10) as r:\n"
    "    sys.stdout.write(str(r.status) + '\\n' + r.read().decode())\n"
)


def http_get(host, url: str) -> tuple[int, str]:
    result = host.run(f"python3 -c {quote(HTTP_GET)} {quote(url)}")
    assert result.rc == 0, f"GET {url} failed on the host: {result.stderr.strip()[-500:]}"
    status, _, body = result.stdout.partition("\n")
    return int(status), body


@pytest.fixture(scope="module")
def main_pid(host, llamacpp_expected) -> int:
    pid = host.run(f"systemctl show -p MainPID --value {quote(llamacpp_expected.service)}.service")
    if pid.rc != 0 or not pid.stdout.strip().isdigit() or int(pid.stdout) == 0:
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
        if want is True:
            if following is not None and not following.startswith("-"):
                problems.append(f"{option} has a value {following!r}, expected a bare switch")
        elif isinstance(want, dict | list):
            try:
                got = json.loads(following or "")
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


def test_port_listening(host, llamacpp_expected):
    address = str(llamacpp_expected.flags.get("host") or "0.0.0.0")
    assert host.socket(f"tcp://{address}:{llamacpp_expected.port}").is_listening


def test_health_ok(host, llamacpp_expected):
    status, body = http_get(host, llamacpp_expected.url + "/health")
    assert status == 200
    assert json.loads(body).get("status") == "ok", body


def test_models_lists_the_model(host, llamacpp_expected):
    status, body = http_get(host, llamacpp_expected.url + "/v1/models")
    assert status == 200
    ids = [str(model.get("id")) for model in json.loads(body).get("data", [])]
    model = llamacpp_expected.model
    wanted = {llamacpp_expected.alias} if llamacpp_expected.alias else {model, model.rsplit("/", 1)[-1]}
    assert wanted & set(ids), f"/v1/models lists {ids}, expected one of {sorted(wanted)}"


def test_engine_runs_on_the_gpu(host, llamacpp_expected):
    """On a host with an NVIDIA GPU node, llama-server really uses it: its process holds /dev/nvidiaN open and its log
    names no CPU fallback (labwright.gpu.check; `labwright gpu check GUEST` runs the same and more)."""
    def run(command: str) -> tuple[int, str]:
        result = host.run(command)
        return result.rc, result.stdout

    check = engine_on_gpu(run, llamacpp_expected.service)
    if check is None:
        pytest.skip("no /dev/nvidiaN GPU node on this host: a CPU host, GPU use not checked")
    assert check.ok, f"{check.detail}; cause: {check.cause}; fix: {check.fix}"
