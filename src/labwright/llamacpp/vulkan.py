"""llama.cpp's ``llama-server`` with its Vulkan backend (``-DGGML_VULKAN=ON``): AMD and Intel GPUs through Mesa (radv,
anv), and Mesa's lavapipe (a CPU) where it is chosen on purpose.

It needs Debian 13's Vulkan headers: the llama.cpp vendored in llama-cpp-python 0.3.36 does not compile against
Debian 12's (1.3.239: ``'LayerSettingEXT' is not a member of 'vk'``) and does against Debian 13's (libvulkan-dev
1.4.309, glslc, spirv-headers, glslang-tools), as measured for issue 35. So the build runs on a Debian 13 machine:
this one when it is Debian 13, else a **build box**, a Debian 13 container of the lab (``<profile>-build-trixie``,
made from ``data/lab-image-trixie.toml`` with debootstrap and kept: labwright.llamacpp.buildbox, whose CPU build for
Debian 13 guests uses the same box). The recipe is the build boxes' ``data/llama-box-build.sh``
(with the apt packages of scripts/apt/box/llama-vulkan.list, the sdist unpacked once, CMAKE_FLAGS + VULKAN_FLAGS);
the box keeps its build directory, so a killed build resumes where ninja stopped.

The result is cached like the other builds, by source and toolchain, under
``~/.cache/labwright/llama/<version>/vulkan-trixie/``: ``bin/llama-server`` and ``manifest.json`` (its sha256, the
newest glibc symbol version it needs, the box's glibc and package versions). It links libvulkan.so.1 and a glibc
newer than Debian 12's, so a guest must be Debian 13 too (deploy_data.glibc_refusal says so in one line,
from the ELF's own version needs, as for every build it pushes).

    labwright build llamacpp --vulkan                 # on the local lab (profile labwright)
    labwright build llamacpp --vulkan --lab-profile lwtest
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from labwright.atomic import once_under_lock, write_text_atomic
from labwright.digest import sha256_file
from labwright.errors import BadInput, OperationFailed
from labwright.llamacpp import buildbox
from labwright.llamacpp.build import CMAKE_FLAGS, PINNED, LlamaSource, cache_dir, download_sdist, manifest_ok
from labwright.llamacpp.buildbox import BuildBox
from labwright.textio import ascii_digits
from labwright.ui import build_step, install_step, progress, run_with_progress

#: On top of CMAKE_FLAGS (the CPU build's): the Vulkan backend, its shaders compiled with glslc at build time.
VULKAN_FLAGS = ("-DGGML_VULKAN=ON",)
#: The Debian suite whose Vulkan headers compile this llama.cpp; part of the cache key (the toolchain).
SUITE = "trixie"
DEBIAN_MAJOR = 13
BUILD_KEY = f"vulkan-{SUITE}"
#: Debian 13 names, as scripts/apt/box/llama-vulkan.list has them (data/llama-box-build.sh installs them in the box).
BUILD_PACKAGES = ("cmake", "ninja-build", "g++", "libvulkan-dev", "glslc", "spirv-headers", "glslang-tools")
#: What the binary needs on a guest: the Vulkan loader, Mesa's drivers (radv, anv, lavapipe), OpenMP's runtime.
RUNTIME_PACKAGES = ("libgomp1", "libvulkan1", "mesa-vulkan-drivers")


def vulkan_cache_dir(version: str = PINNED.version) -> Path:
    return cache_dir(version) / BUILD_KEY


def debian_major(os_release: str) -> int | None:
    """VERSION_ID of an /etc/os-release text when it is Debian's, else None."""
    fields = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', os_release, re.M))
    if fields.get("ID") != "debian" or not ascii_digits(fields.get("VERSION_ID", "")):
        return None
    return int(fields["VERSION_ID"])


def local_debian_major() -> int | None:
    try:
        return debian_major(Path("/etc/os-release").read_text())
    except OSError:
        return None


def needed_glibc(binary: bytes) -> str:
    """The newest ``GLIBC_x.y`` symbol version a binary references (its dynamic section's version needs)."""
    versions = {(int(a), int(b)) for a, b in re.findall(rb"GLIBC_(\d+)\.(\d+)", binary)}
    if not versions:
        raise OperationFailed("the Vulkan llama-server references no GLIBC_ symbol version: not a glibc binary?")
    major, minor = max(versions)
    return f"{major}.{minor}"


def glibc_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"(?a)\d+", text)[:2])


def box_name(profile: str) -> str:
    return buildbox.box_name(profile, SUITE)


def trixie_recipe():
    """The Debian 13 lab image recipe (data/lab-image-trixie.toml)."""
    return buildbox.recipe_for(SUITE)


