"""The `labwright` command: one typer sub-app per file, errors as one line on stderr.

Exit codes: 0 ok, 1 a failed operation, 2 bad input (typer's own usage errors are 2 as well), 130 interrupted
(Ctrl-C). Whatever escapes a command is still one line: a LabwrightError as it is, an OSError with its path, a file
that is not UTF-8, a `sys.exit()` in a user's file with that file's line, and anything else as an internal error
with where it happened (LABWRIGHT_DEBUG=1 prints the traceback as well).
"""

from __future__ import annotations

import signal
import sys


def _interrupted_while_loading(signum: int, frame: object) -> None:  # pragma: no cover - timing
    import os

    sys.stderr.write("labwright: interrupted\n")
    os._exit(130)


# Ctrl-C while the heavy imports below load (typer, rich; pyinfra in the groups) is one line too, not a traceback
# from the middle of an import. Only when Python's own handler is in place (not inside pytest or an embedding app).
_own_sigint = signal.getsignal(signal.SIGINT) is signal.default_int_handler
if _own_sigint:
    signal.signal(signal.SIGINT, _interrupted_while_loading)

import errno  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TextIO, cast  # noqa: E402

import typer  # noqa: E402
import typer.core  # noqa: E402

from labwright import __version__  # noqa: E402
from labwright.errors import BadInput, LabwrightError  # noqa: E402

if _own_sigint:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The command groups, one module each (labwright/cli/NAME.py), in the order `--help` lists them, with each one's
#: short help. The help is kept here so `labwright --help` (and shell completion of a group name) lists every group
#: without importing one: a group's module costs 0.1-0.6 s (pyinfra, paramiko); tests/unit/cli/test_startup.py
#: holds every text equal to the module's own HELP.
GROUP_HELP: dict[str, str] = {
    "lab": "Build, inspect and remove the local LXD or Incus lab declared in an inventory's `lab` group.",
    "matrix": "Wheel compatibility matrix: resolve and check engine stacks (torch, CUDA, flash-attn ...).",
    "stack": "Install, switch and roll back named engine stacks in a guest.",
    "guest": "Declarative LXC guests on Proxmox VE and LXD/Incus with NVIDIA passthrough.",
    "gpu": "GPU guests: check that the GPU is visible, matched and really used by the engine; CUDA builds per GPU.",
    "host": "GPU host runbooks: upgrade the NVIDIA driver/kernel with snapshots, exact userspace and device majors.",
    "tabbyapi": "tabbyAPI configuration and the n-gram drafting patch.",
    "kv": "KV-cache and context planning from a model's config.json or GGUF file.",
    "probe": "Find the real context ceiling of a running engine.",
    "bench": "Benchmark an OpenAI-compatible endpoint (prefill, decode, TTS).",
    "cluster": "Proxmox/corosync cluster doctor and repair runbooks.",
    "bios": "flashrom BIOS backups.",
    "desktop": "Desktop guests (xrdp + MATE + Firefox): check one against the troubleshooting table of "
               "field note 003 (docs/field-notes.md).",
    "kokoro": "Kokoro-FastAPI TTS: the sentence-streaming patch.",
    "build": "Build engines once per machine (cached): llama.cpp's llama-server, for the CPU, CUDA or Vulkan "
             "GPUs.",
    "model": "Models on this machine: fetch one from the Hugging Face Hub (verified), plan the engine for one, "
             "write the tiny test GGUF.",
    "wheelhouse": "Wheelhouses for guests that cannot reach PyPI: wheels and their hashed lock, made once.",
    "verify": "Run a deploy's shipped testinfra suite against your hosts.",
}
GROUPS = tuple(GROUP_HELP)
#: -h as well as --help, on every command (click hands help_option_names down to the subcommands' contexts).
_CONTEXT = {"help_option_names": ["-h", "--help"]}


def _add_group(target: typer.Typer, module: Any) -> None:
    if hasattr(module, "command"):  # a group of one command (verify): its arguments follow the name
        target.command(name=module.NAME, help=module.HELP, context_settings=module.CONTEXT)(module.command)
    else:
        target.add_typer(module.app, name=module.NAME, help=module.HELP)


def _load_group(name: str) -> Any:
    """The click command typer builds for group ``name``, imported now (what ``register`` would add to the app)."""
    holder = typer.Typer(pretty_exceptions_enable=False, context_settings=_CONTEXT)
    _add_group(holder, importlib.import_module(f"labwright.cli.{name}"))
    return _no_empty_paths(typer.main.get_group(holder).commands[name])


