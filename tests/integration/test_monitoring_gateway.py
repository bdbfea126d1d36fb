"""deploys/monitoring.py and deploys/gateway.py for real, on ONE fresh lab container (module-scoped) with the REAL
CPU llama-server (the cached build, labwright.llamacpp.build) and a tiny GGUF: Debian's prometheus,
prometheus-node-exporter and caddy from the container's mirror, the shipped verify suites as users run them.

The engine is deployed with ``gateway_*`` data on its own guest, so ``llamacpp_host=auto`` binds it to loopback: the
entrance is the only way in from the lab host. TLS is always verified (the internal CA's root that the deploy copied
to this machine, or the test's own CA), never switched off.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labwright.deploys.gateway import stored_root
from labwright.lab.lab import instance_address
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.paths import verify_suite
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra, tool_env
from labwright.testing.waiting import wait_for
from support import guest_apt

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
DATA = (f"llamacpp_model={MODEL}", "llamacpp_ctx_size=4096", "gateway_clients=bench,alice",
        "monitoring_scrape_interval=2s")
GATEWAY = 8443


def deploy(name: str, file: str, *data: str) -> DeployRun:
    return run_pyinfra(f"@lxd/{name}", f"deploys/{file}.py", *DATA, *data, cwd=REPO, timeout=900)


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def verify(name: str, suite: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", str(verify_suite(suite)), f"--hosts=lxc://{name}", "-q",
           "-p", "no:cacheprovider"]
    return subprocess.run(cmd, cwd=REPO, env=tool_env(), capture_output=True, text=True, timeout=300)


def one_refusal(run: DeployRun, start: str) -> str:
    """The run failed before any operation ran, with exactly one line starting ``start``."""
    assert run.rc != 0, run.output[-3000:]
    lines = [line for line in run.output.splitlines() if start in line]
    assert len(lines) == 1, run.output[-3000:]
    assert "Beginning operation run" not in run.output and "Traceback" not in run.output, run.output[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def guest(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    """One container: llama-server (loopback, behind the gateway), then monitoring, then the gateway."""
    build_llama_server()
    model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
    name = lab.fresh("lwmongw")
    try:
        sh(lab, name, "mkdir -p /srv/models")
        with model.open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        if not guest_apt.mirror_reachable(lab.client, name):
            pytest.skip("the container cannot reach a Debian mirror (prometheus, caddy)")
        for file in ("llamacpp", "monitoring", "gateway"):
            run = deploy(name, file)
            assert run.rc == 0, f"{file}: {run.output[-4000:]}"
            print(f"\n{file} deployed in {run.seconds:.1f}s")
        yield name, instance_address(lab.client, name) or ""
    finally:
        lab.remove(name)
        shutil.rmtree(stored_root(f"@lxd/{name}").parent, ignore_errors=True)


def query(lab: Lab, name: str, promql: str) -> list[dict]:
    """A query over Prometheus's HTTP API (it listens on the guest's loopback), asked on the guest."""
    script = ("import json, sys, urllib.parse, urllib.request\n"
              "url = 'http://127.0.0.1:9090/api/v1/query?query=' + urllib.parse.quote(sys.argv[1])\n"
              "print(json.dumps(json.load(urllib.request.urlopen(url, timeout=10))['data']['result']))\n")
    result = lab.client.exec(name, ["python3", "-c", script, promql])
    assert result.exit_code == 0, result.stderr.decode()
    return json.loads(result.stdout)


def complete(lab: Lab, name: str, tokens: int) -> None:
    """One completion straight to the engine on the guest (with its key, read there)."""
    script = ("import json, sys, urllib.request\n"
              "key = open('/etc/llama-server/api-key').read().strip()\n"
              "body = json.dumps({'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': int(sys.argv[1])})"
              ".encode()\n"
              "urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8001/v1/chat/completions', data=body,"
              " headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'}), timeout=60).read()\n")
    result = lab.client.exec(name, ["python3", "-c", script, str(tokens)])
    assert result.exit_code == 0, result.stderr.decode()


def test_prometheus_scrapes_the_cpu_llama_server(lab, guest):
    """The engine's own counters reach Prometheus through its keyed /metrics, and a query over the HTTP API returns
    the series, labelled with the guest; the node job carries the GPU script's series (a CPU guest: 0 GPUs)."""
    name, _ = guest
    complete(lab, name, 24)
    series = wait_for("llamacpp:tokens_predicted_total >= 24 in Prometheus", lambda: [
        s for s in query(lab, name, "llamacpp:tokens_predicted_total") if float(s["value"][1]) >= 24], timeout=60,
        every=0.5)
    assert series[0]["metric"]["guest"] == f"@lxd/{name}" and series[0]["metric"]["service"] == "llama-server"
    # The GPU script's series come through node-exporter's textfile collector, on their own timer: waited for too.
    up = wait_for("labwright_engine_up in Prometheus (the GPU script through the node job)",
                  lambda: query(lab, name, "labwright_engine_up"), timeout=60, every=0.5)
    assert [(s["metric"]["service"], s["value"][1]) for s in up] == [("llama-server", "1")], up
    gpus = {s["metric"]["vendor"]: s["value"][1] for s in query(lab, name, "labwright_gpu_count")}
    assert gpus == {"nvidia": "0", "amd": "0", "intel": "0"}, gpus
    # No GPU on the host: the "left VRAM" alert has nothing to say about a CPU engine.
    assert query(lab, name, 'ALERTS{alertname="ModelLeftVram"}') == []


