"""Build boxes: a container of the lab, of one Debian release, that builds llama-server for that release.

A binary links the glibc of the machine it was built on (symbol versions such as ``GLIBC_2.38``), and glibc runs
binaries built against an older glibc, never a newer one. So a llama-server built on a Debian 13 controller (glibc
2.41) does not start on a Debian 12 guest (2.36). The build for such a guest runs in a **build box** of the guest's
release: ``<lab profile>-build-<codename>`` (``labwright-build-bookworm``), made once from the lab image of that
release (``data/lab-image.toml`` for bookworm, ``data/lab-image-trixie.toml`` for trixie: each recipe's ``suite``)
on the guest's own LXD/Incus daemon, with the guest's profile, and kept; its build directory is kept too, so a killed
build resumes where ninja stopped. The Vulkan build (labwright.llamacpp.vulkan) uses the trixie box the same way.

The CPU build made there is cached by (llama.cpp version, build kind, release) under
``~/.cache/labwright/llama/<version>/cpu-<codename>/``: ``bin/llama-server`` and ``manifest.json`` (its sha256, the
newest glibc it needs read from its ELF, the box's glibc and package versions), locked like the other builds.

    labwright build llamacpp --release bookworm                      # the local lab's bookworm box
    labwright build llamacpp --release bookworm --lab-profile lwtest

The deploy (labwright.deploys.llamacpp) builds here on its own when this machine's build needs a newer glibc than
the guest has (deploy_data.release_build_for).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import shutil
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from labwright import aptlock, paths
from labwright.atomic import once_under_lock, write_text_atomic
from labwright.digest import sha256_file
from labwright.errors import BadInput, OperationFailed
from labwright.llamacpp.build import CMAKE_FLAGS, PINNED, LlamaSource, cache_dir, download_sdist, manifest_ok
from labwright.matrix import elfsyms
from labwright.ui import build_step, install_step, progress, run_with_progress

BOX_ROOT = "/var/cache/labwright-build"
#: The box compiles llama.cpp's largest files (ggml-vulkan.cpp for the Vulkan build): more memory than a lab guest.
BOX_MEMORY = "6GiB"
#: What a CPU build needs in the box (Debian names; scripts/apt/lab.list has them for this machine's own build).
CPU_PACKAGES = ("cmake", "ninja-build", "g++")
SCRIPT = "llama-box-build.sh"
#: The build kinds a box makes for a guest's release (the Vulkan build has its own, Debian 13 only).
BOX_KINDS = ("cpu",)


@cache
def release_recipes() -> dict[str, str]:
    """The releases the lab has an image for: Debian codename (the recipe's ``suite``) -> its file in
    labwright/data (``lab-image*.toml``)."""
    found: dict[str, str] = {}
    for entry in sorted(resources.files("labwright.data").iterdir(), key=lambda e: e.name):
        if re.fullmatch(r"lab-image(-[a-z0-9]+)?\.toml", entry.name):
            suite = tomllib.loads(entry.read_text())["image"]["suite"]
            found.setdefault(suite, entry.name)
    return found


def recipe_for(codename: str):
    """The lab image recipe of a Debian release (labwright.lab.image.ImageRecipe); BadInput when the lab has none."""
    from labwright.lab import image as lab_image

    name = release_recipes().get(codename)
    if name is None:
        known = ", ".join(sorted(release_recipes()))
        raise BadInput(f"{codename}: the lab has no image of that release (it has {known}); build llama-server on a "
                       "machine of that release instead")
    with resources.as_file(resources.files("labwright.data").joinpath(name)) as path:
        return lab_image.load_recipe(path)


def os_release_fields(text: str) -> dict[str, str]:
    """An /etc/os-release text as its fields (quotes stripped)."""
    return dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', text, re.M))


def codename_of(meta: dict[str, Any] | None) -> str | None:
    """A Debian guest's release codename from its os-release fields (pyinfra's LinuxDistribution ``release_meta``,
    or os_release_fields): ``VERSION_CODENAME`` where ``ID`` is debian; None for anything else."""
    meta = meta or {}
    if str(meta.get("ID", "")).strip().lower() != "debian":
        return None
    codename = str(meta.get("VERSION_CODENAME", "")).strip().lower()
    return codename if re.fullmatch(r"[a-z]+", codename) else None


def local_codename() -> str | None:
    """This machine's Debian codename, None when it is not Debian."""
    try:
        return codename_of(os_release_fields(Path("/etc/os-release").read_text()))
    except OSError:
        return None