def _no_empty_paths(command: Any) -> Any:
    """Every text or path parameter of ``command`` (and of its subcommands) is one line of something, where it
    enters: ``''`` is refused naming the parameter (typer makes an empty path ``Path('.')``, the current directory;
    an empty text option was taken as "not given": the CLI sweep at 2b91fd1 met ten such options), and so is a
    control character (a newline in ``--url`` split the progress line). An option that means "none" by ``''`` says so
    with a choice of its own, never by an empty string (issue 33). A number (int or float) is ASCII text: int() and
    pydantic take other white space at its ends (``--context $'\\x0b4096'`` read as 4096, ``\\xa0``, ``\\u2028``)."""
    import re

    if getattr(command, "_labwright_no_empty_paths", False):
        return command
    command._labwright_no_empty_paths = True
    for sub in getattr(command, "commands", {}).values():
        _no_empty_paths(sub)
    for param in getattr(command, "params", []):
        descriptor = getattr(param, "type_descriptor", None)
        annotation = repr(getattr(descriptor, "annotation", None)) if descriptor is not None else ""
        is_path = "Path" in annotation
        is_number = not is_path and "str" not in annotation and re.search(r"\b(?:int|float)\b", annotation) is not None
        if not is_path and not is_number and "str" not in annotation:
            continue
        name = param.opts[0] if getattr(param, "param_type_name", "") == "option" and param.opts else \
            (param.metavar or param.name or "PATH").upper()

        def process_value(ctx: Any, value: Any, _inner: Any = param.process_value, _name: str = name,
                          _path: bool = is_path, _key: str | None = param.name, _number: bool = is_number) -> Any:
            from labwright.schema.checks import control_character

            # what the user typed (or exported), never a default: by name, as typer vendors its own click
            given = getattr(ctx.get_parameter_source(_key), "name", "") in ("COMMANDLINE", "ENVIRONMENT")
            for item in (value if isinstance(value, list | tuple) else [value]) if given else ():
                if not isinstance(item, str):
                    continue
                if not item.strip():
                    what = "an empty path; give a file or directory" if _path else \
                        "empty; give a value, or leave the option out"
                    raise BadInput(f"{_name} {item!r}: {what}")
                found = control_character(item)
                if found:
                    raise BadInput(f"{_name} {item[:60]!r} holds the control character {found!r}; give one line")
                if _number and not (item.isascii() and item.isprintable()):
                    raise BadInput(f"{_name} {item[:60]!r} is not a number: give it in ASCII digits, e.g. 4096")
            return _inner(ctx, value)

        param.process_value = process_value
    return command


class LazyGroup(typer.core.TyperGroup):
    """The top-level group: every name in GROUPS is a command, but its module is imported only when the command is
    resolved to run (or to show its own help). Listing the groups (``labwright --help``, completing a group's name)
    uses GROUP_HELP and imports nothing. A group already added to ``app`` (``register``) is used as typer built it."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*GROUPS, *(name for name in self.commands if name not in GROUP_HELP)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in GROUP_HELP:
            # a group added by ``register`` is built by typer, not by _load_group: the same '' check applies to it
            return _no_empty_paths(command) if command is not None else None
        if self._listing:  # its name and short help are all a listing shows
            return typer.core.TyperCommand(name=cmd_name, help=GROUP_HELP[cmd_name])
        command = self.commands[cmd_name] = _load_group(cmd_name)
        return command

    def _listed(self, method: Any, *args: Any) -> Any:
        self._listing = True
        try:
            return method(*args)
        finally:
            self._listing = False

    def format_help(self, ctx: Any, formatter: Any) -> None:
        return cast(None, self._listed(super().format_help, ctx, formatter))

    def shell_complete(self, ctx: Any, incomplete: str) -> Any:
        return self._listed(super().shell_complete, ctx, incomplete)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except Exception as exc:
            # typer suggests only among the commands built so far: suggest among every group's name instead
            message = getattr(exc, "message", None)
            if isinstance(message, str) and args and "Did you mean" not in message:
                import difflib

                nearest = difflib.get_close_matches(args[0], self.list_commands(ctx))
                if nearest:
                    exc.message = f"{message.rstrip('.')}. Did you mean {', '.join(map(repr, nearest))}?"  # type: ignore[attr-defined]
            raise


app = typer.Typer(
    name="labwright",
    help="Reproducible local-LLM infrastructure for Proxmox VE and LXD/Incus homelabs.",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # `labwright --install-completion` installs shell completion (bash, zsh, fish, PowerShell); docs/cli.md.
    add_completion=True,
    context_settings=_CONTEXT,
)
_registered: set[str] = set()
#: The variable a shell's completion script sets when it asks labwright for completions (click's convention).
_COMPLETE_VAR = "_LABWRIGHT_COMPLETE"


def register(names: tuple[str, ...] | list[str] = GROUPS) -> typer.Typer:
    """Import and add these groups to ``app`` (once each), as typer's own sub-apps. ``main`` needs none of this (the
    top-level group imports a group when it is invoked); tests that walk the whole app or add to a group call it."""
    for name in names:
        if name not in _registered:
            _add_group(app, importlib.import_module(f"labwright.cli.{name}"))
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


#: Errors whose path is almost always the user's (a name typed wrong): bad input, exit 2.
_PATH_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP}
_PACKAGE = Path(__file__).resolve().parent.parent


#: The last error line printed (for the JSON error object of a command run with --json).
_last_error: list[str] = []


def error(message: str) -> None:
    """Print ``message`` as the command's one error line (newlines folded: one line, whatever the message)."""
    line = " ".join(str(message).split())
    _last_error[:] = [line]
    print(f"labwright: error: {line}", file=sys.stderr)