def test_promtool_accepts_what_was_rendered_and_verify_passes(lab, guest):
    name, _ = guest
    assert "SUCCESS" in sh(lab, name, "promtool check config /etc/prometheus/prometheus.yml 2>&1")
    assert "SUCCESS: 12 rules found" in sh(lab, name, "promtool check rules /etc/prometheus/labwright-rules.yml 2>&1")
    for suite in ("monitoring", "gateway"):
        result = verify(name, suite)
        assert result.returncode == 0, f"verify {suite}:\n{result.stdout[-4000:]}{result.stderr[-2000:]}"


@pytest.mark.parametrize("file", ["monitoring", "gateway"])
def test_a_second_run_changes_nothing(guest, file):
    name, _ = guest
    again = deploy(name, file)
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]


def https(address: str, path: str, ca: Path | str, key: str | None = None, body: dict | None = None,
          ) -> tuple[int, list[str]]:
    """A request over TLS verified against ``ca`` only; a stream is read line by line as it comes."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"https://{address}:{GATEWAY}{path}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60, context=ssl.create_default_context(cafile=str(ca))) as got:
            return got.status, [line.decode().strip() for line in got if line.strip()]
    except urllib.error.HTTPError as error:
        return error.code, [error.read().decode()]


def test_tls_with_a_client_key_streams_a_wrong_or_missing_key_is_401(lab, guest):
    name, address = guest
    root = stored_root(f"@lxd/{name}")
    assert root.is_file(), "the deploy copies the internal CA's root to this machine"
    key = sh(lab, name, "cat /etc/caddy/labwright/clients/bench").strip()
    assert key != sh(lab, name, "cat /etc/caddy/labwright/clients/alice").strip()
    chat = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 16, "stream": True}
    status, lines = https(address, "/v1/chat/completions", root, key, chat)
    assert status == 200 and lines[-1] == "data: [DONE]", lines
    pieces = [json.loads(line[6:])["choices"][0]["delta"].get("content") for line in lines[:-1]]
    assert len([p for p in pieces if p]) >= 8, pieces  # token by token through the entrance
    # The engine's own route, with its prefix stripped on the way in.
    assert https(address, "/engines/tiny/v1/models", root, key)[0] == 200
    for wrong in (None, "lw-not-a-client-key", sh(lab, name, "cat /etc/llama-server/api-key").strip()):
        status, body = https(address, "/v1/chat/completions", root, wrong, chat)
        assert status == 401 and "Invalid API Key" in body[0], (wrong is None, status, body)
    # Without the gateway's root, TLS is not trusted (the system store does not know the internal CA).
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"https://{address}:{GATEWAY}/v1/models", timeout=10)


def test_the_engine_port_is_refused_from_outside_the_guest(guest):
    _, address = guest
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, 8001), timeout=10).close()


def test_bench_through_the_entrance_with_the_stored_root(lab, guest):
    name, address = guest
    key = sh(lab, name, "cat /etc/caddy/labwright/clients/bench").strip()
    result = subprocess.run(
        [sys.executable, "-m", "labwright", "bench", "llm", "--url", f"https://{address}:{GATEWAY}/v1", "--ca",
         str(stored_root(f"@lxd/{name}")), "--api-key-env", "LW_BENCH_KEY", "--contexts", "64", "--decode", "16",
         "--trials", "1", "--json"], cwd=REPO, env={**tool_env(), "LW_BENCH_KEY": key}, capture_output=True,
        text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert json.loads(result.stdout)["results"][0]["trials"][0]["decode_tokens"] == 16


def sha(lab: Lab, name: str, path: str) -> str:
    return hashlib.sha256(sh(lab, name, f"cat {path}").encode()).hexdigest()


def test_a_metrics_target_that_does_not_answer_is_one_line_and_nothing_changes(lab, guest):
    name, _ = guest
    before = sha(lab, name, "/etc/prometheus/prometheus.yml")
    line = one_refusal(deploy(name, "monitoring", "monitoring_targets=127.0.0.1:9"), "monitoring_targets: ")
    assert "http://127.0.0.1:9/metrics does not answer" in line and "(nothing was changed)" in line, line
    assert sha(lab, name, "/etc/prometheus/prometheus.yml") == before


def test_a_client_key_with_a_control_character_is_one_line_and_nothing_changes(lab, guest):
    name, _ = guest
    path = "/etc/caddy/labwright/clients/alice"
    kept, caddyfile = sh(lab, name, f"cat {path}"), sha(lab, name, "/etc/caddy/Caddyfile")
    sh(lab, name, f"printf 'lw-abc\\a\\n' > {path}")
    try:
        line = one_refusal(deploy(name, "gateway"), "gateway_clients: ")
        assert f"{path} on @lxd/{name} holds no usable key" in line, line
        assert sha(lab, name, "/etc/caddy/Caddyfile") == caddyfile
    finally:
        sh(lab, name, f"printf '%s' '{kept}' > {path}")


def certificate(tmp: Path, names: list[str]) -> tuple[Path, Path, Path, Path]:
    """A CA and a server certificate for ``names`` signed by it (cryptography), plus an unrelated key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    pem = serialization.Encoding.PEM

    def key_file(path: Path) -> tuple[Path, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return path, key

    _, ca_key = key_file(tmp / "ca.key")
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "labwright test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    server_key_path, server_key = key_file(tmp / "server.key")
    sans = [x509.IPAddress(ipaddress.ip_address(n)) for n in names]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(ca_key, hashes.SHA256()))
    (tmp / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp / "server.pem").write_bytes(cert.public_bytes(pem))
    other, _ = key_file(tmp / "other.key")
    return tmp / "server.pem", server_key_path, tmp / "ca.pem", other


