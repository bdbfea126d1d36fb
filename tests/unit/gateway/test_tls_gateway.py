"""labwright.gateway.config: client names, certificate names, the user's certificate against its key, routes from
inventory data, and the Caddyfile (adapted by the real caddy where Debian's package is installed); the client-key
script run for real on a temporary directory."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from labwright.gateway.config import (
    GatewayError,
    cert_key_problem,
    client_keys_command,
    clients_of,
    names_of,
    render_caddyfile,
    routes_of,
)
from labwright.litellm.config import EngineHost


@pytest.mark.parametrize(("value", "words"), [
    ("laptop,be\x07ll", "'be\\x07ll' contains a control character (\\x07)"),
    (["ok", "tab\there"], "contains a control character (\\t)"),
    ("a b", "is not a client name"),
    ("x,x", "'x' is listed twice"),
    ([], "is empty"),
])
def test_a_bad_client_name_is_one_line(value, words):
    with pytest.raises(GatewayError, match="^gateway_clients: ") as caught:
        clients_of(value)
    text = str(caught.value)
    assert words in text and text.isprintable(), text


def test_clients_list_or_comma_string():
    assert clients_of("laptop, bench") == ["laptop", "bench"]
    assert clients_of(["a-1", "b_2"]) == ["a-1", "b_2"]


def test_names_always_include_loopback_and_refuse_junk():
    assert names_of([], ["10.99.0.5"]) == ["10.99.0.5", "localhost", "127.0.0.1"]
    assert names_of("llm.lab.example", ["10.99.0.5"]) == ["llm.lab.example", "localhost", "127.0.0.1"]
    with pytest.raises(GatewayError, match="control character"):
        names_of(["llm\x1b[31m"], [])
    with pytest.raises(GatewayError, match="neither an IP address nor a DNS name"):
        names_of(["-bad-"], [])


def pem_pair(common_name: str = "gw") -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_a_certificate_and_its_own_key_pass_another_key_is_one_line():
    cert, key = pem_pair()
    _, other = pem_pair()
    assert cert_key_problem(cert, key, "c.pem", "k.pem") is None
    problem = cert_key_problem(cert, other, "c.pem", "other.pem")
    assert problem == ("gateway_key_file: other.pem does not belong to the certificate c.pem (their public keys "
                       "differ); give the key the certificate was issued for (nothing was changed)")
    assert cert_key_problem(b"junk", key, "c.pem", "k.pem") == (
        "gateway_cert_file: c.pem is not a PEM certificate (nothing was changed)")
    assert "is not a usable private key" in (cert_key_problem(cert, b"junk", "c.pem", "k.pem") or "")


def address(host: EngineHost) -> str:
    return {"@lxd/e1": "10.99.0.11", "@lxd/e2": "10.99.0.12", "@lxd/gw": "10.99.0.10"}[host.name]


def test_routes_per_engine_and_litellm_as_the_default():
    hosts = [EngineHost("@lxd/gw", {"gateway_clients": "a", "litellm_port": 4000}, True),
             EngineHost("@lxd/e1", {"llamacpp_model": "/srv/models/qwen.gguf"}, False),
             EngineHost("@lxd/e2", {"tabbyapi_model_name": "Qwen3-8B-exl3"}, False)]
    routes, default = routes_of(hosts, address)
    assert [(r.slug, r.upstream, r.env) for r in routes] == [
        ("qwen", "10.99.0.11:8001", "ENGINE_KEY_LLAMACPP_LXD_E1"),
        ("Qwen3-8B-exl3", "10.99.0.12:5000", "ENGINE_KEY_TABBYAPI_LXD_E2")]
    assert default is not None and (default.upstream, default.env) == ("127.0.0.1:4000", "ENGINE_KEY_LITELLM_LXD_GW")
    assert default.key is not None and default.key.name == "LITELLM_MASTER_KEY"
    # Two engines and no LiteLLM: no default, every engine by its own path.
    assert routes_of(hosts[1:], address)[1] is None


def caddyfile(tmp_path: Path) -> Path:
    hosts = [EngineHost("@lxd/gw", {"gateway_clients": "a", "llamacpp_model": "/srv/models/tiny.gguf"}, True)]
    routes, default = routes_of(hosts, address)
    (tmp_path / "clients.caddy").write_text('header Authorization "Bearer lw-' + "a" * 43 + '"\n')
    path = tmp_path / "Caddyfile"
    path.write_text(render_caddyfile(names_of([], ["10.99.0.10"]), 8443, 2019, str(tmp_path), routes, default))
    return path


def test_caddy_adapts_the_caddyfile_keys_only_as_placeholders(tmp_path):
    adapted = subprocess.run(["caddy", "adapt", "--adapter", "caddyfile", "--config", str(caddyfile(tmp_path))],
                             capture_output=True, text=True)
    assert adapted.returncode == 0, adapted.stderr
    text = adapted.stdout
    doc = json.loads(text)
    assert doc["apps"]["http"]["servers"]["srv0"]["listen"] == [":8443"]
    assert '"Bearer lw-' + "a" * 43 + '"' in text  # the client's key, from the imported clients.caddy
    assert "Bearer {env.ENGINE_KEY_LLAMACPP_LXD_GW}" in text  # the engine's: a placeholder, read at run time
    assert '"strip_path_prefix":"/engines/tiny"' in text.replace(" ", "")
    assert '"flush_interval":-1' in text.replace(" ", "")


def test_the_client_key_script_makes_keys_keeps_them_and_refuses_a_control_character(tmp_path):
    def run(mode: str, *clients: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", client_keys_command(str(tmp_path), list(clients), check=mode == "check")],
                              capture_output=True, text=True)

    assert run("check", "a", "b").stdout.strip() == "stale"
    assert run("write", "a", "b").returncode == 0
    keys = {n: (tmp_path / "clients" / n).read_text().strip() for n in ("a", "b")}
    assert keys["a"] != keys["b"] and all(k.startswith("lw-") and len(k) == 46 for k in keys.values())
    assert (tmp_path / "clients" / "a").stat().st_mode & 0o777 == 0o640
    assert run("check", "a", "b").stdout.strip() == "current"
    assert run("write", "a").returncode == 0  # b is no longer a client: its key is gone
    assert not (tmp_path / "clients" / "b").exists()
    assert (tmp_path / "clients" / "a").read_text().strip() == keys["a"]  # kept
    assert (tmp_path / "clients.caddy").read_text() == f'header Authorization "Bearer {keys["a"]}"\n'
    (tmp_path / "clients" / "a").write_text("lw-abc\x07\n")
    assert run("check", "a").stdout.strip() == "bad a"
    refused = run("write", "a")
    assert refused.returncode != 0 and "holds no usable key" in refused.stderr
