"""`labwright model`: Models on this machine: fetch one from the Hugging Face Hub (verified), write the tiny test GGUF.

    labwright model fetch unsloth/Qwen3-0.6B-GGUF --file Qwen3-0.6B-Q8_0.gguf --name qwen3-0.6b --models /tank/models
    labwright model tiny ~/.cache/labwright/models/tiny.gguf

`model fetch` runs labwright.models.fetch here (the runner the deploys ship to guests): the files checked against the
Hub's checksums, MODELS/NAME and its marker written only then. (`python -m labwright.models.fetch` and `python -m
labwright.llamacpp.tiny_model` still work for one release, with a deprecation line.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from labwright import paths
from labwright.cli import vocab
from labwright.cli.vocab import DryOption
from labwright.errors import BadInput, OperationFailed
from labwright.textio import loads_json

NAME = "model"
HELP = ("Models on this machine: fetch one from the Hugging Face Hub (verified), plan the engine for one, write the "
        "tiny test GGUF.")

app = typer.Typer(no_args_is_help=True, help=HELP)

#: The spec's data keys (labwright.models.spec, whose one-line errors name them) as this command's options.
_OPTION_OF_KEY = {"model_repo": "REPO", "model_revision": "--revision", "model_allow": "--allow",
                  "model_ignore": "--ignore", "model_file": "--file", "model_name": "--name",
                  "model_endpoint": "--endpoint"}
#: A GGUF's context length is a uint32; the tiny model's layers are sized for any of them.
MAX_CONTEXT = 2**32 - 1
MAX_SEED = 2**32 - 1


def _as_options(message: str) -> str:
    """A line of labwright.models (which names the deploy's data keys) naming this command's options instead."""
    for key, option in _OPTION_OF_KEY.items():
        message = message.replace(key, option)
    return message


def _spec(repo: str, revision: str, allow: list[str], ignore: list[str], file: str | None,
          name: str | None) -> dict[str, Any]:
    from labwright.models.spec import parse_spec

    try:
        spec = parse_spec({"repo": repo, "revision": revision, "allow": allow, "ignore": ignore, "file": file,
                           "name": name})
    except BadInput as exc:
        raise BadInput(_as_options(str(exc))) from None
    return spec.as_json()


def _directory(option: str, path: Path) -> Path:
    """A directory option: an existing directory, or a path that can be made one (nothing is made here)."""
    if os.path.lexists(path) and not path.is_dir():
        raise BadInput(f"{option} {path}: not a directory; give the directory (made when missing)")
    for parent in path.absolute().parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise BadInput(f"{option} {path}: {parent} is not a directory; give a directory path")
            break
    return path


@app.command()
def fetch(
    repo: str = typer.Argument(..., help="The Hugging Face repo id, e.g. Qwen/Qwen3-0.6B."),
    revision: str = typer.Option("main", "--revision", help="A branch, tag or 40-hex commit of the repo."),
    file: str | None = typer.Option(None, "--file", help="One GGUF file of the repo (for llama.cpp)."),
    allow: list[str] = typer.Option([], "--allow", metavar="PATTERN", help="Only files matching (repeatable)."),
    ignore: list[str] = typer.Option([], "--ignore", metavar="PATTERN", help="Leave out files matching "
                                     "(repeatable)."),
    name: str | None = typer.Option(None, "--name", help="MODELS/NAME, the link to the snapshot (default: the "
                                    "repo's name)."),
    models: Path = typer.Option(None, "--models", metavar="DIR", show_default=False,
                                help="Where MODELS/NAME links to the snapshot (default ~/.cache/labwright/models)."),
    cache: Path = typer.Option(None, "--cache", metavar="DIR", show_default=False,
                               help="huggingface_hub's cache (default MODELS/hub)."),
    endpoint: str | None = typer.Option(None, "--endpoint", callback=vocab.url_option("--endpoint"),
                                        help="The Hub URL (default: HF_ENDPOINT, else "
                                        "https://huggingface.co)."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help='Print {"name", "path", "spec", "complete", "downloaded", '
                                 '"dry", "commit", "files", "bytes"} as JSON.'),
) -> None:
    """Download a model (verified against the Hub's checksums) and link MODELS/NAME to it; a complete one is found
    without asking the Hub.

    Exit 0 complete (downloaded or already there); 1 the download failed (files completed so far stay in the cache;
    re-run to continue); 2 bad input (not a repo, revision or file on the Hub, a gated repo without access, a name
    taken by another directory).

    Example: labwright model fetch unsloth/Qwen3-0.6B-GGUF --file Qwen3-0.6B-Q8_0.gguf --name qwen3-0.6b
    """
    from labwright.models import fetch as runner
    from labwright.models.spec import check_endpoint

    spec = _spec(repo, revision, allow, ignore, file, name)
    if endpoint is not None:
        try:
            endpoint = check_endpoint(endpoint)
        except BadInput as exc:
            raise BadInput(_as_options(str(exc))) from None
    models = _directory("--models", models if models is not None else paths.cache_path("models"))
    cache = _directory("--cache", cache if cache is not None else models / "hub")
    complete = runner.is_complete(models, spec)
    downloaded = False
    if not complete and not dry:
        if importlib.util.find_spec("huggingface_hub") is None:
            raise BadInput("labwright model fetch needs huggingface_hub: pip install 'labwright[models]'")
        models.mkdir(parents=True, exist_ok=True)
        cache.mkdir(parents=True, exist_ok=True)
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the runner's progress lines: stdout is the report
                runner.download(spec, cache, models, endpoint)
        except runner.Refused as exc:
            raise (BadInput if exc.status == runner.EXIT_BAD_INPUT else OperationFailed)(_as_options(str(exc))) \
                from None
        complete = downloaded = True
    marker: dict[str, Any] = {}
    if complete:
        with contextlib.suppress(OSError, ValueError):
            marker = loads_json(runner.marker_path(models, spec["name"]).read_text(encoding="utf-8"))
    files = marker.get("files") or {}
    size = sum(entry.get("size", 0) for entry in files.values()) if files else None
    link = models / spec["name"]
    if as_json:
        typer.echo(json.dumps({"name": spec["name"], "path": str(link), "spec": spec, "complete": complete,
                               "downloaded": downloaded, "dry": dry, "commit": marker.get("commit"),
                               "files": len(files) if files else None, "bytes": size}))
    elif not complete:
        typer.echo(f"would download: {spec['repo']}@{spec['revision']} into {link} (cache {cache})")
    else:
        verb = "downloaded" if downloaded else "complete"
        typer.echo(f"{verb}: {link} ({spec['repo']}@{spec['revision']}, {len(files)} files, {size} bytes, commit "
                   f"{str(marker.get('commit', '?'))[:12]}, checksums verified)")


@app.command()
def plan(
    model: str = typer.Argument(..., metavar="MODEL", help="A model directory, a .gguf file, or a Hub repo id "
                                "(org/name, read without downloading its weights)."),
    vram_gb: str | None = typer.Option(None, "--vram-gb", help="The largest GPU's memory; a bare number is GiB; 0: "
                                       "no GPU. With --unified: the shared pool (default --ram-gb)."),
    ram_gb: str | None = typer.Option(None, "--ram-gb", help="System RAM for offloaded weights (default: not "
                                      "checked)."),
    unified: bool = typer.Option(False, "--unified", help="Unified memory (one pool for GPU and CPU): the model fits "
                                 "in it or nowhere; nothing crosses PCIe."),
    context: int | None = typer.Option(None, "--context", help="Count the KV cache for this context (needs a "
                                       "config.json or a local GGUF)."),
    file: str | None = typer.Option(None, "--file", help="One GGUF file of a Hub repo (as `model fetch --file`)."),
    revision: str = typer.Option("main", "--revision", help="A branch, tag or 40-hex commit of a Hub repo."),
    allow: list[str] = typer.Option([], "--allow", metavar="PATTERN", help="Only the repo's files matching "
                                    "(repeatable)."),
    ignore: list[str] = typer.Option([], "--ignore", metavar="PATTERN", help="Leave out the repo's files matching "
                                     "(repeatable)."),
    endpoint: str | None = typer.Option(None, "--endpoint", callback=vocab.url_option("--endpoint"),
                                        help="The Hub URL (default: HF_ENDPOINT, else https://huggingface.co)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"engine", "deploy", "model", "line", '
                                 '"cpu_offload_gb", "cpu_offload_params", "memory", "fit"} as JSON.'),
) -> None:
    """The engine `engine: auto` would deploy for a model, and why, without deploying: its format picks the engine
    (field note 000's table: GGUF -> llama.cpp, EXL3 -> tabbyAPI, AWQ/GPTQ/FP8/16-bit safetensors -> vLLM) and
    `kv fit`'s verdict says where it lives (VRAM, MoE expert offload, a split, CPU).

    Exit 0 with a choice; 2 when no engine here speaks the format, nothing fits, or the input is bad (one line).

    Example: labwright model plan ~/models/Qwen3-8B-AWQ --vram-gb 8 --ram-gb 32
    """
    from labwright.models.engine_plan import Memory, plan_hub, plan_local
    from labwright.tuning.units import parse_size

    def size(text: str | None, option: str) -> int | None:
        return parse_size(text, option, bare_unit="GiB") if text is not None else None

    vram, ram = size(vram_gb, "--vram-gb"), size(ram_gb, "--ram-gb")
    if unified:
        vram = vram if vram is not None else ram
        if vram is None:
            raise BadInput("--unified: give the shared pool's size with --vram-gb or --ram-gb")
    elif vram is None:
        raise BadInput("--vram-gb: give the largest GPU's memory (0 for a machine without one), or --unified with "
                       "--ram-gb")
    if context is not None and not 1 <= context <= MAX_CONTEXT:
        raise BadInput(f"--context {context}: give 1 to {MAX_CONTEXT} tokens")
    memory = Memory(vram=vram, ram=ram, unified=unified)
    path = Path(model).expanduser()
    local = path.exists() or model.startswith(("/", ".", "~")) or model.lower().endswith(".gguf")
    if local:
        if file or allow or ignore or revision != "main" or endpoint:
            raise BadInput(f"{model}: --file/--revision/--allow/--ignore/--endpoint are for a Hub repo; a local "
                           "model is read as it is")
        chosen = plan_local(path, memory, context)
    else:
        from labwright.models.spec import check_endpoint

        spec = _spec(model, revision, allow, ignore, file, None)
        hub = check_endpoint(endpoint) if endpoint else os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        from labwright.models.spec import parse_spec

        chosen = plan_hub(parse_spec(spec), hub, memory, context, token=os.environ.get("HF_TOKEN") or None)
    if as_json:
        typer.echo(json.dumps(chosen.to_json()))
        return
    typer.echo(chosen.line)
    for warning in chosen.fit.warnings:
        typer.echo(f"  warning: {warning}")
    typer.echo(f"  deploy: pyinfra -y INVENTORY {chosen.deploy}  (or engine: auto in the guest's data)")


@app.command()
def tiny(
    out: Path = typer.Argument(..., metavar="PATH", help="The GGUF file to write."),
    context_length: int = typer.Option(1 << 19, "--context-length", help="The trained context it declares."),
    seed: int = typer.Option(0, "--seed", help="The random weights' seed."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help='Print {"path", "bytes", "context_length", "seed", "dry"} '
                                 "as JSON."),
) -> None:
    """Write a tiny random-weight llama GGUF (~9 MB) that the real llama-server loads and serves: for tests and
    trying a deploy without downloading a model.

    Example: labwright model tiny ~/.cache/labwright/models/tiny.gguf
    """
    if not 16 <= context_length <= MAX_CONTEXT:
        raise BadInput(f"--context-length {context_length}: give 16 to {MAX_CONTEXT} tokens (default {1 << 19})")
    if not 0 <= seed <= MAX_SEED:
        raise BadInput(f"--seed {seed}: give 0 to {MAX_SEED}")
    if out.is_dir():
        raise BadInput(f"{out} is a directory: give the GGUF file's path, e.g. {out / 'tiny.gguf'}")
    if os.path.lexists(out) and not out.is_file():
        # the file is written beside and renamed over PATH: never over a device, a pipe or a socket (sweep at
        # 2b91fd1: `model tiny /dev/null --dry` said "would write: /dev/null")
        raise BadInput(f"{out} exists and is not a regular file (a device, pipe or socket); give a file's path")
    _directory("PATH", out.parent)  # made when missing
    if not dry:
        if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("numpy") is None:
            raise BadInput("labwright model tiny needs gguf and numpy: pip install 'labwright[lab]'")
        from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf

        write_tiny_gguf(out, TinyModel(context_length=context_length, seed=seed))
    if as_json:
        typer.echo(json.dumps({"path": str(out), "bytes": None if dry else out.stat().st_size,
                               "context_length": context_length, "seed": seed, "dry": dry}))
    else:
        typer.echo(f"would write: {out}" if dry else str(out))