def test_the_users_certificate_serves_and_a_key_that_is_not_its_own_is_refused(lab, guest, tmp_path):
    """Last in the module: the entrance moves to the user's certificate (a CA of this test's), verified with that
    CA; a key that does not belong to the certificate is refused first, in one line, with nothing changed."""
    name, address = guest
    cert, key, ca, other = certificate(tmp_path, [address, "127.0.0.1"])
    caddyfile = sha(lab, name, "/etc/caddy/Caddyfile")
    line = one_refusal(deploy(name, "gateway", f"gateway_cert_file={cert}", f"gateway_key_file={other}"),
                       "gateway_key_file: ")
    assert f"{other} does not belong to the certificate {cert}" in line, line
    assert sha(lab, name, "/etc/caddy/Caddyfile") == caddyfile
    run = deploy(name, "gateway", f"gateway_cert_file={cert}", f"gateway_key_file={key}", f"gateway_ca_file={ca}",
                 f"gateway_names={address}")
    assert run.rc == 0, run.output[-4000:]
    client = sh(lab, name, "cat /etc/caddy/labwright/clients/alice").strip()
    assert https(address, "/v1/models", ca, client)[0] == 200
    assert https(address, "/v1/models", ca)[0] == 401
    assert sh(lab, name, "stat -c '%a %U %G' /etc/caddy/labwright/tls/key.pem").split() == ["640", "root", "caddy"]


