"""The desktop user's password from the environment, hashed here (SHA-512 crypt through ``openssl passwd -6``, the
password on stdin), so only the hash reaches the guest (through ``chpasswd -e`` on stdin, never a command line or a
log). A password nobody gave is generated on the guest instead (labwright.operations.desktop.user_password)."""

from __future__ import annotations

import secrets
import shutil
import string
import subprocess

from labwright.errors import OperationFailed

ALPHABET = string.ascii_letters + string.digits
SALT_ALPHABET = string.ascii_letters + string.digits + "./"


def generate(length: int = 16) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def sha512_crypt(password: str, salt: str | None = None) -> str:
    """``$6$SALT$HASH`` as /etc/shadow stores it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise OperationFailed("openssl is not on PATH on this machine; install it (apt-get install openssl) to hash "
                              "the desktop password")
    salt = salt or "".join(secrets.choice(SALT_ALPHABET) for _ in range(16))
    proc = subprocess.run([openssl, "passwd", "-6", "-salt", salt, "-stdin"], input=password + "\n",
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.startswith("$6$"):
        raise OperationFailed(f"openssl passwd -6 failed: {proc.stderr.strip()[:200]}")
    return proc.stdout.strip()


def matches(password: str, shadow_hash: str) -> bool:
    """Whether ``password`` is the one behind a SHA-512 crypt hash (any other scheme: unknown, so False)."""
    parts = shadow_hash.split("$")
    if len(parts) != 4 or parts[1] != "6":
        return False
    return secrets.compare_digest(sha512_crypt(password, parts[2]), shadow_hash)