def ensure_image(client, codename: str, log=print) -> str:
    """The lab image of ``codename`` imported into ``client``'s daemon (built once with debootstrap, cached); its
    alias (the lab's own image when `lab up` imported it already)."""
    from labwright.lab import image as lab_image

    recipe = recipe_for(codename)
    if client.image_alias(recipe.alias) is None:
        tarball = lab_image.cached_image(recipe) or lab_image.build_image(recipe, log=log)
        client.import_image(str(tarball), recipe.alias, {"labwright.recipe": recipe.digest})
    return str(recipe.alias)


@dataclass(frozen=True)
class BuildBox:
    """A build box: ``tool`` (lxc or incus) runs commands there, as ``target`` (``remote:name`` on a remote)."""

    name: str
    profile: str
    codename: str = "trixie"
    tool: str = "lxc"
    remote: str | None = None

    @property
    def target(self) -> str:
        return f"{self.remote}:{self.name}" if self.remote else self.name


def box_name(profile: str, codename: str) -> str:
    return f"{profile}-build-{codename}"


def lab_profile(client, profile: str, tool: str = "lxc") -> dict[str, Any]:
    """The daemon's profile the box is made with; BadInput naming it when the daemon has none of that name."""
    found = client.get_or_none(f"/1.0/profiles/{profile}")
    if found is None:
        raise BadInput(f"--lab-profile {profile}: the {tool} daemon has no such profile; bring the lab up first "
                       "(labwright lab up INVENTORY) or name its profile (lab_profile)")
    return dict(found)


def ensure_box(client, profile: str, codename: str, tool: str = "lxc", log=print,
               remote: str | None = None) -> BuildBox:
    """The ``codename`` build box of the lab with ``profile`` on ``client``'s daemon: made from that release's lab
    image when missing, started when stopped. A profile the daemon does not have is refused (BadInput) before
    anything is made."""
    from labwright.lab import lab as lab_ops

    found = lab_profile(client, profile, tool)
    box = BuildBox(box_name(profile, codename), profile, codename, tool, remote)
    # the lab's profile says "labwright lab NAME" (LabSpec.marker): the box is that lab's, so `lab down` removes it
    lab = str(found.get("description") or "").removeprefix("labwright lab ").strip()
    if client.instance_or_none(box.name) is None:
        alias = ensure_image(client, codename, log=log)
        with progress(f"make the {codename} build box {box.name}", heartbeat=False):
            client.create_instance({"name": box.name, "type": "container", "profiles": [profile],
                                    "source": {"type": "image", "alias": alias},
                                    "config": {"limits.memory": BOX_MEMORY, lab_ops.LAB_KEY: lab,
                                               "user.labwright.role": f"llama.cpp build box ({codename})"}})
    if client.instance_state(box.name).get("status") != "Running":
        client.set_state(box.name, "start")
    lab_ops.wait_ready(client, box.name, timeout=180)
    return box


