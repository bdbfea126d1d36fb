"""The lab's SSH key: generated once, randomly, kept on this machine only."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from labwright import paths


def data_dir(create: bool = False) -> Path:
    path = Path(os.environ["LABWRIGHT_HOME"]) if os.environ.get("LABWRIGHT_HOME") else paths.data_root()
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def lab_key_path() -> Path:
    return data_dir() / "lab_ed25519"


def ensure_lab_key() -> tuple[Path, str, bool]:
    """Return (private key path, public key line, created?). Never overwrites an existing key."""
    private = data_dir(create=True) / "lab_ed25519"
    public = private.with_suffix(".pub")
    created = False
    if not private.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        public.write_text(pub.decode() + " labwright-lab\n")
        created = True
    return private, public.read_text().strip(), created
