"""Build (once) and cache the local lab's Debian image with debootstrap.

The recipe is data (``data/lab-image.toml``); its hash names the cached tarball and the LXD image
alias, so an unchanged recipe is never rebuilt and a changed one always is.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from labwright import paths
from labwright.agent.zipapp import read_cached
from labwright.atomic import pid_alive, write_bytes_atomic
from labwright.digest import sha256_file
from labwright.errors import BadInput, OperationFailed
from labwright.textio import ascii_digits, read_text
from labwright.ui import install_step, run_with_progress

BUILDER_VERSION = "1"  # bump when this module changes how images are made

METADATA_TEMPLATE = """architecture: {architecture}
creation_date: {created}
properties:
  os: debian
  release: {suite}
  description: labwright lab image {suite} ({digest})
  labwright.recipe: "{digest}"
templates:
  /etc/hostname:
    when: [create, copy]
    template: hostname.tpl
"""


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    suite: str
    variant: str
    architecture: str
    include: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        blob = repr((BUILDER_VERSION, self.suite, self.variant, self.architecture, self.include,
                     sorted(self.files.items()))).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def alias(self) -> str:
        return f"labwright/{self.name}-{self.digest}"


def load_recipe(path: str | os.PathLike[str] | None = None) -> ImageRecipe:
    """Read an image recipe TOML (default: the packaged one)."""
    try:
        if path is None:
            text = resources.files("labwright.data").joinpath("lab-image.toml").read_text()
        else:
            text = read_text(Path(path), "an image recipe TOML")
        from labwright.schema import files  # pydantic: only where a recipe is read

        doc = files.check(files.ImageRecipeFile, tomllib.loads(text), str(path or "lab-image.toml"), "an image recipe",
                          "fix the file").model_dump()["image"]
        return ImageRecipe(
            name=doc["name"],
            suite=doc["suite"],
            variant=doc.get("variant", "minbase"),
            architecture=doc.get("architecture", "x86_64"),
            include=tuple(doc["include"]),
            files=dict(doc.get("files", {})),
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise BadInput(f"image recipe {path or 'lab-image.toml'}: {exc}; fix the file") from exc


def host_debian_mirror(sources_dir: str = "/etc/apt") -> str | None:
    """The Debian archive the host's own apt uses, so the image comes from the same place."""
    candidates: list[Path] = [Path(sources_dir, "sources.list")]
    candidates += sorted(Path(sources_dir, "sources.list.d").glob("*.sources"))
    candidates += sorted(Path(sources_dir, "sources.list.d").glob("*.list"))
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri in re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M):
            if re.search(r"/debian/?$", uri):
                return uri
    return None


def cache_dir() -> Path:
    path = paths.cache_path("images")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_tarball(recipe: ImageRecipe) -> Path:
    return cache_dir() / f"{recipe.name}-{recipe.digest}.tar.gz"


def tarball_record(tarball: Path) -> Path:
    """Where the sha256 of the tarball as it was built is kept (``NAME.tar.gz.sha256``)."""
    return tarball.with_name(tarball.name + ".sha256")


def cached_image(recipe: ImageRecipe) -> Path | None:
    """The cached tarball of ``recipe`` when it is whole: a regular file whose sha256 is its record's, or, where the
    record is missing or does not match (a tarball of an earlier labwright, which kept none; a record written over),
    one that reads through (gzip's CRC, tar's headers) and names this recipe, whose record is written then. One cut
    short or damaged is not (None: built again). Something that is no file in its place is BadInput naming it."""
    target = cached_tarball(recipe)
    if not target.exists() and not target.is_symlink():
        return None
    if not target.is_file():
        raise BadInput(f"{target} is not a file (the lab image's cache); remove it and run again")
    record = tarball_record(target)
    recorded = read_cached(record, "the lab image's sha256 record", max_bytes=1024)
    digest = sha256_file(target)
    if recorded is not None and recorded.strip() == digest.encode():
        return target
    try:
        with gzip.open(target) as stream:  # one pass: tar's headers, then gzip's CRC and length at its end
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                names = [member.name for member in tar]
            while stream.read(1 << 20):  # tar stops at its own end blocks, before gzip's trailer
                pass
        whole = "metadata.yaml" in names and tarball_recipe_digest(target) == recipe.digest
    except (OSError, tarfile.TarError, EOFError, ValueError, zlib.error):
        whole = False
    if not whole:
        return None
    write_bytes_atomic(record, digest.encode() + b"\n", mode=0o644)
    return target


