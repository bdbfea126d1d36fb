"""The lab key: made once, never partial, the public half always derivable from the private one."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.lab.keys import MAX_PUBLIC_BYTES, ensure_lab_key
from support import non_files


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


# The public half is never trusted for being there: it is used only when it is one line ``ssh-ed25519 <base64>
# [comment]`` with the private key's public key (what ssh-keygen -y derives), else written again from the private key.

def keygen_public(private: Path) -> list[str]:
    """(type, base64) of the public key ssh-keygen derives from ``private``."""
    out = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    return out.split()[:2]


def assert_matches(private: Path, line: str) -> None:
    want = keygen_public(private)
    assert line.split()[:2] == want and "\n" not in line
    assert private.with_suffix(".pub").read_text().split()[:2] == want


def assert_no_temporary(home: Path) -> None:
    assert not [p.name for p in home.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]


def another_public_line() -> bytes:
    key = Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b" other\n"


JUNK = {
    "empty": lambda good: b"",
    "whitespace": lambda good: b" \n\n\t",
    "invalid utf-8": lambda good: b"\xff\xfe\xfa ssh-ed25519",
    "binary": lambda good: b"\0\1\2\3" * 100,
    "json list": lambda good: b"[1,2,3]",
    "json object": lambda good: b"{}",
    "truncated line": lambda good: good[:40],
    "truncated key": lambda good: good.split(b" ")[0] + b" " + good.split(b" ")[1][:-4] + b"\n",
    "another key": lambda good: another_public_line(),
    "another type": lambda good: b"ssh-rsa " + good.split(b" ")[1] + b"\n",
    "two lines": lambda good: good + another_public_line(),
    "a NUL in the comment": lambda good: good.rstrip(b"\n") + b"\0x\n",
    "too long": lambda good: good.rstrip(b"\n") + b" " + b"x" * (MAX_PUBLIC_BYTES + 1) + b"\n",
}


@pytest.mark.parametrize("junk", sorted(JUNK))
def test_a_junk_public_half_is_written_again_from_the_private_key(tmp_path, monkeypatch, junk):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private, line, _ = ensure_lab_key()
    pub = private.with_suffix(".pub")
    pub.write_bytes(JUNK[junk](pub.read_bytes()))
    said = []
    assert ensure_lab_key(say=said.append) == (private, line, False)
    assert_matches(private, line)
    assert oct(pub.stat().st_mode & 0o777) == "0o644"
    assert len(said) == 1 and str(pub) in said[0] and "\n" not in said[0]
    assert_no_temporary(tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_any_bytes_as_the_public_half_are_replaced_or_right(tmp_path, monkeypatch, junk):
    home = tmp_path / "home"
    monkeypatch.setenv("LABWRIGHT_HOME", str(home))
    if not home.exists():  # one private key for every example: made once
        ensure_lab_key()
    private = home / "lab_ed25519"
    private.with_suffix(".pub").write_bytes(junk)
    _, line, created = ensure_lab_key()
    assert not created
    assert_matches(private, line)
    assert_no_temporary(home)


def test_a_right_public_half_with_its_own_comment_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private, line, _ = ensure_lab_key()
    pub = private.with_suffix(".pub")
    mine = " ".join(line.split()[:2]) + " me@laptop"
    pub.write_text(mine + "\n")
    before = pub.stat()
    said = []
    assert ensure_lab_key(say=said.append) == (private, mine, False)
    assert (pub.stat().st_ino, pub.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns) and not said


def test_a_dangling_link_as_the_public_half_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private, line, _ = ensure_lab_key()
    pub = private.with_suffix(".pub")
    pub.unlink()
    pub.symlink_to(tmp_path / "nowhere")
    assert ensure_lab_key()[1] == line
    assert not pub.is_symlink() and not (tmp_path / "nowhere").exists()
    assert_matches(private, line)


@pytest.mark.parametrize("kind", ["directory", "symlink loop", "fifo"])
def test_no_file_as_the_public_half_is_one_line(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private, _, _ = ensure_lab_key()
    pub = private.with_suffix(".pub")
    pub.unlink()
    non_files.put(pub, "directory with a file" if kind == "directory" else kind)
    with pytest.raises(BadInput) as caught:
        ensure_lab_key()
    message = str(caught.value)
    assert "\n" not in message and str(pub) in message and "remove it" in message, message
    assert_no_temporary(tmp_path)


@pytest.mark.parametrize("kind", ["directory", "symlink loop", "passphrase", "rsa", "binary"])
def test_an_unusable_private_key_is_one_line(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("LABWRIGHT_HOME", str(tmp_path))
    private = tmp_path / "lab_ed25519"
    if kind == "directory":
        private.mkdir()
    elif kind == "symlink loop":
        private.symlink_to(private.name)
    elif kind == "binary":
        private.write_bytes(b"\xff\0\1" * 50)
    else:
        args = ["-t", "ed25519", "-N", "secret"] if kind == "passphrase" else ["-t", "rsa", "-b", "1024", "-N", ""]
        subprocess.run(["ssh-keygen", "-q", *args, "-f", str(private)], check=True, timeout=60)
        private.with_suffix(".pub").unlink()
    with pytest.raises(BadInput) as caught:
        ensure_lab_key()
    message = str(caught.value)
    assert "\n" not in message and str(private) in message and "move it away" in message, message
    assert_no_temporary(tmp_path)


def test_a_data_directory_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("a file")
    monkeypatch.setenv("LABWRIGHT_HOME", str(home / "labwright"))
    with pytest.raises(BadInput) as caught:
        ensure_lab_key()
    assert "\n" not in str(caught.value) and str(home) in str(caught.value)
