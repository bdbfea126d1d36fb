"""Pack the target side of the stack switch into one zipapp: ``python3 labwright-stack.pyz switch --plan ...``.

Why a zipapp and not ``pip install labwright`` on the target or a stdlib-only script: the target must run the
ABI verifier before the swap, and the verifier needs pyelftools and packaging; a guest (a minimal Debian
container, a Proxmox CT) usually has python3 but neither pip nor python3-venv, and must not get labwright's
whole dependency tree (typer, pyinfra, gevent) just to swap a venv. The bundle holds exactly the modules that
run there (the stacks package minus the controller-only parts, the verifier, labwright.errors), pyelftools,
packaging and pip (the fallback installer) as pure Python, so one ``files.put`` + one command work the same
over ``@lxd``, ``@pct``, ``@ssh`` or locally. It is built deterministically (sorted entries, fixed times), so
pushing it again is a no-op for pyinfra's checksum comparison, and cached by the digest of its inputs.

The cached file is never trusted for being there: beside it ``NAME.sha256`` records the sha256 of the bytes built,
and the bundle is used only when it is a regular file whose bytes have that sha256; anything else there (empty,
truncated, junk, a missing or junk record) is built again (~3 s, the bytecode; in memory, then written atomically
with its record). Something in its place that is no file (a directory, a link loop) is one BadInput line naming it.

Each module is carried twice: its source and its bytecode for this interpreter (``.pyc`` beside the ``.py``, an
unchecked hash-based pyc, PEP 552). zipimport cannot write bytecode, so without it every run on the target compiles
pip and the rest from source again (~3 s of CPU a pip run on a lab container); with it a target of the same Python
minor version (Debian 12's 3.11 for a 3.11 controller) loads the bytecode, and any other version finds a magic number
that is not its own and compiles the source as before (zipimport tries the ``.pyc`` first and falls back).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import marshal
import os
import warnings
import zipfile
from pathlib import Path

import labwright
from labwright import paths
from labwright.agent.zipapp import describe_cache_error, read_cached
from labwright.atomic import pid_alive, write_files_atomic
from labwright.errors import BadInput
from labwright.textio import ascii_digits

REMOTE_PATH = "/opt/labwright/lib/labwright-stack.pyz"
# labwright modules the target runs (relative to the labwright package); the controller-only ones
# (from_matrix, bundle itself) import the matrix loader, typer or pyinfra and stay out.
MODULES = (
    "__init__.py", "atomic.py", "errors.py", "paths.py", "guestlock.py", "ui.py", "shell.py",
    "textio.py",  # every JSON the target reads back (state, manifests, tool answers) parses through it
    "schema/__init__.py", "schema/env.py",  # ui reads its progress variables through schema.env
    "schema/checks.py",  # paths checks the cache root's value with checks.control_character
    "agent/__init__.py", "agent/service.py",
    "matrix/__init__.py", "matrix/abi.py", "matrix/abi_cache.py", "matrix/abi_env.py", "matrix/abi_import.py",
    "matrix/demangle.py", "matrix/elfsyms.py",
    "stacks/__init__.py", "stacks/plan.py", "stacks/layout.py", "stacks/fetch.py", "stacks/build.py",
    "stacks/service.py", "stacks/switch.py", "stacks/show.py", "stacks/remote.py",
)
# labwright imports inside bundled modules that only the controller's side of them reaches (a function the target
# never calls); every other labwright import a bundled module makes, at any depth, must be bundled: the unit test
# walks their imports (CI at 6d041d3: paths started importing schema.checks, and every stack switch in a guest died
# with ModuleNotFoundError).
CONTROLLER_ONLY = {
    "labwright.hosts": "guestlock's annotations (TYPE_CHECKING)",
    "labwright.hosts.agent": "guestlock's controller side (guest_command, _call)",
    "labwright.hosts.connector": "guestlock's controller side (_pyinfra_host)",
    "labwright.schema.fields": "schema.env's url kind: the progress variables the target reads are no URLs",
    "labwright.tuning.units": "schema.checks' size check: deploy data, read on the controller",
    "pyinfra": "guestlock's controller side (the current host's name)",
    "rich": "ui's tables and consoles: the target's ui writes plain lines",
    "yaml": "textio's YAML readers: the target reads JSON only",
}
THIRD_PARTY = ("elftools", "packaging")
OPTIONAL = ("pip",)  # without pip on the controller the target needs uv (or pip) of its own
MAIN = "import sys\n\nfrom labwright.stacks.remote import main\n\nsys.exit(main())\n"
FIXED_TIME = (2026, 1, 1, 0, 0, 0)


def _package_files(name: str) -> list[tuple[str, Path]]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            if filename.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath) / filename
            files.append((f"{name}/{path.relative_to(root).as_posix()}", path))
    return files


def inputs() -> list[tuple[str, Path]]:
    """(archive name, source file) for everything the bundle holds, sorted."""
    package = Path(labwright.__file__).parent
    files = [(f"labwright/{module}", package / module) for module in MODULES]
    for name in (*THIRD_PARTY, *OPTIONAL):
        found = _package_files(name)
        if not found and name in THIRD_PARTY:
            raise RuntimeError(f"{name} is not importable here; reinstall labwright's dependencies")
        files.extend(found)
    return sorted(files)


#: What the bundle is called in messages; the largest file that can be it (it is ~6 MB with pip).
WHAT = "the stack bundle"
MAX_BYTES = 256 * 1024 * 1024


def build_bundle(cache_dir: Path | None = None) -> Path:
    """The zipapp for the current sources, built once per content digest and used again only while its bytes are
    the ones built (its ``.sha256`` record)."""
    files = inputs()
    digest = hashlib.sha256(MAIN.encode() + importlib.util.MAGIC_NUMBER)  # the bytecode is this interpreter's
    contents = []
    for arcname, path in files:
        data = path.read_bytes()
        digest.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
        contents.append((arcname, data))
    cache = cache_dir or _cache_root()
    target = cache / f"labwright-stack-{digest.hexdigest()[:16]}.pyz"
    record = record_path(target)
    kept = read_cached(target, WHAT, max_bytes=MAX_BYTES)
    recorded = read_cached(record, f"the sha256 record of {WHAT}", max_bytes=1024)
    if kept is not None and recorded is not None and recorded.strip() == hashlib.sha256(kept).hexdigest().encode():
        return target
    contents = sorted(contents + [(arcname + "c", bytecode(arcname, data)) for arcname, data in contents
                                  if arcname.endswith(".py")])
    built = archive(contents)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        # the bundle before its record: a run killed between the two finds the old record (or none) and builds again
        write_files_atomic({target: built, record: hashlib.sha256(built).hexdigest().encode() + b"\n"}, mode=0o644)
    except OSError as exc:
        where = Path(exc.filename) if isinstance(exc.filename, str) else target
        if where.name.startswith("."):  # a temporary file beside the target: say the target
            where = target
        raise BadInput(describe_cache_error(where, exc, f"{WHAT}, a cache file")) from None
    _remove_others(cache, target)
    return target


def record_path(bundle: Path) -> Path:
    """Where the sha256 of the bytes built for ``bundle`` is kept."""
    return bundle.with_name(bundle.name + ".sha256")


def archive(contents: list[tuple[str, bytes]]) -> bytes:
    """The zipapp's bytes: ``__main__.py`` then ``contents`` in their order, fixed times and modes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as built:
        for arcname, data in [("__main__.py", MAIN.encode()), *contents]:
            info = zipfile.ZipInfo(arcname, date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            built.writestr(info, data)
    return buffer.getvalue()


def _remove_others(cache: Path, target: Path) -> None:
    """Bundles of older sources and their records (nothing refers to them by name), and the temporary files of
    builds whose process is gone (``.NAME.PID.tmp`` of earlier labwrights); whatever cannot be removed stays."""
    keep = {target.name, record_path(target).name}
    for old in [*cache.glob("labwright-stack-*.pyz"), *cache.glob("labwright-stack-*.pyz.sha256")]:
        if old.name not in keep:
            with contextlib.suppress(OSError):
                old.unlink()
    for tmp in cache.glob(".labwright-stack-*.pyz.*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if ascii_digits(pid) and int(pid) != os.getpid() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


def bytecode(arcname: str, source: bytes) -> bytes:
    """``source`` compiled as an unchecked hash-based pyc (PEP 552: magic, flags 0b01, the source's hash, the code):
    deterministic (no timestamp) and loaded by zipimport without comparing it to anything. Its file name is where
    the bundle lies on a target (REMOTE_PATH), so a traceback there names the real place."""
    with warnings.catch_warnings():  # a vendored module's invalid escape: the target's own compile says it, if at all
        warnings.simplefilter("ignore")
        code = compile(source, f"{REMOTE_PATH}/{arcname}", "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(source)
            + marshal.dumps(code))


def _cache_root() -> Path:
    return paths.cache_path("bundles")