def ensure_trixie_image(client, log=print) -> str:
    """The Debian 13 lab image imported into the lab's daemon (built once with debootstrap, cached); its alias."""
    return buildbox.ensure_image(client, SUITE, log=log)


def ensure_box(client, profile: str, tool: str = "lxc", log=print) -> BuildBox:
    """The Debian 13 build box of the lab with ``profile`` (labwright.llamacpp.buildbox.ensure_box: the one the
    CPU build for Debian 13 guests uses too)."""
    return buildbox.ensure_box(client, profile, SUITE, tool, log=log)


def build_in_box(client, box: BuildBox, sdist: Path, source: LlamaSource, jobs: int, log: Path) -> tuple[bytes, dict]:
    """Run the box recipe (labwright.llamacpp.buildbox) with the Vulkan packages and flag; the binary's bytes and the
    box's toolchain (glibc, package versions)."""
    return buildbox.build_in_box(client, box, sdist, source, jobs, log, kind="vulkan", packages=BUILD_PACKAGES,
                                 flags=VULKAN_FLAGS)


def parse_toolchain(text: str) -> dict:
    return buildbox.parse_toolchain(text)


def build_here(sdist: Path, source: LlamaSource, jobs: int, log: Path) -> tuple[bytes, dict]:
    """The recipe on this machine (a Debian 13 controller): the same script, run as root."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="llama-vulkan-build-") as tmp:
        script = Path(tmp) / buildbox.SCRIPT
        script.write_bytes(buildbox.script_text())
        work = Path(tmp) / "work"
        run_with_progress(["sh", str(script), str(sdist), str(work), str(jobs), " ".join(BUILD_PACKAGES), *CMAKE_FLAGS,
                           *VULKAN_FLAGS],
                          f"build llama-server (Vulkan) here ({jobs} jobs)",
                          parse=lambda line: build_step(line) or install_step(line), log=log)
        binary = (work / "build" / "bin" / "llama-server").read_bytes()
    text = subprocess.run(["sh", "-c", buildbox.toolchain_query(BUILD_PACKAGES)], capture_output=True, text=True,
                          check=False).stdout
    return binary, buildbox.parse_toolchain(text)


def build_vulkan_server(source: LlamaSource = PINNED, jobs: int | None = None, *, client=None,
                        profile: str = "labwright", tool: str = "lxc") -> Path:
    """The cached Vulkan ``bin/llama-server``, building it first: here on a Debian 13 machine, else in the lab's
    Debian 13 build box (``client``: its daemon; made when missing). Locked and staged like the CUDA build."""
    cache = vulkan_cache_dir(source.version)
    binary = cache / "bin" / "llama-server"
    with once_under_lock(cache / "manifest.json", cache.parent / f".{cache.name}.lock", manifest_ok) as todo:
        if not todo:
            return binary
        here = (local_debian_major() or 0) >= DEBIAN_MAJOR
        if not here and client is None:
            raise BadInput("the Vulkan build needs Debian 13's Vulkan headers (Debian 12's 1.3.239 cannot compile "
                           "this llama.cpp): run it on a Debian 13 machine, or give it the lab's daemon for a "
                           "Debian 13 build box (labwright build llamacpp --vulkan --lab-profile PROFILE)")
        where = "here" if here else "in a Debian 13 build box"
        with progress(f"build llama-server {source.version} with Vulkan once ({where}; ~10 min on 2 idle cores; then "
                      f"cached in {cache})", heartbeat=False):
            staging = cache.with_name(cache.name + ".new")
            shutil.rmtree(staging, ignore_errors=True)
            (staging / "bin").mkdir(parents=True)
            sdist = download_sdist(cache.parent, source)
            jobs = jobs or os.cpu_count() or 2
            if here:
                data, toolchain = build_here(sdist, source, jobs, staging / "build.log")
            else:
                box = ensure_box(client, profile, tool)
                data, toolchain = build_in_box(client, box, sdist, source, jobs, staging / "build.log")
            built = staging / "bin" / "llama-server"
            built.write_bytes(data)
            built.chmod(0o755)
            manifest = {"llama_cpp": source.version, "backend": "vulkan", "suite": SUITE,
                        "glibc_needed": needed_glibc(data), "toolchain": toolchain,
                        "built_in": "here" if here else box_name(profile),
                        "files": {"bin/llama-server": sha256_file(built)}}
            write_text_atomic(staging / "manifest.json", json.dumps(manifest, indent=1) + "\n")
            shutil.rmtree(cache, ignore_errors=True)
            staging.rename(cache)
    return binary
