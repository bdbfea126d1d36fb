"""`REMOTE:NAME` resolution from the lxc client's config.yml, as the lxc command does it."""

from __future__ import annotations

import re

import pytest

from labwright.errors import BadInput
from labwright.lxd.remotes import resolve_endpoint, split_target

CONFIG = """default-remote: local
remotes:
  local:
    addr: unix://
    public: false
  homelab:
    addr: https://127.0.0.1:8443
    auth_type: tls
    project: gpu
    protocol: lxd
    public: false
  othersock:
    addr: unix:///run/other/unix.socket
  plain:
    addr: http://127.0.0.1:8080
"""


@pytest.fixture
def confdir(tmp_path):
    (tmp_path / "config.yml").write_text(CONFIG)
    (tmp_path / "client.crt").write_text("cert")
    (tmp_path / "client.key").write_text("key")
    (tmp_path / "servercerts").mkdir()
    (tmp_path / "servercerts" / "homelab.crt").write_text("server")
    return tmp_path


def test_split_target():
    assert split_target("web1") == (None, "web1")
    assert split_target("homelab:web1") == ("homelab", "web1")


def test_https_remote_uses_client_cert_pinned_server_cert_and_project(confdir):
    endpoint, project = resolve_endpoint("homelab", confdir)
    assert endpoint.url == "https://127.0.0.1:8443"
    assert endpoint.client_cert == str(confdir / "client.crt")
    assert endpoint.server_cert == str(confdir / "servercerts" / "homelab.crt")
    assert endpoint.verify is True
    assert project == "gpu"


def test_unix_remotes(confdir):
    endpoint, _ = resolve_endpoint("othersock", confdir)
    assert endpoint.socket_path == "/run/other/unix.socket"
    endpoint, _ = resolve_endpoint("local", confdir, socket_path="/x/unix.socket")
    assert endpoint.socket_path == "/x/unix.socket"


def test_unknown_and_unsupported_remotes_are_bad_input(confdir):
    with pytest.raises(BadInput, match="'nas' is not configured .known: homelab, local, othersock, plain."):
        resolve_endpoint("nas", confdir)
    with pytest.raises(BadInput, match="not https:// or unix://"):
        resolve_endpoint("plain", confdir)


def test_remote_without_client_certificate(confdir):
    (confdir / "client.crt").unlink()
    with pytest.raises(BadInput, match="no client certificate"):
        resolve_endpoint("homelab", confdir)


@pytest.mark.parametrize(("content", "words"), [
    (b"remotes: [unclosed\n", "config.yml is not valid YAML (line 2"),
    (b"remotes:\n  x:\n    addr: caf\xe9\n", "config.yml is not UTF-8 text (byte 0xe9"),
    (b"- a\n- b\n", "config.yml: not an lxd client configuration"),
    (b"remotes: [a, b]\n", "config.yml: not an lxd client configuration"),
])
def test_broken_config_yml(tmp_path, content, words):
    (tmp_path / "config.yml").write_bytes(content)
    with pytest.raises(BadInput, match=re.escape(words)) as info:
        resolve_endpoint("x", tmp_path)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
