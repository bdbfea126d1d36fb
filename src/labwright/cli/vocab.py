"""One CLI vocabulary (docs/cli.md): the options every command spells the same way, and the old spellings that
still work for one release with a deprecation line.

- ``--dry``: say what would change, change nothing (pyinfra's spelling), on every command that changes something;
- ``-y/--yes``: act without asking, where a command asks or is destructive (destructive ones stay dry without it);
- ``-i/--inventory``: the pyinfra inventory, a file (``LABWRIGHT_INVENTORY`` or ``inventories/local.py``);
- ``--json``: the report as JSON on stdout (and a failure as ``{"error": ..., "exit_code": N}``).

tests/unit/cli/test_vocabulary.py walks the whole app and holds every command to these.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from labwright import guestlock
from labwright.errors import BadInput

#: Old spellings of ``--dry``, rewritten in labwright.cli.main with one deprecation line (kept for one release).
DEPRECATED_FLAGS = {"--dry-run": "--dry", "--plan": "--dry"}
#: Commands whose arguments are not labwright's (passed on to pytest): no rewriting there.
PASS_THROUGH = {"verify"}


def default_inventory() -> Path:
    from labwright.schema.env import read

    return Path(read("LABWRIGHT_INVENTORY") or "inventories/local.py")


def inventory_option(help_text: str, default: Path | str | None = None) -> Any:
    """``-i/--inventory FILE``, the same on every command (default: $LABWRIGHT_INVENTORY or inventories/local.py)."""
    return typer.Option(Path(default) if default is not None else default_inventory(), "--inventory", "-i",
                        metavar="FILE", help=help_text)


#: The old positional inventory (``labwright cluster doctor inv.py``): hidden, deprecated, still taken. A command
#: that takes it is made with ``cls=HiddenArgumentsCommand`` so that its usage line does not show it either.
InventoryPositional = typer.Argument(None, hidden=True, metavar="INVENTORY", show_default=False)


class HiddenArgumentsCommand(TyperCommand):
    """A command whose usage line leaves out hidden arguments (click shows them there, help hides only the row)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # typer's own click Context (typer vendors click)
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if not getattr(param, "hidden", False):
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


def deprecated(old: str, new: str) -> None:
    """The one deprecation line on stderr naming the new spelling."""
    print(f"labwright: deprecated: {old} is {new} now; the old spelling goes in the next release", file=sys.stderr)


def inventory(option: Path, positional: Path | None) -> Path:
    """The inventory the command reads: the option, or the old positional one (with its deprecation line). A
    missing file is one line naming it and the option."""
    if positional is not None:
        deprecated(f"the positional inventory ({positional})", f"-i/--inventory {positional}")
        option = positional
    if option.is_dir():
        raise BadInput(f"inventory {option} is a directory, not a file; pass the inventory file with -i/--inventory "
                       "FILE")
    if option.exists() and not option.is_file():
        raise BadInput(f"inventory {option} is not a regular file (a pipe, socket or device); pass the inventory "
                       "file with -i/--inventory FILE")
    if not option.is_file():
        raise BadInput(f"inventory {option}: no such file; pass an existing file with -i/--inventory FILE (or "
                       "set LABWRIGHT_INVENTORY)")
    return option


def dry_or_yes(dry: bool, yes: bool) -> None:
    """``--dry`` and ``--yes`` together: refused in one line (the CLI's main checks this first; kept for callers that
    invoke a command directly)."""
    if dry and yes:
        raise BadInput("--dry and --yes contradict each other: --dry changes nothing, --yes acts; give one of them")


DryOption = typer.Option(False, "--dry", help="Say what would change; change nothing.")
JsonOption = typer.Option(False, "--json", help="Print the result as JSON (shape: docs/cli.md).")


#: ``--lock-wait SECONDS`` where a command takes a guest's run lock (labwright.guestlock): probe, guest restore.
LockWaitOption = typer.Option(guestlock.DEFAULT_WAIT, "--lock-wait", help="Seconds to wait for another labwright "
                              "run on the guest (a deploy, a stack switch) to finish; 0 refuses at once.")
