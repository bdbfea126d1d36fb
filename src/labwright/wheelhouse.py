"""Wheelhouses for guests, built with this machine's pip for the guest's Python and cached.

Guests that cannot reach PyPI (or should not, on every deploy) install with ``pip install --no-index --find-links
DIR --require-hashes -r DIR/requirements.lock``: the lock (labwright.locks) pins every file by the sha256 its index
publishes, and the download itself is checked against it. pip does not evaluate ``python_full_version`` markers for
a target Python, so callers add requirements that only apply below a patch release themselves (see
labwright.litellm.wheelhouse).

The download is a progress step on stderr (labwright.ui): which package it is at, the file downloading (megabytes of
its size and the rate, from pip's ``--progress-bar raw``), and at the end the packages, megabytes and time.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import zipfile
from pathlib import Path

from labwright import paths, ui
from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.locks import LOCK_NAME, PYPI_SIMPLE, check_index, hash_mismatch, make_lock

PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]


def cache_root() -> Path:
    return paths.cache_root()


def check_versions(package: str, version: str, example: str, python: str) -> None:
    """``version`` is a release of ``package`` (such as ``example``) and ``python`` a CPython 3 version, or BadInput
    naming the option."""
    if not re.fullmatch(r"(?a)\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?", version):
        article = "an" if package[:1] in "aeiou" else "a"
        raise BadInput(f"--version {version!r}: not {article} {package} release, e.g. {example}")
    if not re.fullmatch(r"(?a)3\.\d{1,2}(\.\d{1,3})?", python):
        raise BadInput(f"--python {python!r}: not a CPython 3 version; give the guest's, e.g. 3.11.2")


def check_python(python: str) -> None:
    """``python`` is a guest's Python version (3.11.2), or BadInput naming --python."""
    if not re.fullmatch(r"(?a)\d+\.\d+(\.\d+)?", python):
        raise BadInput(f"--python {python!r}: give the guest's Python version, e.g. 3.11.2 (python3 --version)")


def checked_requirements(requirements: list[str]) -> list[str]:
    """Each requirement parsed as pip would (PEP 508), or BadInput naming the first that is not one."""
    from packaging.requirements import InvalidRequirement, Requirement

    for text in requirements:
        try:
            Requirement(text)
        except InvalidRequirement:
            raise BadInput(f"requirement {text[:80]!r}: not a requirement (PEP 508), e.g. kokoro==0.9.4") from None
    return requirements


def _stamp(requirements: list[str], python: str) -> str:
    return f"{' '.join(requirements)} for CPython {python}\n"


def is_complete(requirements: list[str], python: str, target: Path) -> bool:
    """Whether ``target`` holds the complete wheelhouse of these requirements (its ``.complete`` marker names them
    and its lock is there): what download_wheelhouse reuses. Reads only."""
    marker = _read_marker(target / ".complete")
    return marker == _stamp(requirements, python).encode() and (target / LOCK_NAME).is_file()


def download_wheelhouse(requirements: list[str], python: str, target: Path, index_url: str = PYPI_SIMPLE) -> Path:
    """Wheels for ``requirements`` on CPython ``python`` (e.g. 3.11.2, x86_64) in ``target``, with their hashed lock
    ``requirements.lock`` (labwright.locks: the sha256 ``index_url`` publishes for each file) that pip downloaded them
    against and that the deploys install from; reused while its ``.complete`` marker names the same requirements and
    the lock is there."""
    check_python(python)
    marker = target / ".complete"
    stamp = _stamp(requirements, python)
    if is_complete(requirements, python, target):
        return target
    target.mkdir(parents=True, exist_ok=True)
    # One download per wheelhouse at a time (two deploys, or two test workers, wanting the same one): the second
    # waits, then finds it complete. Without it, the second's clean-up below deletes the first's half-copied wheels.
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(requirements, python, target):
            return target
        return _download(requirements, python, target, marker, stamp, check_index(index_url))


