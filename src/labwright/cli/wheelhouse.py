"""`labwright wheelhouse`: Wheelhouses for guests that cannot reach PyPI: wheels and their hashed lock, made once.

    labwright wheelhouse litellm --python 3.11.2          # prints the directory (cached)
    labwright wheelhouse openwebui --python 3.11.2 --torch-find-links DIR_OR_URL_WITH_A_CPU_TORCH
    labwright wheelhouse requirements --python 3.11.2 --out DIR -r requirements-minimum.txt   # any service venv
    labwright wheelhouse stack --stack NAME --out DIR     # the hashed lock of what a stack's wheels require

Each downloads the wheels for the guest's Python with this machine's pip, every file checked against the sha256 its
index publishes (``requirements.lock``, which the deploys install from with --require-hashes); see
labwright.wheelhouse; ``stack`` writes the lock a stack's wheelhouse carries (labwright.stacks.dependency_lock).
(`python -m labwright.litellm.wheelhouse`, `python -m labwright.openwebui.wheelhouse`, `python -m labwright.wheelhouse`
and `python -m labwright.stacks.dependency_lock` still work for one release, with a deprecation line.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import typer

from labwright.cli import vocab
from labwright.cli.vocab import DryOption
from labwright.errors import BadInput
from labwright.locks import PYPI_SIMPLE

NAME = "wheelhouse"
HELP = "Wheelhouses for guests that cannot reach PyPI: wheels and their hashed lock, made once."

app = typer.Typer(no_args_is_help=True, help=HELP)

PythonOption = typer.Option(..., "--python", help="The guest's Python version, e.g. 3.11.2 (python3 --version).")
JSON_HELP = 'Print {"directory", "lock", "requirements", "python", "complete", "downloaded", "dry"} as JSON.'


def _report(requirements: list[str], python: str, target: Path, dry: bool, as_json: bool,
            download: Callable[[], object]) -> None:
    """``download()`` unless ``dry`` or the wheelhouse is complete already, then the report: the directory on stdout,
    or the JSON document."""
    from labwright import wheelhouse as wh

    complete = wh.is_complete(requirements, python, target)
    downloaded = False
    if not complete and not dry:
        download()
        complete = downloaded = True
    if as_json:
        typer.echo(json.dumps({"directory": str(target), "lock": str(target / wh.LOCK_NAME),
                               "requirements": requirements, "python": python, "complete": complete,
                               "downloaded": downloaded, "dry": dry}))
    elif dry and not complete:
        typer.echo(f"would download: {' '.join(requirements)} (CPython {python}) into {target}")
    else:
        typer.echo(str(target))


@app.command()
def litellm(
    python: str = PythonOption,
    version: str | None = typer.Option(None, "--version", callback=vocab.version_option("--version"),
                                       help="The litellm release (default: the deploy's pin)."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """litellm[proxy]'s wheelhouse, cached under ~/.cache/labwright/litellm/VERSION-pyPYTHON (deploys/litellm.py's
    litellm_find_links, once the guest sees it).

    Example: labwright wheelhouse litellm --python 3.11.2
    """
    from labwright.litellm import wheelhouse as litellm_wheelhouse
    from labwright.litellm.config import load_defaults

    release = version or str(load_defaults()["service"]["version"])
    requirements, target = litellm_wheelhouse.plan(release, python)
    _report(requirements, python, target, dry, as_json, lambda: litellm_wheelhouse.wheelhouse(release, python))


@app.command()
def openwebui(
    python: str = PythonOption,
    version: str | None = typer.Option(None, "--version", callback=vocab.version_option("--version"),
                                       help="The open-webui release (default: the deploy's "
                                       "pin)."),
    torch_find_links: str = typer.Option("", "--torch-find-links", metavar="DIR|URL",
                                         callback=vocab.url_or_dir_option("--torch-find-links"),
                                         help="A directory or URL with a CPU torch wheel (else PyPI's CUDA torch and "
                                         "its NVIDIA wheels, several GB)."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """open-webui's wheelhouse (~240 wheels), cached under ~/.cache/labwright/openwebui/VERSION-pyPYTHON
    (deploys/openwebui.py's openwebui_find_links, once the guest sees it).

    Example: labwright wheelhouse openwebui --python 3.11.2 --torch-find-links https://download.pytorch.org/whl/cpu/torch/
    """
    from labwright.openwebui import wheelhouse as openwebui_wheelhouse
    from labwright.openwebui.config import load_defaults

    release = version or str(load_defaults()["service"]["version"])
    requirements, target = openwebui_wheelhouse.plan(release, python, torch_find_links=torch_find_links)
    _report(requirements, python, target, dry, as_json,
            lambda: openwebui_wheelhouse.wheelhouse(release, python, torch_find_links=torch_find_links))


@app.command()
def requirements(
    words: list[str] = typer.Argument(None, metavar="[REQUIREMENT]...", help="Requirements such as kokoro==0.9.4."),
    python: str = PythonOption,
    out: Path = typer.Option(..., "--out", metavar="DIR", help="The wheelhouse directory to write."),
    files: list[Path] = typer.Option([], "-r", metavar="FILE", help="A requirements file (repeatable)."),
    index_url: str = typer.Option(PYPI_SIMPLE, "--index-url", callback=vocab.url_option("--index-url"),
                                  help="The simple index the lock is made from."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Any service venv's wheelhouse with its hashed lock (Kokoro's, the Open WebUI pipelines server's), from -r
    files and requirement words.

    Example: labwright wheelhouse requirements --python 3.11.2 --out /srv/wheels/pipelines -r requirements-minimum.txt
    """
    from labwright import wheelhouse as wh

    wanted = wh.checked_requirements(list(words or []))
    for file in files:
        if not file.is_file():  # a directory, a pipe nobody writes, a missing file: read nothing
            raise BadInput(f"-r {file}: not a requirements file (missing, a directory or not a regular file)")
        try:
            wanted += wh.checked_requirements(wh.requirements_in(str(file)))
        except BadInput as exc:
            raise BadInput(str(exc) if str(exc).startswith("-r ") else f"-r {file}: {exc}") from None
    if not wanted:
        raise BadInput("no requirements: name them, or pass -r FILE")
    wh.check_python(python)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: not a directory; give the wheelhouse directory (made when missing)")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise BadInput(f"--out {out}: {parent} is not a directory; give a directory path")
            break
    _report(wanted, python, out, dry, as_json, lambda: wh.download_wheelhouse(wanted, python, out, index_url=index_url))


STACK_JSON_HELP = 'Print {"stack", "lock", "python", "wheels", "index_url", "written", "dry"} as JSON.'


@app.command()
def stack(
    name: str = typer.Option(..., "--stack", metavar="NAME", help="The stack's name (labwright matrix stacks)."),
    out: Path = typer.Option(..., "--out", metavar="DIR|FILE",
                             help="The wheelhouse directory (the lock goes in DIR/requirements.lock) or the lock "
                             "file."),
    torch: str | None = typer.Option(None, "--torch", metavar="VERSION",
                                     help="Resolve the stack with this torch instead of its own."),
    index_url: str = typer.Option(PYPI_SIMPLE, "--index-url", callback=vocab.url_option("--index-url"),
                                  help="Where the dependencies come from (their sha256s are the ones it publishes)."),
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help=STACK_JSON_HELP),
) -> None:
    """The hashed lock of what a stack's wheels require (torch's sympy, exllamav3's tokenizers, ...), for a
    wheelhouse the stack is switched from (stack switch --wheelhouse DIR): pip resolves the matrix's wheels here and
    every other file is pinned by the sha256 the index publishes. Prints the lock's path.

    Example: labwright wheelhouse stack --stack tabbyapi-cu12 --out /srv/wheels
    """
    from labwright.atomic import write_text_atomic
    from labwright.stacks import dependency_lock

    target = dependency_lock.lock_target(out)
    plan = dependency_lock.plan_to_lock(name, torch)
    if not dry:
        write_text_atomic(target, dependency_lock.lock_dependencies(plan, index_url=index_url).dependency_lock)
    if as_json:
        typer.echo(json.dumps({"stack": plan.stack, "lock": str(target), "python": plan.python,
                               "wheels": [wheel.filename for wheel in plan.wheels], "index_url": index_url,
                               "written": not dry, "dry": dry}))
    elif dry:
        typer.echo(f"would write: the hashed lock of what stack {plan.stack}'s {len(plan.wheels)} wheels require "
                   f"(CPython {plan.python}, from {index_url}) to {target}")
    else:
        typer.echo(str(target))
