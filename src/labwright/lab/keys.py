"""The lab's SSH key: generated once, randomly, kept on this machine only.

The private key is the key; the public one beside it (``lab_ed25519.pub``) is derived from it and never trusted for
being there: it is used only when it is one line ``ssh-ed25519 <base64>[ comment]`` whose key is the private key's
public half, and written again from the private key (atomically) otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from labwright import paths
from labwright.atomic import write_bytes_atomic
from labwright.errors import BadInput
from labwright.textio import describe_oserror

#: Longer than any public key line (an ed25519 one is ~100 bytes with its comment): anything longer is not one.
MAX_PUBLIC_BYTES = 64 * 1024


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
    """``ssh-ed25519 <base64> labwright-lab\n`` for the private key at ``private``, or one BadInput line."""
    fix = "move it away and run again to make a new lab key"
    try:
        key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm, OSError) as exc:  # TypeError: one with a passphrase
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc).strip() or type(exc).__name__
        reason = " ".join(reason.split())  # one line
        raise BadInput(f"{private}: not a readable OpenSSH private key ({reason}); {fix}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"{private}: not an ed25519 key (a {type(key).__name__.removeprefix('_')}); {fix}")
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return pub + b" labwright-lab\n"


def _read_public(public: Path) -> bytes | None:
    """The bytes of the public key file, None where there is none or one too long to be one (written again from the
    private key); something there that is no regular file (a directory, a link loop) or cannot be read is one
    BadInput."""
    from labwright.agent.zipapp import read_cached

    return read_cached(public, "the lab SSH public key", max_bytes=MAX_PUBLIC_BYTES, kind_of_file="a key file",
                       fix="remove it and run again (labwright derives it from the private key beside it)")


def public_line_of(data: bytes | None, derived: bytes) -> str | None:
    """The public key line ``data`` holds when it is one line ``ssh-ed25519 <base64>[ comment]`` with the key of
    ``derived`` (what the private key gives); None for anything else."""
    if data is None or len(data) > MAX_PUBLIC_BYTES:
        return None
    try:
        line = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if not line.isprintable():  # a second line, a tab, a NUL or another control character
        return None
    kind, blob = derived.decode().split()[:2]
    parts = line.split(" ")
    return line if len(parts) >= 2 and parts[0] == kind and parts[1] == blob else None


def ensure_lab_key(say: Callable[[str], None] | None = None) -> tuple[Path, str, bool]:
    """Return (private key path, public key line, created?). Never overwrites an existing private key; a run killed
    between the two files leaves the private key whole, and the public one is derived from it on the next run. A
    public key file that is not the private key's public half is written again from it (``say`` is told so)."""
    try:
        private = data_dir(create=True) / "lab_ed25519"
    except OSError as exc:
        raise BadInput(describe_oserror(exc, what="the lab's data directory")) from None
    public = private.with_suffix(".pub")
    created = False
    if not os.path.lexists(private):
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        try:
            created = _write_new(private, pem, 0o600)
        except OSError as exc:
            raise BadInput(describe_oserror(exc, private, "the lab SSH private key")) from None
    derived = _public_line(private)
    existed = public.exists()  # something there (not a dangling link): rewriting it is worth a line
    kept = _read_public(public)
    line = public_line_of(kept, derived)
    if line is None:
        try:
            write_bytes_atomic(public, derived, mode=0o644)
        except OSError as exc:
            raise BadInput(describe_oserror(exc, public, "the lab SSH public key")) from None
        if existed and say is not None:
            say(f"{public} was not the public half of {private}; wrote it again from the private key")
        line = derived.decode().strip()
    return private, line, created