@contextlib.contextmanager
def box_lock(box: BuildBox) -> Iterator[None]:
    """One build at a time in a box, from every process of this machine: the Vulkan and the CPU build share the
    trixie box, and two apt-get runs there would fight over dpkg's lock."""
    lock = paths.cache_path("llama", f".box-{box.target.replace(':', '_')}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def script_text(script: str = SCRIPT) -> bytes:
    """The build script as pushed: with labwright.aptlock's ``lw_apt`` (apt-get waiting for another apt's lock)."""
    return aptlock.in_script(resources.files("labwright.data").joinpath(script).read_bytes())


def push_sdist(client, box: BuildBox, sdist: Path, source: LlamaSource) -> str:
    """The sdist in the box (pushed unless its sha256 is there already); its path there."""
    client.exec(box.name, ["mkdir", "-p", BOX_ROOT])
    remote_sdist = f"{BOX_ROOT}/{source.filename}"
    have = client.exec(box.name, ["sha256sum", remote_sdist]).stdout.decode().split()
    if not have or have[0] != source.sha256:
        with progress(f"push {source.filename} into {box.name}", heartbeat=False), sdist.open("rb") as handle:
            client.push_file(box.name, remote_sdist, handle)
    return remote_sdist


def pull(client, name: str, path: str) -> bytes:
    out = io.BytesIO()
    client.pull_file(name, path, out)
    return out.getvalue()


def toolchain_query(packages: tuple[str, ...]) -> str:
    return "getconf GNU_LIBC_VERSION; dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(packages)


def parse_toolchain(text: str) -> dict:
    """``getconf GNU_LIBC_VERSION`` then ``dpkg-query -W`` lines: {"glibc": "2.41", "packages": {name: version}}."""
    lines = text.strip().splitlines()
    glibc = lines[0].split()[-1] if lines and lines[0].startswith("glibc") else ""
    packages = dict(line.split(" ", 1) for line in lines[1:] if " " in line)
    return {"glibc": glibc, "packages": packages}


def box_toolchain(client, name: str, packages: tuple[str, ...]) -> dict:
    return parse_toolchain(client.exec(name, ["sh", "-c", toolchain_query(packages)]).stdout.decode())


def box_work(source: LlamaSource, kind: str) -> str:
    return f"{BOX_ROOT}/llama-{source.version}-{kind}"


def build_in_box(client, box: BuildBox, sdist: Path, source: LlamaSource, jobs: int, log: Path,
                 kind: str = "cpu", packages: tuple[str, ...] = CPU_PACKAGES,
                 flags: tuple[str, ...] = ()) -> tuple[bytes, dict]:
    """Run llama-box-build.sh in the box (its packages, CMAKE_FLAGS + ``flags``), its output as progress; the
    binary's bytes and the box's toolchain (glibc, package versions)."""
    remote_sdist = push_sdist(client, box, sdist, source)
    client.push_file(box.name, f"{BOX_ROOT}/{SCRIPT}", script_text(), mode=0o755)
    work = box_work(source, kind)
    with box_lock(box):
        return _run_build(client, box, remote_sdist, work, jobs, log, kind, packages, flags)


def _run_build(client, box: BuildBox, remote_sdist: str, work: str, jobs: int, log: Path, kind: str,
               packages: tuple[str, ...], flags: tuple[str, ...]) -> tuple[bytes, dict]:
    run_with_progress([box.tool, "exec", box.target, "--", "sh", f"{BOX_ROOT}/{SCRIPT}", remote_sdist, work,
                       str(jobs), " ".join(packages), *CMAKE_FLAGS, *flags],
                      f"build llama-server ({kind}) in {box.name} ({jobs} jobs)",
                      parse=lambda line: build_step(line) or install_step(line), log=log)
    return pull(client, box.name, f"{work}/build/bin/llama-server"), box_toolchain(client, box.name, packages)


def release_key(codename: str, kind: str = "cpu") -> str:
    """A box build's cache directory name: build kind and release, ``cpu-bookworm``."""
    return f"{kind}-{codename}"


def release_cache_dir(codename: str, version: str = PINNED.version, kind: str = "cpu") -> Path:
    return cache_dir(version) / release_key(codename, kind)


def newest_glibc(path: Path) -> str:
    """The newest ``GLIBC_x.y`` an ELF needs (its ``.gnu.version_r``), as "2.36"; OperationFailed when none."""
    need = elfsyms.glibc_needed(elfsyms.version_needs(path))
    if need is None:
        raise OperationFailed(f"{path} needs no GLIBC_ symbol version: not the glibc binary a box builds")
    return f"{need[0]}.{need[1]}"


def build_for_release(codename: str, client, profile: str, tool: str = "lxc", source: LlamaSource = PINNED,
                      jobs: int | None = None, remote: str | None = None, log=print) -> Path:
    """The cached CPU ``bin/llama-server`` built for Debian ``codename`` in that release's build box of the lab
    with ``profile`` on ``client``'s daemon (made when missing), building it first. Locked and staged like the
    other builds: a killed build leaves no manifest, so nothing half-made is ever pushed."""
    recipe_for(codename)  # a release the lab has no image of: one line before anything is made
    cache = release_cache_dir(codename, source.version)
    binary = cache / "bin" / "llama-server"
    with once_under_lock(cache / "manifest.json", cache.parent / f".{cache.name}.lock", manifest_ok) as todo:
        if not todo:
            return binary
        lab_profile(client, profile, tool)  # a profile the daemon lacks: one line before anything is downloaded
        with progress(f"build llama-server {source.version} for Debian {codename} once (in its build box; ~6 min "
                      f"on 2 idle cores; then cached in {cache})", heartbeat=False):
            staging = cache.with_name(cache.name + ".new")
            shutil.rmtree(staging, ignore_errors=True)
            (staging / "bin").mkdir(parents=True)
            sdist = download_sdist(cache.parent, source)
            box = ensure_box(client, profile, codename, tool, log=log, remote=remote)
            data, toolchain = build_in_box(client, box, sdist, source, jobs or os.cpu_count() or 2,
                                           staging / "build.log")
            built = staging / "bin" / "llama-server"
            built.write_bytes(data)
            built.chmod(0o755)
            manifest = {"llama_cpp": source.version, "backend": "cpu", "release": codename,
                        "glibc_needed": newest_glibc(built), "toolchain": toolchain, "built_in": box.name,
                        "files": {"bin/llama-server": sha256_file(built)}}
            write_text_atomic(staging / "manifest.json", json.dumps(manifest, indent=1) + "\n")
            shutil.rmtree(cache, ignore_errors=True)
            staging.rename(cache)
    return binary