def _usage_line(exc: Exception) -> str:
    """A click usage error as one line: the message and where the help is (click prints three or more)."""
    message = " ".join(str(exc.format_message() if hasattr(exc, "format_message") else exc).split())
    name, possible = getattr(exc, "option_name", None), getattr(exc, "possibilities", None)
    if name and possible:  # click lists every close option; name the nearest one
        import difflib

        nearest = difflib.get_close_matches(name, sorted(possible), n=1, cutoff=0.0)
        if nearest:
            message = f"No such option: {name}. Did you mean {nearest[0]}?"
    ctx = getattr(exc, "ctx", None)
    path = str(getattr(ctx, "command_path", None) or "")
    where = f" (see `{path} --help`)" if path else ""
    return f"{message}{where}"


def _where(exc: BaseException) -> traceback.FrameSummary | None:
    frames = traceback.extract_tb(exc.__traceback__)
    return frames[-1] if frames else None


def _is_users(frame: traceback.FrameSummary | None) -> bool:
    """Whether a frame is in a file outside labwright and Python's libraries (an inventory, a config the user
    wrote)."""
    if frame is None:
        return False
    try:
        path = Path(frame.filename).resolve()
    except (OSError, RuntimeError):
        return False
    return not (path.is_relative_to(_PACKAGE) or "site-packages" in path.parts or "dist-packages" in path.parts
                or path.is_relative_to(Path(os.__file__).resolve().parent))


def _escaped(exc: BaseException) -> int:
    """One line for what escaped a command (see the module docstring); the exit code."""
    from labwright.schema import env

    if env.debug():
        traceback.print_exception(exc)
    if isinstance(exc, UnicodeDecodeError):
        error(f"a file labwright read is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
              f"{exc.start}); give UTF-8 text files")
        return 2
    if isinstance(exc, OSError):
        from labwright.textio import describe_oserror

        error(describe_oserror(exc))
        return 2 if exc.errno in _PATH_ERRNOS and exc.filename else 1
    if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):
        # pathlib's resolve() on Python < 3.13 (an OSError ELOOP from 3.13 on, handled above): a path given is a
        # loop of symbolic links
        error(f"{str(exc).removeprefix('Symlink loop from ').strip(chr(39))}: a loop of symbolic links; check the "
              "path")
        return 2
    if isinstance(exc, SystemExit):
        frame = _where(exc)
        if frame is not None and Path(frame.filename).name == "completion.py" and "typer" in Path(frame.filename).parts:
            # `labwright --show-completion/--install-completion`: typer ends those with sys.exit(0) by design
            return exc.code if isinstance(exc.code, int) else 0
        context = exc.__context__
        if isinstance(context, OSError) and context.errno == errno.EPIPE:
            # typer's own reaction to `labwright ... | head` (typer/core.py: EPIPE -> sys.exit(1)): the reader left.
            _quiet_stdout()
            return 141
        frame = _where(exc)
        code = "" if exc.code is None else repr(exc.code)
        where = f" in {frame.filename}:{frame.lineno}" if frame else ""
        error(f"the command was cut short by sys.exit({code}){where} before it finished; remove that call")
        return 2 if _is_users(frame) else 1
    frame = _where(exc)
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    first = str(exc).splitlines()[0] if str(exc) else ""
    error(f"internal error: {type(exc).__name__}: {first}{where}; this is a labwright bug, please report it with "
          "the command line (LABWRIGHT_DEBUG=1 prints the traceback)")
    return 1


