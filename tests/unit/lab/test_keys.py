"""The lab key: made once, never partial, the public half always derivable from the private one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from labwright.errors import BadInput
from labwright.lab.keys import ensure_lab_key


def public_of(private: Path) -> str:
    key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()


def test_made_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private, public, created = ensure_lab_key()
    assert created and public.startswith(public_of(private)) and public.endswith("labwright-lab")
    assert oct(private.stat().st_mode & 0o777) == "0o600"
    again = ensure_lab_key()
    assert again == (private, public, False)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.parametrize("public_state", ["missing", "empty"])
def test_a_lost_public_half_is_derived_again(tmp_path, monkeypatch, public_state):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private, public, _ = ensure_lab_key()
    pub = private.with_suffix(".pub")
    pub.unlink() if public_state == "missing" else pub.write_text("")
    assert ensure_lab_key() == (private, public, False)


def test_a_broken_private_key_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    (tmp_path / "lab_ed25519").write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\ntrunc")
    with pytest.raises(BadInput, match="lab_ed25519: not a readable OpenSSH private key"):
        ensure_lab_key()


def test_killed_at_any_point_leaves_a_whole_key_or_none(tmp_path):
    """A child makes keys in fresh directories without pause; SIGKILL lands wherever it is. Every directory then
    holds no key or a whole one, and ensure_lab_key completes it."""
    for round_ in range(5):
        root = tmp_path / f"round{round_}"
        root.mkdir()
        pid = os.fork()
        if pid == 0:
            try:
                for i in range(100000):
                    os.environ["LABWRIGHT_HOME"] = str(root / f"k{i}")
                    ensure_lab_key()
            finally:
                os._exit(0)
        deadline = time.monotonic() + 120
        while len(list(root.iterdir())) < 3 + round_ * 7:
            assert time.monotonic() < deadline, "the key-making child made no directories within 120 s"
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for home in root.iterdir():
            private = home / "lab_ed25519"
            if private.exists():
                public_of(private)  # parses: whole
            os.environ["LABWRIGHT_HOME"] = str(home)
            try:
                made, line, _ = ensure_lab_key()
            finally:
                del os.environ["LABWRIGHT_HOME"]
            assert line.startswith(public_of(made))