SECOND = "/srv/models/tiny2.gguf"
ROUTED = f'llamacpp_models=["{MODEL}", {{"path": "{SECOND}", "name": "second"}}]'


def router_status(lab: Lab, name: str) -> dict[str, str]:
    """The router's GET /models on the guest (with its key): each model's status (unloaded, loading, loaded)."""
    script = ("import json, urllib.request\n"
              "key = open('/etc/llama-server/api-key').read().strip()\n"
              "request = urllib.request.Request('http://127.0.0.1:8001/models', headers={'Authorization': "
              "'Bearer ' + key})\n"
              "print(json.dumps({m['id']: m['status']['value'] for m in json.load(urllib.request.urlopen(request, "
              "timeout=30))['data']}))\n")
    result = lab.client.exec(name, ["python3", "-c", script])
    assert result.exit_code == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_a_router_is_scraped_per_model_and_the_scrapes_load_nothing(lab, guest):
    """Last in the module: the engine becomes a llama-server router with two models (llamacpp_models: the tiny GGUF
    twice, as tests/integration/test_llamacpp_deploy.py does) and the monitoring deploy runs again. Prometheus asks
    /metrics?model=NAME&autoload=false of each (the pinned llama.cpp's router proxies it to that model's instance):
    a model not loaded is a target that is down and stays unloaded; once a request loads one, its counters arrive
    labelled with its name, and the GPU script says which is loaded."""
    name, _ = guest
    sh(lab, name, f"cp {MODEL} {SECOND} && chmod 644 {SECOND}")
    data = ("llamacpp_ctx_size=4096", "gateway_clients=bench,alice", "monitoring_scrape_interval=2s",
            "monitoring_gpu_interval=2s", ROUTED, "llamacpp_fit_overhead_gb=0.1")
    for file in ("llamacpp", "monitoring"):
        run = run_pyinfra(f"@lxd/{name}", f"deploys/{file}.py", *data, cwd=REPO, timeout=900)
        assert run.rc == 0, f"{file}: {run.output[-4000:]}"
    down = wait_for("both models' targets scraped, not loaded", lambda: len(
        query(lab, name, 'up{model=~"tiny|second"} == 0')) == 2, timeout=60, every=0.5)
    assert down and router_status(lab, name) == {"tiny": "unloaded", "second": "unloaded"}
    script = ("import json, urllib.request\n"
              "key = open('/etc/llama-server/api-key').read().strip()\n"
              "body = json.dumps({'model': 'second', 'messages': [{'role': 'user', 'content': 'hi'}], "
              "'max_tokens': 24}).encode()\n"
              "urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8001/v1/chat/completions', data=body,"
              " headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'}), timeout=120).read()\n")
    result = lab.client.exec(name, ["python3", "-c", script])
    assert result.exit_code == 0, result.stderr.decode()
    series = wait_for("llamacpp:tokens_predicted_total{model=second} >= 24", lambda: [
        s for s in query(lab, name, 'llamacpp:tokens_predicted_total{model="second"}') if float(s["value"][1]) >= 24],
        timeout=60, every=0.5)
    assert {k: series[0]["metric"][k] for k in ("guest", "service", "model")} == {
        "guest": f"@lxd/{name}", "service": "llama-server", "model": "second"}
    loaded = wait_for("labwright_engine_model_loaded of both", lambda: {
        s["metric"]["model"]: s["value"][1] for s in query(lab, name, "labwright_engine_model_loaded")} == {
        "tiny": "0", "second": "1"}, timeout=60, every=0.5)
    assert loaded and router_status(lab, name) == {"tiny": "unloaded", "second": "loaded"}
    assert [s["value"][1] for s in query(lab, name, 'up{model="tiny"}')] == ["0"]
