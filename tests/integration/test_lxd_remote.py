"""@lxd/REMOTE:NAME over HTTPS on loopback: client certificate, pinned server certificate.

Each test runs both ways commands can go: the agent session (its websockets over TLS) and REST execs.
"""

from __future__ import annotations

import datetime
import io
import textwrap
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import ConnectError

pytestmark = [pytest.mark.lab, pytest.mark.lab_resource("lxd-https")]  # core.https_address, the trust store

ADDRESS = "127.0.0.1:18443"


@pytest.fixture(params=[True, False], ids=["agent", "rest"])
def lxd_agent(request) -> bool:
    return request.param


def remote_host(name: str, config_dir, lxd_agent: bool):
    inventory = Inventory(([name], {"lxd_config_dir": str(config_dir), "lxd_agent": lxd_agent}))
    State(inventory, Config())
    return inventory.get_host(name)


def self_signed(common_name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA384()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()))


@pytest.fixture
def https_remote(lab, tmp_path):
    """The local daemon exposed on loopback HTTPS, trusted client cert, and an lxc-style config dir."""
    client = lab.client
    before = client.server()["config"].get("core.https_address", "")
    client.request("PATCH", "/1.0", {"config": {"core.https_address": ADDRESS}})
    cert, key = self_signed("labwright-test-client")
    client.request("POST", "/1.0/certificates", {"type": "client", "name": "labwright-test",
                                                  "certificate": cert.decode().split("-----")[2].strip()})
    fingerprint = x509.load_pem_x509_certificate(cert).fingerprint(hashes.SHA256()).hex()
    (tmp_path / "client.crt").write_bytes(cert)
    (tmp_path / "client.key").write_bytes(key)
    (tmp_path / "servercerts").mkdir()
    (tmp_path / "servercerts" / "labremote.crt").write_text(client.server()["environment"]["certificate"])
    (tmp_path / "config.yml").write_text(textwrap.dedent(f"""\
        default-remote: local
        remotes:
          labremote:
            addr: https://{ADDRESS}
            auth_type: tls
            protocol: lxd
            public: false
        """))
    yield tmp_path
    client.request("DELETE", f"/1.0/certificates/{fingerprint}")
    client.request("PATCH", "/1.0", {"config": {"core.https_address": before}})


def test_exec_and_files_through_an_https_remote(lab_container, https_remote, lxd_agent):
    name = f"@lxd/labremote:{lab_container}"
    inventory = Inventory(([name], {"lxd_config_dir": str(https_remote), "lxd_agent": lxd_agent}))
    state = State(inventory, Config())
    connect_all(state)
    host = inventory.get_host(name)
    assert host.connected
    session = host.connector.session
    assert (session is not None and session.alive) == lxd_agent
    ok, out = host.run_shell_command("hostname; echo ✓ >&2; exit 4")
    assert (ok, out.stdout_lines, out.stderr_lines) == (False, [lab_container], ["✓"])
    ok, out = host.run_shell_command("cat; seq 1 200000 >&2", _stdin="in")
    assert ok and out.stdout == "in" and out.stderr_lines == [str(i) for i in range(1, 200001)]
    with pytest.raises(TimeoutError):
        host.run_shell_command("sleep 10", _timeout=1)
    host.put_file(io.BytesIO(b"over tls\n"), "/root/tls.txt")
    buf = io.BytesIO()
    host.get_file("/root/tls.txt", buf)
    assert buf.getvalue() == b"over tls\n"
    assert host.connector.session is session


def test_agent_session_outlives_the_daemons_keepalive_pings(lab_container, https_remote):
    """Over TCP the daemon pings every exec websocket each 10 s: while a command runs and while idle."""
    host = remote_host(f"@lxd/labremote:{lab_container}", https_remote, True)
    host.connect(raise_exceptions=True)
    session = host.connector.session
    assert session is not None
    ok, out = host.run_shell_command("sleep 11; echo after")
    assert ok and out.stdout == "after"
    time.sleep(11)  # a duration under test (idle across one of the daemon's 10 s pings), not a wait for a state
    ok, out = host.run_shell_command("echo idle")
    assert ok and out.stdout == "idle"
    assert host.connector.session is session and session.alive
    host.disconnect()


def test_a_wrong_pinned_server_certificate_is_refused(lab_container, https_remote, lxd_agent):
    other, _ = self_signed("impostor")
    (https_remote / "servercerts" / "labremote.crt").write_bytes(other)
    host = remote_host(f"@lxd/labremote:{lab_container}", https_remote, lxd_agent)
    with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        host.connect(raise_exceptions=True)


def test_an_untrusted_client_certificate_is_refused(lab_container, https_remote, lxd_agent):
    cert, key = self_signed("stranger")
    (https_remote / "client.crt").write_bytes(cert)
    (https_remote / "client.key").write_bytes(key)
    host = remote_host(f"@lxd/labremote:{lab_container}", https_remote, lxd_agent)
    with pytest.raises(ConnectError) as info:
        host.connect(raise_exceptions=True)
    print(info.value)
    assert f"labremote:{lab_container}" in str(info.value)
    assert "not authorized" in str(info.value).lower() or "forbidden" in str(info.value).lower()