def _quiet_stdout() -> None:
    """`labwright ... | head`: the reader left. Point stdout at /dev/null so the exit flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


_interrupts: list[int] = []


def _on_sigint(signum: int, frame: object) -> None:
    # Remember it, then raise KeyboardInterrupt as Python does: typer turns that into a silent Exit(130), and the
    # count is how main() tells a Ctrl-C from a command's own `typer.Exit(130)`.
    _interrupts.append(signum)
    signal.default_int_handler(signum, frame)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    # A name typed with bytes that are not UTF-8 (a file name, a guest) reaches Python as surrogates; printing it
    # back must not fail: escape it on stdout as Python already does on stderr.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    own = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if own:
        signal.signal(signal.SIGINT, _on_sigint)
    before = len(_interrupts)
    try:
        code = _main(argv)
    except KeyboardInterrupt:
        code = 130
        _interrupts.append(signal.SIGINT)
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    finally:
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if len(_interrupts) > before:
        print("labwright: interrupted (Ctrl-C); steps already done stay done", file=sys.stderr)
        return 130
    return code


def _rewrite(args: list[str]) -> list[str]:
    """Old spellings (vocab.DEPRECATED_FLAGS) to the new ones, one deprecation line each; `--` and what follows,
    and pass-through commands (verify: its arguments are pytest's), are left as they are."""
    from labwright.cli.vocab import DEPRECATED_FLAGS, PASS_THROUGH, deprecated

    first = next((a for a in args if not a.startswith("-")), None)
    if first in PASS_THROUGH:
        return args
    out: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return out + args[index:]
        new = DEPRECATED_FLAGS.get(arg)
        if new is not None:
            deprecated(arg, new)
            arg = new
        out.append(arg)
    return out


class _Watched:
    """sys.stdout, noting whether the command wrote to it (a report already printed gets no JSON error object
    after it: stdout stays one JSON document)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self.written = False

    def write(self, text: str) -> int:
        if text:
            self.written = True
        return self._inner.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def _json_error(args: list[str], code: int, wrote: bool) -> None:
    """With --json, a failure with an error line is a JSON object on stdout as well (unless the command's own
    report is already there)."""
    import json

    mine = args[:args.index("--")] if "--" in args else args
    if code in (0, 130, 141) or "--json" not in mine or not _last_error or wrote:
        return
    try:
        print(json.dumps({"error": _last_error[0], "exit_code": code}), flush=True)
    except BrokenPipeError:
        _quiet_stdout()


def _main(argv: list[str] | None) -> int:
    _last_error.clear()
    args = _rewrite(list(sys.argv[1:] if argv is None else argv))
    watched = _Watched(sys.stdout)
    sys.stdout = cast(TextIO, watched)
    try:
        code = _run(args)
    finally:
        if sys.stdout is watched:
            sys.stdout = watched._inner
        ui = sys.modules.get("labwright.ui")
        if ui is not None:  # set for this command's --json only (main runs many commands in one test process)
            setattr(ui, "plain_lines", False)  # noqa: B010
    _json_error(args, code, watched.written)
    return code


def _run(args: list[str]) -> int:
    # No group is imported here: the top-level group (LazyGroup) imports only the one the command names.
    first = next((a for a in args if not a.startswith("-")), None)
    mine = args[:args.index("--")] if "--" in args else args
    if first not in ("verify",) and "--dry" in mine and ("--yes" in mine or "-y" in mine):
        error("--dry and --yes contradict each other: --dry changes nothing, --yes acts; give one of them")
        return 2
    from labwright.schema import env

    try:
        env.check_environment()  # junk in an environment variable: one line, exit 2, before anything is contacted
    except LabwrightError as exc:
        error(str(exc))
        return exc.exit_code
    if "--json" in mine:
        # progress of long steps (labwright.ui.progress) as plain lines on stderr: stdout is the JSON document
        from labwright import ui

        ui.plain_lines = True
    try:
        # Outside standalone mode click hands back the code of `raise typer.Exit(n)` instead of exiting.
        result = app(args=args, standalone_mode=False)
    except LabwrightError as exc:
        from labwright.schema import env

        if env.debug():
            traceback.print_exception(exc)
        error(str(exc))
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("labwright: aborted (nothing was changed)", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except SystemExit as exc:
        if os.environ.get(_COMPLETE_VAR):
            # the shell asked for completions (`_LABWRIGHT_COMPLETE=complete_bash ...`): typer printed them and ends
            # with sys.exit(0) by design, from typer/core.py, not completion.py
            return exc.code if isinstance(exc.code, int) else 0
        return _escaped(exc)
    except Exception as exc:
        # Usage errors from the click that typer bundles (typer._click): duck-typed, as its
        # module path is private and has moved between typer releases.
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            line = _usage_line(exc)
            if not line.lstrip().startswith("(see "):  # a bare group (`labwright lab`): its help is printed
                error(line)
            return int(exc.exit_code)  # type: ignore[attr-defined]
        return _escaped(exc)
    return result if isinstance(result, int) else 0
