"""`labwright gpu`: is the GPU really used by a guest's engine (`check`); which CUDA builds run on a GPU (`arch`)."""

from __future__ import annotations

import json
import sys

import typer
from rich.markup import escape

from labwright.cli import vocab
from labwright.errors import BadInput
from labwright.gpu import arch as gpu_arch
from labwright.gpu.check import DecodeRequest
from labwright.gpu.guest import AUTO, check_guest
from labwright.hostupgrade.node import this_node
from labwright.ui import stdout, table

NAME = "gpu"
HELP = "GPU guests: check that the GPU is visible, matched and really used by the engine; CUDA builds per GPU."

app = typer.Typer(no_args_is_help=True, help=HELP)
#: Faster than any single-stream decode on any GPU today: a larger bound is a typo.
MAX_DECODE_FLOOR = 10_000_000


@app.command()
def check(
    guest: str = typer.Argument(..., metavar="GUEST", help="LXD/Incus instance on this host (NAME)."),
    service: str = typer.Option(AUTO, "--service", callback=vocab.unit_option("--service", (AUTO, "none")),
                                help="The engine's systemd unit (default: llama-server or "
                                "tabbyapi, whichever the guest has; 'none' skips the engine check)."),
    decode: bool = typer.Option(False, "--decode", help="Also time a short completion in the guest: no faster than "
                                "the CPU bound (labwright/data/gpu-check.toml) fails."),
    decode_floor: float | None = typer.Option(None, "--decode-floor", help="CPU bound in tokens/s for --decode "
                                              "(default 20: a 7-9B model on a CPU decodes at 5-12)."),
    decode_url: str | None = typer.Option(None, "--decode-url", callback=vocab.url_option("--decode-url"),
                                          help="The engine's OpenAI base URL inside the guest "
                                          "(default http://127.0.0.1:PORT/v1, PORT from the engine's --port)."),
    api_key_file: str = typer.Option("", "--api-key-file", help="A file IN THE GUEST holding the API key (a bare key "
                                     "or tabbyAPI's api_tokens.yml; default: the engine's own, as deployed: "
                                     "llama-server's --api-key-file, tabbyAPI's api_tokens.yml)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """GPU visible in the guest, userspace == host module version exactly, device nodes and majors == the host's,
    and the engine's process really on the GPU (a silent CPU fallback fails, with the reason from its log). An AMD or
    Intel guest: its /dev/dri nodes, the Vulkan device (vulkaninfo; llvmpipe alone is a CPU) and the engine on it.
    Exit 1 when a check fails; 2 for a guest that does not exist or has no GPU passed to it.

    Example: labwright gpu check llm1 --decode
    """
    if decode_floor is not None and not 0 < decode_floor <= MAX_DECODE_FLOOR:
        raise BadInput(f"--decode-floor {decode_floor:g}: not a speed; give tokens per second above 0 and at most "
                       f"{MAX_DECODE_FLOOR:,} (default 20)")
    if decode_url is not None and not decode_url.startswith(("http://", "https://")):
        raise BadInput(f"--decode-url {decode_url}: not an http(s) URL; give the OpenAI base URL as the guest sees "
                       "it, e.g. http://127.0.0.1:8001/v1")
    asked = decode or decode_floor is not None or decode_url is not None
    if asked and service == "none":
        raise BadInput("--decode times the engine's API: give the engine's unit with --service (or leave it auto), "
                       "not --service none")
    request = DecodeRequest(decode_floor, decode_url, api_key_file) if asked else None
    report = check_guest(guest, None if service == "none" else service, request, this_node().gpu_host())
    failed = [c for c in report.checks if not c.ok]
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        rows = [["ok" if c.ok else "[red]FAIL[/]", escape(c.name), escape(c.detail) if c.ok else
                 f"{escape(c.detail)}\n[bold]cause:[/] {escape(c.cause)}\n[bold]fix:[/] {escape(c.fix)}"]
                for c in report.checks]
        stdout.print(table(f"GPU guest {guest}", ["", "check", "detail"], rows))
        stdout.print(f"{len(report.checks) - len(failed)}/{len(report.checks)} checks passed "
                     f"in {report.seconds:.2f} s")
    if failed:
        for c in failed:
            print(f"labwright: gpu check {guest}: {c.name}: {c.detail}; cause: {c.cause}", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
def arch(
    capability: str = typer.Argument(..., metavar="COMPUTE_CAP", help="As nvidia-smi --query-gpu=compute_cap prints "
                                     "it (8.6, 12.0) or sm_86."),
    cuda: str | None = typer.Option(None, "--cuda", help="A build's CUDA version (12.8, cu128): exit 1 when it has "
                                    "no kernels for this GPU."),
    as_json: bool = typer.Option(False, "--json", help="Print the architecture (and the --cuda verdict) as JSON."),
) -> None:
    """The architecture of a compute capability and the CUDA builds with kernels for it (labwright/data/gpu-arch.toml).

    Example: labwright gpu arch 12.0 --cuda 12.6
    """
    found = gpu_arch.architecture(capability)
    if cuda is not None:
        gpu_arch.parse_cuda(cuda)  # refused before anything is printed
    if as_json:
        reason = gpu_arch.why_not(cuda, found.capability) if cuda is not None else None
        typer.echo(json.dumps({"capability": found.capability, "sm": found.sm, "name": found.name,
                               "min_cuda": found.min_cuda, "max_cuda": found.max_cuda, "cuda": cuda,
                               "cuda_has_kernels": None if cuda is None else not reason, "reason": reason or None},
                              indent=2))
        raise typer.Exit(1 if reason else 0)
    upto = f", up to CUDA {found.max_cuda}" if found.max_cuda else ""
    stdout.print(escape(f"{found.capability} ({found.sm}): {found.name}; builds need CUDA >= {found.min_cuda}{upto}"))
    if cuda is not None:
        reason = gpu_arch.why_not(cuda, found.capability)
        if reason:
            print(f"labwright: {reason}", file=sys.stderr)
            raise typer.Exit(1)
        stdout.print(escape(f"a CUDA {cuda} build has kernels for it"))
