"""Build llama.cpp's ``llama-server`` once per machine from the source vendored in the llama-cpp-python sdist.

There is no GitHub here, but PyPI carries llama-cpp-python's sdist with llama.cpp under ``vendor/llama.cpp``. The
sdist is pinned by version and sha256 (both copied from PyPI's simple JSON API) so every machine builds the same
engine; the binary is cached under ``~/.cache/labwright/llama/<version>/`` and reused by every later test run.

    labwright build llamacpp            # prints the binary's path, builds only when missing

Measured on 2 idle cores: ~40 s download, ~5.5 min build, a 15 MB binary linked only to libgomp/libstdc++/libc.
Every phase says on stderr what it is doing and how long it took (labwright.ui.progress): the download in MB, the
configure's steps, the build's ninja step N/M; cmake's whole output is kept in ``build.log`` beside the binary.

A CUDA build (``--arch`` given: the GPUs' compute capabilities, as the NvidiaGpus fact reports them) is cached per
(llama.cpp version, CUDA version, architectures) under ``~/.cache/labwright/llama/<version>/cuda13.0-sm86/`` as
``bin/llama-server`` plus ``lib/llama-server/`` (libcudart, libcublas, libcublasLt; the binary's RUNPATH is
``$ORIGIN/../lib/llama-server``, so the same layout works on a guest: /usr/local/bin + /usr/local/lib/llama-server)
and ``manifest.json`` (each file's sha256). The toolkit is NVIDIA's pip wheels (labwright.llamacpp.cuda).

    labwright build llamacpp --arch 8.6 --arch 12.0     # CUDA 13.0, SASS for sm_86 and sm_120a

(``python -m labwright.llamacpp.build`` still works for one release, with a deprecation line.)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labwright import aptlock, paths
from labwright.atomic import once_under_lock, write_text_atomic
from labwright.digest import sha256_file
from labwright.errors import BadInput, OperationFailed
from labwright.llamacpp import cuda as cuda_toolkit
from labwright.llamacpp.cuda import CudaToolchain
from labwright.textio import ascii_digits, load_json, loads_json, read_json, read_text
from labwright.ui import build_step, copy_with_progress, install_step, progress, run_with_progress

SIMPLE_API = "https://pypi.org/simple/llama-cpp-python/"


@dataclass(frozen=True)
class LlamaSource:
    version: str
    filename: str
    sha256: str


# Pinned: changing the version means changing the sha256 too (read it from PyPI's simple API, "hashes").
PINNED = LlamaSource(
    version="0.3.36",
    filename="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
)

# The measured server-only flags: no native CPU tuning (the binary runs in containers on other CPUs), no curl/openssl
# (nothing to link in a bare container), and no web UI (LLAMA_USE_PREBUILT_UI defaults ON and downloads it).
CMAKE_FLAGS = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)

BUILD_TOOLS = {"cmake": "cmake", "ninja": "ninja-build", "g++": "g++"}

#: Where a CUDA build's libraries sit relative to its binary, on the control machine and on a guest alike.
CUDA_LIB_DIR = "../lib/llama-server"


def cuda_flags(root: Path, cmake_archs: Sequence[str]) -> tuple[str, ...]:
    """The CUDA build's flags on top of CMAKE_FLAGS: the pip toolkit's nvcc and root, the GPUs' architectures, no
    VMM (no libcuda.so link stub in the wheels; see labwright.llamacpp.cuda), and the RUNPATH
    ``$ORIGIN/../lib/llama-server`` alone (CMake writes $ORIGIN safely; no path of this machine's toolkit is kept), so
    its CUDA libraries travel beside it (tests/integration/test_llamacpp_cuda_build.py links and runs an executable
    this way)."""
    return (
        "-DGGML_CUDA=ON",
        f"-DCUDAToolkit_ROOT={root}",
        f"-DCMAKE_CUDA_COMPILER={root / 'bin' / 'nvcc'}",
        f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(cmake_archs)}",
        "-DGGML_CUDA_NO_VMM=ON",
        "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
        f"-DCMAKE_BUILD_RPATH=$ORIGIN/{CUDA_LIB_DIR}",
        "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared",
    )


def cache_dir(version: str = PINNED.version) -> Path:
    return paths.cache_path("llama", version)


def cuda_cache_dir(cuda: CudaToolchain, cmake_archs: Sequence[str], version: str = PINNED.version) -> Path:
    """One CUDA build's cache: keyed by llama.cpp version, CUDA version and architectures."""
    return cache_dir(version) / cuda_toolkit.build_key(cuda, cmake_archs)


sha256_of = sha256_file

#: What cached_build_problem says of a cache entry with nothing at the binary's path: not built yet, nothing damaged.
NOT_BUILT = "is not built yet"
#: A sidecar is one digest and a newline (what build_llama_server writes); anything much longer is not one.
SIDECAR_MAX_BYTES = 4096
_DIGEST_LINE = re.compile(r"([0-9a-f]{64})\n?")  # fullmatch: "\n" alone is no digest
# sha256sum's own line ("DIGEST  NAME", "DIGEST *NAME"): accepted beside a binary the user gives, never in the cache
_SHA256SUM_LINE = re.compile(r"([0-9a-f]{64})(?:[ \t][^\n]*)?\n?")


def sidecar_path(binary: Path) -> Path:
    """Where a binary's sha256 is kept beside it: ``NAME.sha256``."""
    return binary.with_name(binary.name + ".sha256")


def read_sidecar(sidecar: Path, *, sha256sum_line: bool = False) -> str:
    """The sha256 a sidecar holds: exactly one lowercase 64-hex digest, a newline after it or not (what
    build_llama_server writes), read through labwright.textio.read_text; ``sha256sum_line``: sha256sum's line
    ("DIGEST  NAME") too. Anything else (missing, unreadable, binary, not UTF-8, empty, uppercase, another
    length, other scripts' digits, more text) is one BadInput line naming the file."""
    what = "the sha256 of the file beside it (64 lowercase hex digits)"
    text = read_text(sidecar, what, max_bytes=SIDECAR_MAX_BYTES)
    match = (_SHA256SUM_LINE if sha256sum_line else _DIGEST_LINE).fullmatch(text)
    if match is None:
        shown = text.strip()[:80]
        raise BadInput(f"{sidecar} holds {shown!r}, not one sha256 (expected {what}); write the right digest or "
                       "remove the file")
    return match.group(1)


def cached_build_problem(binary: Path) -> str | None:
    """Whether the cached build at ``binary`` can be used: None when it is a regular file whose sha256 is the one
    its sidecar (``llama-server.sha256``, sidecar_path) holds; else what is wrong, a phrase to follow the path
    (NOT_BUILT: nothing there). The one test of the CPU build's cache: ``labwright build llamacpp`` (cached, or
    built again), build_llama_server and the deploy (labwright.llamacpp.deploy_data.local_binary) all ask it, so
    an empty, truncated or junk binary, a directory in its place, or a missing or junk sidecar is never trusted."""
    try:
        info = binary.stat()
    except FileNotFoundError:
        return NOT_BUILT
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory, not the binary"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size == 0:
        return "is empty"
    sidecar = sidecar_path(binary)
    if not os.path.lexists(sidecar):
        return f"has no {sidecar.name} beside it (its build's record of its sha256)"
    try:
        expected = read_sidecar(sidecar)
    except BadInput as exc:
        return f"has no valid sha256 beside it ({exc})"
    try:
        actual = sha256_of(binary)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if actual != expected:
        return f"has sha256 {actual}, not the {expected} its build recorded in {sidecar.name}"
    return None


_SHA256 = re.compile(r"[0-9a-f]{64}")


def manifest_files(directory: Path) -> dict[str, str]:
    """What a cached GPU or release build's ``manifest.json`` records: relative path -> sha256, ``bin/llama-server``
    among them. BadInput naming the manifest when it is missing, unreadable, not JSON or of another shape (a cache
    entry emptied, cut short or written over)."""
    path = directory / "manifest.json"
    try:
        doc = read_json(path, "a build's manifest.json")
    except BadInput as exc:  # missing, unreadable, not UTF-8, not JSON: what read_json says, with a cache's fix
        reason = str(exc).removeprefix(str(path)).strip().split(";")[0].strip(" (")
        raise BadInput(f"{path} is not a build's manifest ({reason}): remove {directory} and build it again") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if (not isinstance(files, dict) or "bin/llama-server" not in files
            or not all(isinstance(rel, str) and rel and not rel.startswith("/") and ".." not in Path(rel).parts
                       and isinstance(digest, str) and _SHA256.fullmatch(digest) for rel, digest in files.items())):
        raise BadInput(f"{path} is not a build's manifest (its files, each with its sha256, bin/llama-server among "
                       f"them): remove {directory} and build it again")
    return files


def manifest_problem(directory: Path) -> str | None:
    """None when the build cached in ``directory`` can be used: its manifest well-formed (manifest_files) and every
    file it lists a regular file there; else what is wrong, to follow the directory's name. The deploy hashes each
    file against the manifest before it pushes it; this is the cheap test every build asks before it says cached."""
    try:
        files = manifest_files(directory)
    except BadInput as exc:
        return str(exc)
    for rel in files:
        if not (directory / rel).is_file():
            return f"lacks {rel}, which its manifest lists"
    return None


def manifest_ok(done: Path) -> bool:
    """For once_under_lock: the build whose ``manifest.json`` is ``done`` is whole (manifest_problem)."""
    return manifest_problem(done.parent) is None


def remove_cache_entry(path: Path) -> None:
    """Remove whatever is at ``path`` (a file, a link, a directory tree); nothing there is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def pypi_url(project: str, filename: str, sha256: str) -> str:
    """A file's URL from PyPI's simple JSON API; its listed sha256 must match the pin, or PyPI changed under us."""
    request = urllib.request.Request(f"https://pypi.org/simple/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        index = load_json(response)
    for entry in index["files"]:
        if entry["filename"] == filename:
            listed = entry.get("hashes", {}).get("sha256")
            if listed != sha256:
                raise OperationFailed(f"PyPI lists sha256 {listed} for {filename}, pinned {sha256}")
            return str(entry["url"])
    raise OperationFailed(f"{filename} is not on PyPI's index for {project}")


def sdist_url(source: LlamaSource = PINNED) -> str:
    """The sdist's URL (pypi_url for llama-cpp-python)."""
    return pypi_url(SIMPLE_API.rstrip("/").rsplit("/", 1)[-1], source.filename, source.sha256)


def download_pinned(dest: Path, project: str, filename: str, sha256: str, url: str | None = None) -> Path:
    """A pinned PyPI file in ``dest`` (download_sdist for any project: the CUDA toolkit's wheels)."""
    return download_sdist(dest, LlamaSource(version="", filename=filename, sha256=sha256),
                          url=url or pypi_url(project, filename, sha256))


def download_sdist(dest: Path, source: LlamaSource = PINNED, url: str | None = None) -> Path:
    """The sdist in ``dest``, downloaded from ``url`` (default: where PyPI's index says) unless already there."""
    target = dest / source.filename
    if target.exists() and sha256_of(target) == source.sha256:
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")  # two downloaders never share a partial
    with progress(f"download {source.filename}") as step, \
            urllib.request.urlopen(url or sdist_url(source), timeout=300) as response, partial.open("wb") as out:
        length = response.headers.get("Content-Length")
        copy_with_progress(response, out, step, total=int(length) if length and ascii_digits(length) else None)
    actual = sha256_of(partial)
    if actual != source.sha256:
        partial.unlink()
        raise OperationFailed(f"{source.filename}: sha256 {actual}, expected {source.sha256}")
    os.replace(partial, target)
    return target


def ensure_build_tools() -> None:
    """Install cmake, ninja and g++ via apt when missing (scripts/setup should already have them)."""
    missing = [package for tool, package in BUILD_TOOLS.items() if shutil.which(tool) is None]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # labwright.aptlock: each apt-get waits for another apt (unattended-upgrades) instead of failing on its lock
    run_with_progress(aptlock.argv(["update", "-q"]), "apt-get update", parse=install_step, env=env)
    run_with_progress(aptlock.argv(["install", "-y", "-q", *missing]), f"apt-get install {' '.join(missing)}",
                      parse=install_step, env=env)


def configure(source_dir: Path, build: Path, log: Path, extra: Sequence[str] = ()) -> None:
    """cmake ``source_dir`` into ``build`` with CMAKE_FLAGS and ``extra`` (cuda_flags), its lines as progress."""
    run_with_progress(["cmake", "-S", str(source_dir), "-B", str(build), *CMAKE_FLAGS, *extra],
                      f"configure {source_dir.name} (cmake)", parse=build_step, log=log.with_suffix(".configure.log"))


def compile_target(source_dir: Path, build: Path, target: str, jobs: int, log: Path,
                   extra: Sequence[str] = ()) -> Path:
    """Configure ``source_dir`` with CMAKE_FLAGS (+ ``extra``) into ``build`` and build ``target``, each with its
    progress on stderr (cmake's lines, ninja's step N/M); cmake's whole output goes to ``log``. The binary's path."""
    configure(source_dir, build, log, extra)
    run_with_progress(["cmake", "--build", str(build), "--target", target, "-j", str(jobs)],
                      f"build {target} ({jobs} jobs)", parse=build_step, log=log)
    return build / "bin" / target


def unpack_source(sdist: Path, into: Path, source: LlamaSource = PINNED) -> Path:
    """The sdist unpacked into ``into``; the vendored llama.cpp tree's path."""
    with progress(f"unpack {source.filename}", heartbeat=False), tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(into, filter="data")
        else:  # Python < 3.11.4 (Debian 12's 3.11.2) has no extraction filters; the sdist's sha256 is pinned
            archive.extractall(into)
    vendor = into / source.filename.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if not (vendor / "CMakeLists.txt").exists():
        raise OperationFailed(f"{source.filename} has no vendor/llama.cpp/CMakeLists.txt")
    return vendor


def build_llama_server(source: LlamaSource = PINNED, jobs: int | None = None, *,
                       cuda: CudaToolchain | None = None, archs: Sequence[str] = ()) -> Path:
    """Path of a cached ``llama-server`` for the pinned version, building it first when the cache lacks it.

    ``cuda`` and ``archs`` (compute capabilities, "8.6", "12.0") make it the CUDA build for those GPUs
    (build_cuda_server); a GPU the toolkit cannot compile for is refused (BadInput) before anything is downloaded.

    A file lock keeps parallel test runs from building twice; the binary is moved in place only when complete, so a
    killed build never leaves a half-written binary that later runs would trust. The cache counts only as
    cached_build_problem says (the binary's sha256 is its sidecar's): a damaged entry (emptied, truncated, junk, a
    directory, no or a junk sidecar) is said on stderr, removed under the lock and built again.
    """
    if cuda is not None or archs:
        return build_cuda_server(cuda or cuda_toolkit.DEFAULT, archs, source, jobs)
    cache = cache_dir(source.version)
    binary = cache / "llama-server"
    with once_under_lock(binary, cache / ".lock", lambda built: cached_build_problem(built) is None) as todo:
        if not todo:  # whole, already or built by another run while this one waited for the lock
            return binary
        problem = cached_build_problem(binary)
        if problem != NOT_BUILT:
            # a damaged entry goes first: a build that fails or is killed leaves nothing a later run could trust
            print(f"labwright: the cached build {binary} {problem}: building it again", file=sys.stderr, flush=True)
            remove_cache_entry(binary)
            remove_cache_entry(sidecar_path(binary))
        with progress(f"build llama-server {source.version} once (download + compile, ~6 min on 2 cores; then "
                      f"cached in {cache})", heartbeat=False):
            ensure_build_tools()
            sdist = download_sdist(cache, source)
            with tempfile.TemporaryDirectory(prefix="llama-build-") as tmp:
                vendor = unpack_source(sdist, Path(tmp), source)
                built = compile_target(vendor, Path(tmp) / "build", "llama-server", jobs or os.cpu_count() or 2,
                                       cache / "build.log")
                staged = cache / "llama-server.new"
                remove_cache_entry(staged)  # a killed build's leftover (a directory would swallow the copy)
                shutil.copy2(built, staged)
                # the sidecar first: a binary in place always has its sha256 beside it (cached_build_problem)
                write_text_atomic(sidecar_path(binary), sha256_of(staged) + "\n")
                os.replace(staged, binary)
            sdist.unlink()  # 76 MB of source is not worth keeping once the binary exists
    return binary


def manifest_of(build_dir: Path) -> dict:
    """A CUDA build's ``manifest.json``: the binary and each library, relative path and sha256."""
    return loads_json((build_dir / "manifest.json").read_text())


def build_cuda_server(cuda: CudaToolchain, archs: Sequence[str], source: LlamaSource = PINNED,
                      jobs: int | None = None) -> Path:
    """The cached CUDA ``bin/llama-server`` for these compute capabilities (see the module docstring's layout),
    building it first: toolkit (pip wheels, cached), sdist, configure with cuda_flags, build, then a check that the
    binary carries SASS for every requested architecture (cuobjdump), the libraries copied beside it."""
    cmake_archs = cuda_toolkit.architectures(archs, cuda)
    cache = cuda_cache_dir(cuda, cmake_archs, source.version)
    binary = cache / "bin" / "llama-server"
    with once_under_lock(cache / "manifest.json", cache.parent / f".{cache.name}.lock", manifest_ok) as todo:
        if not todo:
            return binary
        with progress(f"build llama-server {source.version} for CUDA {cuda.version} {' '.join(cmake_archs)} once "
                      f"(toolkit + download + compile: long on few cores; then cached in {cache})", heartbeat=False):
            ensure_build_tools()
            root = cuda_toolkit.ensure_toolkit(cuda)
            staging = cache.with_name(cache.name + ".new")
            shutil.rmtree(staging, ignore_errors=True)
            (staging / "bin").mkdir(parents=True)
            libs = staging / "lib" / "llama-server"
            libs.mkdir(parents=True)
            sdist = download_sdist(cache.parent, source)
            with tempfile.TemporaryDirectory(prefix="llama-cuda-build-") as tmp:
                vendor = unpack_source(sdist, Path(tmp), source)
                built = compile_target(vendor, Path(tmp) / "build", "llama-server", jobs or os.cpu_count() or 2,
                                       staging / "build.log", extra=cuda_flags(root, cmake_archs))
                shutil.copy2(built, staging / "bin" / "llama-server")
            have = cuda_toolkit.sass_architectures(staging / "bin" / "llama-server", root)
            missing = [cuda_toolkit.sm_name(a) for a in cmake_archs if cuda_toolkit.sm_name(a) not in have]
            if missing:
                raise OperationFailed(f"the CUDA llama-server carries SASS for {', '.join(have) or 'nothing'}, "
                                      f"not {', '.join(missing)} (build log: {staging / 'build.log'})")
            names = cuda_toolkit.runtime_libraries(cuda)
            for name in names:
                shutil.copy2(cuda_toolkit.library_path(root, name), libs / name)  # follows an installer's symlinks
            files = [Path("bin/llama-server"), *(Path("lib/llama-server") / n for n in names)]
            manifest = {"llama_cpp": source.version, "cuda": cuda.version, "architectures": list(cmake_archs),
                        "sass": have, "files": {str(f): sha256_of(staging / f) for f in files}}
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
            shutil.rmtree(cache, ignore_errors=True)
            staging.rename(cache)
    return binary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m labwright.llamacpp.build``: ``labwright build llamacpp`` under its old name, with one deprecation
    line on stderr (kept for one release)."""
    from labwright.cli import main as cli_main
    from labwright.cli.vocab import deprecated

    deprecated("python -m labwright.llamacpp.build", "labwright build llamacpp")
    return cli_main(["build", "llamacpp", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