MAX_LOCK_WAIT = 86400.0


def check_lock_wait(wait: float) -> None:
    if not 0 <= wait <= MAX_LOCK_WAIT:  # also nan
        raise BadInput(f"--lock-wait {wait:g}: give seconds from 0 (refuse at once) to {MAX_LOCK_WAIT:g} (a day); "
                       f"default {guestlock.DEFAULT_WAIT:g}")


# --- free-text options typed at the boundary (issue 33): a typer ``callback=`` that runs while the command line is
# parsed, before the command's body builds any client, through the shared field types (labwright.schema.fields,
# imported only when such an option is given: `labwright --help` does not load pydantic).
def _through(option: str, check: Any) -> Any:
    """A typer callback: ``check(value)`` (a labwright.schema.fields check), its ValueError as BadInput naming
    ``option``; None and "" (the option not given, or "none") pass unchanged."""

    def callback(value: Any) -> Any:
        if value is None or value == "":
            return value
        if isinstance(value, list | tuple):
            return [callback(item) for item in value]
        try:
            check(value)
        except ValueError as refused:
            raise BadInput(f"{option} {refused}") from None
        return value

    return callback


def url_option(option: str, schemes: tuple[str, ...] = ("http", "https")) -> Any:
    """``--url``-like options: scheme, host (an IP address or host name, IPv6 in brackets) and port 1-65535."""

    def check(value: Any) -> None:
        from labwright.schema.fields import url

        scheme, sep, _ = str(value).strip().partition("://")
        if not sep or scheme.lower() not in schemes:  # worded as the commands' own checks word it
            named = "http(s)" if set(schemes) == {"http", "https"} else " or ".join(schemes)
            raise ValueError(f"{value!r}: not an {named} URL; give one like http://127.0.0.1:8080/v1")
        url(value, schemes)

    return _through(option, check)


def url_or_dir_option(option: str) -> Any:
    """An option that takes a URL or a local directory (``--torch-find-links DIR|URL``)."""

    def check(value: Any) -> None:
        from labwright.schema.fields import line, url

        text = line(value)
        if "://" in text:
            url(text, ("http", "https", "file"))

    return _through(option, check)


def version_option(option: str, shape: str | None = None, example: str = "1.2.3") -> Any:
    """A version (PEP 440, labwright.schema.fields.version); ``shape`` a stricter pattern (a driver version is
    digits and dots: ``550.54.15``)."""

    def check(value: Any) -> None:
        import re

        from labwright.schema.fields import version

        if shape is not None and not (isinstance(value, str) and re.fullmatch(shape, value.strip())):
            raise ValueError(f"{value!r} is not a version like {example}")
        version(value)

    return _through(option, check)


def host_option(option: str) -> Any:
    """A host or node name (an IP address or an RFC 1123 host name: no spaces, no shell characters)."""

    def check(value: Any) -> None:
        from labwright.schema.fields import listen_address

        listen_address(value)

    return _through(option, check)


def unit_option(option: str, words: tuple[str, ...] = ()) -> Any:
    """A systemd unit name (``llama-server``, ``tabbyapi.service``), or one of ``words`` (``auto``, ``none``): it
    names a unit, a file and a command argument in the guest."""
    import re

    def check(value: Any) -> None:
        name = str(value).removesuffix(".service")
        if value in words:
            return
        if not name or name.startswith(".") or not re.fullmatch(r"[A-Za-z0-9:_.@\\-]+", name):
            raise ValueError(f"{value!r} is not a systemd service name; pass one like llama-server or "
                             "tabbyapi.service")

    return _through(option, check)


def line_option(option: str) -> Any:
    """Free text that must stay one line (a voice, a model name sent in a request): no control characters."""

    def check(value: Any) -> None:
        from labwright.schema.fields import line

        line(value)

    return _through(option, check)
