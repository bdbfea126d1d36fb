"""The lab's SSH key: generated once, randomly, kept on this machine only."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from labwright import paths
from labwright.errors import BadInput


def data_dir(create: bool = False) -> Path:
    path = Path(os.environ["LABWRIGHT_HOME"]) if os.environ.get("LABWRIGHT_HOME") else paths.data_root()
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def lab_key_path() -> Path:
    return data_dir() / "lab_ed25519"


def _write_new(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` with ``data`` only if it does not exist, never partially: the bytes go to a temporary file
    (fsynced) that is then hard-linked into place, which fails if another run made the file first. True if this
    call created it."""
    tmp = path.with_name(f".{path.name}.labwright.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _public_line(private: Path) -> bytes:
    key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return pub + b" labwright-lab\n"


def ensure_lab_key() -> tuple[Path, str, bool]:
    """Return (private key path, public key line, created?). Never overwrites an existing key; a run killed
    between the two files leaves the private key whole, and the public one is derived from it on the next run."""
    private = data_dir(create=True) / "lab_ed25519"
    public = private.with_suffix(".pub")
    created = False
    if not private.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        created = _write_new(private, pem, 0o600)
    try:
        line = public.read_text().strip()
    except FileNotFoundError:
        line = ""
    if not line:
        try:
            derived = _public_line(private)
        except (ValueError, OSError) as exc:
            raise BadInput(f"{private}: not a readable OpenSSH private key ({exc}); move it away and run again "
                           "to make a new lab key") from None
        public.unlink(missing_ok=True)
        _write_new(public, derived, 0o644)
        line = public.read_text().strip()
    return private, line, created
