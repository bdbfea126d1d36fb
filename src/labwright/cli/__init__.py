"""The `labwright` command: one typer sub-app per file, errors as one line on stderr.

Exit codes: 0 ok, 1 a failed operation, 2 bad input (typer's own usage errors are 2 as well).
"""

from __future__ import annotations

import importlib
import sys

import typer

from labwright import __version__
from labwright.errors import LabwrightError

app = typer.Typer(
    name="labwright",
    help="Reproducible local-LLM infrastructure for Proxmox VE and LXD/Incus homelabs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
#: The command groups, one module each (labwright/cli/NAME.py), in the order `--help` lists them.
GROUPS = ("lab", "matrix", "stack", "guest", "tabbyapi", "kv", "probe", "bench", "cluster", "bios", "desktop", "kokoro",
          "verify")
_registered: set[str] = set()


def register(names: tuple[str, ...] | list[str] = GROUPS) -> typer.Typer:
    """Import and add these groups to ``app`` (once each). Importing every group costs seconds (pyinfra,
    paramiko, ...), so ``main`` loads only the group a command names and all of them for the top-level help."""
    for name in names:
        if name not in _registered:
            module = importlib.import_module(f"labwright.cli.{name}")
            if hasattr(module, "command"):  # a group of one command (verify): its arguments follow the name
                app.command(name=module.NAME, help=module.HELP, context_settings=module.CONTEXT)(module.command)
            else:
                app.add_typer(module.app, name=module.NAME, help=module.HELP)
            _registered.add(name)
    return app


def _version(value: bool) -> None:
    if value:
        typer.echo(f"labwright {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """labwright: declarative, verified deploys for a homelab of LXD/Incus and Proxmox VE hosts."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    first = next((a for a in args if not a.startswith("-")), None)
    register([first] if first in GROUPS else GROUPS)
    try:
        # Outside standalone mode click hands back the code of `raise typer.Exit(n)` instead of exiting.
        result = app(args=argv, standalone_mode=False)
    except LabwrightError as exc:
        print(f"labwright: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("labwright: interrupted", file=sys.stderr)
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("labwright: aborted", file=sys.stderr)
        return 1
    except Exception as exc:
        # Usage errors from the click that typer bundles (typer._click): duck-typed, as its
        # module path is private and has moved between typer releases.
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()  # type: ignore[attr-defined]
            return int(exc.exit_code)  # type: ignore[attr-defined]
        raise
    return result if isinstance(result, int) else 0