def remove_abandoned_builds(log=print) -> list[Path]:
    """Remove the work directories of image builds whose process is gone (a killed `lab up` leaves a
    debootstrap tree of ~200 MB behind): the space is given back on the next build."""
    removed = []
    for work in cache_dir().glob("labwright-image-*"):
        pid_text = work.name.removeprefix("labwright-image-").split("-", 1)[0]
        if work.is_dir() and (not ascii_digits(pid_text) or not pid_alive(int(pid_text))):
            shutil.rmtree(work, ignore_errors=True)
            removed.append(work)
            log(f"removed {work} (left by an image build that was killed)")
    return removed


def build_image(recipe: ImageRecipe, mirror: str | None = None, log=print) -> Path:
    """Return the cached tarball for ``recipe``, building it with debootstrap if missing."""
    target = cached_tarball(recipe)
    if cached_image(recipe) is not None:
        return target
    if shutil.which("debootstrap") is None:
        raise OperationFailed("debootstrap is not installed; run `apt-get install debootstrap`")
    mirror = mirror or os.environ.get("LABWRIGHT_DEBIAN_MIRROR") or host_debian_mirror()
    remove_abandoned_builds(log)
    work = Path(tempfile.mkdtemp(prefix=f"labwright-image-{os.getpid()}-", dir=cache_dir()))
    try:
        rootfs = work / "rootfs"
        cmd = ["debootstrap", f"--variant={recipe.variant}", f"--include={','.join(recipe.include)}",
               recipe.suite, str(rootfs)]
        if mirror:
            cmd.append(mirror)
        log(f"debootstrap {recipe.suite} ({len(recipe.include)} packages) into {rootfs}")
        started = time.monotonic()
        # Minutes on a first run: a progress line with the package debootstrap is at (labwright.ui), the whole
        # output kept in the cache for when it fails.
        try:
            run_with_progress(cmd, f"debootstrap {recipe.suite}", parse=install_step,
                              log=cache_dir() / "debootstrap.log")
        except OperationFailed as exc:
            raise OperationFailed(f"{exc}; check the mirror and disk space") from None
        log(f"debootstrap done in {time.monotonic() - started:.0f}s")
        for rel, content in recipe.files.items():
            dest = rootfs / rel.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(content.lstrip("\n"))
        subprocess.run(["chroot", str(rootfs), "apt-get", "clean"], capture_output=True)
        meta = work / "meta"
        (meta / "templates").mkdir(parents=True)
        (meta / "metadata.yaml").write_text(METADATA_TEMPLATE.format(
            architecture=recipe.architecture, created=int(time.time()), suite=recipe.suite, digest=recipe.digest))
        (meta / "templates" / "hostname.tpl").write_text("{{ container.name }}\n")
        partial = work / "image.tar.gz"
        # The `S` transform flag keeps symlink targets intact (without it /etc/os-release breaks).
        proc = subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-czf", str(partial), "-C", str(meta), "metadata.yaml",
             "templates", "-C", str(rootfs), "--transform", r"s,^\.,rootfs,S", "."],
            capture_output=True, text=True)
        if proc.returncode != 0:
            raise OperationFailed(f"packing the image failed: {proc.stderr.strip()[:200]}")
        with open(partial, "rb") as packed:
            os.fsync(packed.fileno())  # whole on disk before it takes the cached name
        digest = sha256_file(partial)
        tarball_record(target).unlink(missing_ok=True)  # a kill between the two renames: no record, checked whole
        os.replace(partial, target)
        write_bytes_atomic(tarball_record(target), digest.encode() + b"\n", mode=0o644)
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tarball_recipe_digest(tarball: Path) -> str | None:
    """Read back the recipe digest recorded in a tarball's metadata.yaml (None if absent)."""
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("metadata.yaml")
        if member is None:
            return None
        match = re.search(r'labwright\.recipe: "([0-9a-f]+)"', member.read().decode())
        return match.group(1) if match else None