def _download(requirements: list[str], python: str, target: Path, marker: Path, stamp: str, index_url: str) -> Path:
    remove_truncated_wheels(target)
    marker.unlink(missing_ok=True)
    lock = target / LOCK_NAME
    write_text_atomic(lock, make_lock(expand_files(requirements), python, PLATFORMS, index_url))
    # --require-hashes: pip checks every file against the sha256 the index published (the lock), so a file that
    # changed on the way or on the index is refused, not hashed on arrival.
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
               "--require-hashes", "--no-deps", "--index-url", index_url, "--python-version", python,
               "--implementation", "cp", "-d", str(target), *ui.pip_progress_args()]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    # No machine pip.conf (extra indexes, constraints): the wheelhouse holds what the index serves.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}

    def failed(code: int, tail: list[str]) -> None:
        lines = [line.strip() for line in tail if line.strip()]
        mismatch = hash_mismatch(lines, index_url, lock)
        if mismatch:
            raise SafetyCheckFailed(mismatch)
        errors = [line for line in lines if line.startswith("ERROR:")]
        last = (errors or lines or ["no output"])[-1]
        raise OperationFailed(f"pip download {' '.join(requirements)} failed: {last}")

    ui.run_with_progress([*command, "-r", str(lock)],
                         f"download wheels for {' '.join(requirements)} (CPython {python})",
                         parse=ui.InstallProgress(), keep=400, env=env, failed=failed)
    write_text_atomic(marker, stamp)  # the marker says "complete": never half written
    return target


def _read_marker(marker: Path) -> bytes | None:
    try:
        return marker.read_bytes()
    except OSError:
        return None


def remove_truncated_wheels(target: Path) -> list[Path]:
    """Delete wheels that are not whole zip files (a pip download killed while copying one into ``target``):
    pip trusts a file already in its download directory ("File was already downloaded") and would keep it."""
    removed = []
    for wheel in sorted(target.glob("*.whl")):
        if not zipfile.is_zipfile(wheel):
            wheel.unlink(missing_ok=True)
            removed.append(wheel)
    return removed


def expand_files(requirements: list[str]) -> list[str]:
    """``["-r", FILE, "x==1"]`` (or ``-rFILE``) with each file's requirements in its place (requirements_of)."""
    out: list[str] = []
    words = iter(requirements)
    for word in words:
        if word == "-r":
            out += requirements_of([next(words, "")], [])
        elif word.startswith("-r"):
            out += requirements_of([word[2:].strip()], [])
        else:
            out.append(word)
    return out


def requirements_in(name: str) -> list[str]:
    """The requirements in one requirements file (comments and blank lines dropped; an option line such as
    ``--extra-index-url`` refused: the lock is made from one index); BadInput naming ``-r FILE``."""
    try:
        lines = Path(name).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BadInput(f"-r {name}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise BadInput(f"-r {name}: not UTF-8 text; give a requirements file") from None
    out = []
    for number, raw in enumerate(lines, 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise BadInput(f"-r {name}: line {number} ({line.split()[0]}) is a pip option: give requirements only "
                           "(pass --index-url here for another index)")
        out.append(line)
    return out


def requirements_of(files: list[str], words: list[str]) -> list[str]:
    """The requirements named on the command line and in requirements files (comments and blank lines dropped; an
    option line such as ``--extra-index-url`` refused: the lock is made from one index)."""
    out = list(words)
    for name in files:
        out += requirements_in(name)
    if not out:
        raise BadInput("no requirements: name them, or pass -r FILE")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m labwright.wheelhouse``: ``labwright wheelhouse requirements`` under its old name, with one
    deprecation line on stderr (kept for one release)."""
    from labwright.cli import main as cli_main
    from labwright.cli.vocab import deprecated

    deprecated("python -m labwright.wheelhouse", "labwright wheelhouse requirements")
    return cli_main(["wheelhouse", "requirements", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
