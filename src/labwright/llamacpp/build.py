"""Build llama.cpp's ``llama-server`` once per machine from the source vendored in the llama-cpp-python sdist.

There is no GitHub here, but PyPI carries llama-cpp-python's sdist with llama.cpp under ``vendor/llama.cpp``. The
sdist is pinned by version and sha256 (both copied from PyPI's simple JSON API) so every machine builds the same
engine; the binary is cached under ``~/.cache/labwright/llama/<version>/`` and reused by every later test run.

    python -m labwright.llamacpp.build            # prints the binary's path, builds only when missing

Measured on 2 idle cores: ~40 s download, ~5.5 min build, a 15 MB binary linked only to libgomp/libstdc++/libc.
Every phase says on stderr what it is doing and how long it took (labwright.ui.progress): the download in MB, the
configure's steps, the build's ninja step N/M; cmake's whole output is kept in ``build.log`` beside the binary.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from labwright import paths
from labwright.errors import OperationFailed
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


def cache_dir(version: str = PINNED.version) -> Path:
    return paths.cache_path("llama", version)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sdist_url(source: LlamaSource = PINNED) -> str:
    """The file's URL from PyPI's simple JSON API; its listed sha256 must match the pin, or PyPI changed under us."""
    request = urllib.request.Request(SIMPLE_API, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    for entry in index["files"]:
        if entry["filename"] == source.filename:
            listed = entry.get("hashes", {}).get("sha256")
            if listed != source.sha256:
                raise OperationFailed(f"PyPI lists sha256 {listed} for {source.filename}, pinned {source.sha256}")
            return str(entry["url"])
    raise OperationFailed(f"{source.filename} is not on PyPI's index for llama-cpp-python")


def download_sdist(dest: Path, source: LlamaSource = PINNED, url: str | None = None) -> Path:
    """The sdist in ``dest``, downloaded from ``url`` (default: where PyPI's index says) unless already there."""
    target = dest / source.filename
    if target.exists() and sha256_of(target) == source.sha256:
        return target
    partial = target.with_suffix(".part")
    with progress(f"download {source.filename}") as step, \
            urllib.request.urlopen(url or sdist_url(source), timeout=300) as response, partial.open("wb") as out:
        length = response.headers.get("Content-Length")
        copy_with_progress(response, out, step, total=int(length) if length and length.isdigit() else None)
    actual = sha256_of(partial)
    if actual != source.sha256:
        partial.unlink()
        raise OperationFailed(f"{source.filename}: sha256 {actual}, expected {source.sha256}")
    partial.rename(target)
    return target


def ensure_build_tools() -> None:
    """Install cmake, ninja and g++ via apt when missing (scripts/setup should already have them)."""
    missing = [package for tool, package in BUILD_TOOLS.items() if shutil.which(tool) is None]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_with_progress(["apt-get", "update", "-q"], "apt-get update", parse=install_step, env=env)
    run_with_progress(["apt-get", "install", "-y", "-q", *missing], f"apt-get install {' '.join(missing)}",
                      parse=install_step, env=env)


def compile_target(source_dir: Path, build: Path, target: str, jobs: int, log: Path) -> Path:
    """Configure ``source_dir`` with CMAKE_FLAGS into ``build`` and build ``target``, each with its progress on
    stderr (cmake's lines, ninja's step N/M); cmake's whole output goes to ``log``. The binary's path."""
    configure_log, build_log = log.with_suffix(".configure.log"), log
    run_with_progress(["cmake", "-S", str(source_dir), "-B", str(build), *CMAKE_FLAGS],
                      f"configure {source_dir.name} (cmake)", parse=build_step, log=configure_log)
    run_with_progress(["cmake", "--build", str(build), "--target", target, "-j", str(jobs)],
                      f"build {target} ({jobs} jobs)", parse=build_step, log=build_log)
    return build / "bin" / target


def build_llama_server(source: LlamaSource = PINNED, jobs: int | None = None) -> Path:
    """Path of a cached ``llama-server`` for the pinned version, building it first when the cache lacks it.

    A file lock keeps parallel test runs from building twice; the binary is moved in place only when complete, so a
    killed build never leaves a half-written binary that later runs would trust.
    """
    cache = cache_dir(source.version)
    binary = cache / "llama-server"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        with progress(f"build llama-server {source.version} once (download + compile, ~6 min on 2 cores; then "
                      f"cached in {cache})", heartbeat=False):
            ensure_build_tools()
            sdist = download_sdist(cache, source)
            with tempfile.TemporaryDirectory(prefix="llama-build-") as tmp:
                with progress(f"unpack {source.filename}", heartbeat=False), tarfile.open(sdist) as archive:
                    if hasattr(tarfile, "data_filter"):
                        archive.extractall(tmp, filter="data")
                    else:  # Python < 3.11.4 (Debian 12's 3.11.2) has no extraction filters; the sdist's sha256 is
                        archive.extractall(tmp)  # pinned
                vendor = Path(tmp) / source.filename.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
                if not (vendor / "CMakeLists.txt").exists():
                    raise OperationFailed(f"{source.filename} has no vendor/llama.cpp/CMakeLists.txt")
                built = compile_target(vendor, Path(tmp) / "build", "llama-server", jobs or os.cpu_count() or 2,
                                       cache / "build.log")
                staged = cache / "llama-server.new"
                shutil.copy2(built, staged)
                staged.rename(binary)
            (cache / "llama-server.sha256").write_text(sha256_of(binary) + "\n")
            sdist.unlink()  # 76 MB of source is not worth keeping once the binary exists
    return binary


def main() -> int:
    print(build_llama_server())
    return 0


if __name__ == "__main__":
    sys.exit(main())
