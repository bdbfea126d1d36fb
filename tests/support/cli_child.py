"""``labwright ARGS`` in a forked child of the test process: ``run_cli`` is ``subprocess.run(["labwright", ...],
capture_output=True, text=True)`` without a new interpreter per call.

Why: a new ``labwright`` process pays Python's start-up and labwright's imports (0.3-0.5 s) on every call, and the
unit suite makes hundreds of them. The ``labwright`` console script is ``labwright.cli:main`` (pyproject.toml
[project.scripts]), so the child runs exactly that entry point, ``main(argv)``, with what a subprocess would have had
of its own: its own process (and process group), cwd and environment, stdin from ``input`` or /dev/null, stdout and
stderr in files read back as text, the exit code from ``main``'s return. What the test process already imported is
inherited, and that is the saving, so ``run_cli`` imports here what the command needs: its group
(labwright/cli/GROUP.py, with typer, rich and what the group imports at its top), before the first child, as the
bad-input sweep does; then what each child imported besides (the modules a command imports in its body: numpy for
a GGUF header, typer's help formatting, ...), from labwright, the standard library and the venv only, so the next
child has it already. Nothing else goes back: what a command changes (the environment, globals, caches) dies with
the child.

What stays a real subprocess: the tests of the console script itself (tests/unit/cli/test_startup.py: start-up time
and what is imported; test_python_m.py: ``python -m labwright``; test_vocabulary.py), and anything that talks to a
running command: ``subprocess.Popen``, signals sent to it (Ctrl-C), a terminal (pty), a pipe closed under it.

``fork_main`` is the forking core, shared with the bad-input sweep (tests/unit/cli/test_bad_input_sweep.py).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from pathlib import Path

import labwright
from labwright import ui
from labwright.cli import GROUP_HELP, main

#: The console script: its path is the program's ``sys.argv[0]`` (click's "Usage: labwright ...", a lock's holder).
SCRIPT = str(Path(sys.executable).parent / "labwright")
#: The child's exit code when ``main`` raised (its traceback is on stderr) / returned something not an exit code.
RAISED = 98
NOT_A_CODE = 97
#: Where a module a child imported may come from to be imported here as well (not the deploys pyinfra runs, not the
#: testinfra suites, not a user's file).
IMPORTABLE = tuple(f"{os.path.realpath(p)}{os.sep}" for p in {
    *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
    os.path.dirname(labwright.__file__)})
NOT_IMPORTED = ("labwright.deploys", "labwright.verify")


def fork_main(argv: list[str], *, stdin: str | Path, stdout: str | Path, stderr: str | Path, timeout: float,
              cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
              env_changes: Mapping[str, str | None] | None = None, argv0: str | None = None,
              imported: str | Path | None = None) -> int | None:
    """``main(argv)`` in a forked child in its own process group, stdin read from the file ``stdin``, stdout and
    stderr written to the files ``stdout`` and ``stderr``; from ``cwd`` (default: this process's). ``env`` is the
    child's whole environment (default: this process's); ``env_changes`` then sets variables, or removes those
    given None. ``argv0`` given, ``sys.argv`` is ``[argv0, *argv]`` (click names the program after it); ``imported``
    given, the names of the modules ``main`` imported (from IMPORTABLE) are written there, one a line. Returns
    the exit code as ``subprocess`` has it (negative: killed by that signal), or None when the child ran past
    ``timeout`` seconds (it is then killed, with its process group)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code: object = 99
        had = set(sys.modules) if imported is not None else set()
        try:
            os.setpgid(0, 0)
            if cwd is not None:
                os.chdir(cwd)
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
            for key, value in (env_changes or {}).items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            os.dup2(os.open(stdin, os.O_RDONLY), 0)
            os.dup2(os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
            os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115 - as Python's own
            if argv0 is not None:
                sys.argv = [argv0, *argv]
            # what a new process would make from its own environment, not inherit from this one: the rich consoles
            # read COLUMNS, NO_COLOR and the terminal when they are made (an earlier test's 80 columns wrapped a
            # later test's COLUMNS=250 table), and --json sets plain lines for the rest of the process
            ui.remake_consoles()
            ui.plain_lines = False
            signal.signal(signal.SIGINT, signal.default_int_handler)
            code = main(argv)
        except BaseException as exc:  # whatever it is, the parent reports it
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
            code = RAISED
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                if imported is not None:
                    _write_imported(imported, had)
            finally:
                os._exit(code if isinstance(code, int) and 0 <= code < 256 else NOT_A_CODE)
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if ready:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            with contextlib.suppress(ProcessLookupError):
                target()
        os.waitpid(pid, 0)
        return None
    finally:
        os.close(pidfd)


def _write_imported(path: str | Path, had: set[str]) -> None:
    names = []
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if name not in had and isinstance(origin, str) and os.path.realpath(origin).startswith(IMPORTABLE) \
                and not name.startswith(NOT_IMPORTED):
            names.append(name)
    Path(path).write_text("".join(f"{name}\n" for name in names))


def import_modules(names: list[str]) -> None:
    """``names`` imported here, in the order a child imported them; one that fails to import is left out."""
    for name in names:
        if name not in sys.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _import_group(argv: list[str]) -> None:
    """The group module ``argv`` names, imported in this process (each child inherits it); a group that fails to
    import fails in the child, as the command would."""
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    if name in GROUP_HELP:
        with contextlib.suppress(Exception):
            importlib.import_module(f"labwright.cli.{name}")


def run_cli(args: list[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
            input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``labwright ARGS`` (ARGS without "labwright") as ``subprocess.run(["labwright", *args], capture_output=True,
    text=True, env=env, cwd=cwd, input=input, timeout=timeout)`` has it, in a forked child (see the module's
    docstring). Raises ``subprocess.TimeoutExpired`` past ``timeout`` seconds, the child killed."""
    argv = list(args)
    _import_group(argv)
    with tempfile.TemporaryDirectory(prefix="labwright-cli-") as tmp:
        files = Path(tmp)
        stdin = os.devnull
        if input is not None:
            stdin = str(files / "stdin")
            Path(stdin).write_text(input)
        out, err = files / "stdout", files / "stderr"
        modules = files / "modules"
        code = fork_main(argv, stdin=stdin, stdout=out, stderr=err, timeout=timeout, cwd=cwd, env=env, argv0=SCRIPT,
                         imported=modules)
        read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
        stdout, stderr = read(out), read(err)
        import_modules(read(modules).split())
    if code is None:
        raise subprocess.TimeoutExpired(["labwright", *argv], timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(["labwright", *argv], code, stdout, stderr)


class ForkServer:
    """``fork_main`` done by a lean Python process of its own (started on first use, one per test process), for
    callers that fork many children: the bad-input sweep's 1,350 cases.

    Why: forking costs in proportion to the forking process's memory, and a pytest worker that collected the suite
    and ran other tests holds over 200 MB: copying its page tables, the child's copy-on-write faults on a scattered
    heap and tearing it all down at exit cost ~20-30 ms of CPU a case more than forking from a process that imported
    labwright and its command groups alone (~70 MB). The child is the same: forked, in its own process group, with
    the environment (the caller's whole ``os.environ`` at the call, then ``env_changes``), cwd, ``sys.argv``,
    stdin, stdout and stderr ``fork_main`` gives it, killed past ``timeout``; only the process it is forked from
    differs, and that one holds no test's state (a fresh ``labwright`` holds none either). What a child imported is
    imported in the server after it (``imported``), for the next child, as ``run_cli`` does here; the packaged
    wheels matrix is parsed there once (``warm_packaged_matrix``)."""

    def __init__(self, groups: tuple[str, ...] = tuple(GROUP_HELP), *, matrix: bool = True) -> None:
        """``groups``: the command groups the server imports before its first child; ``matrix``: whether it parses
        the packaged wheels matrix before each child (once, while its files are unchanged)."""
        self._proc: subprocess.Popen[str] | None = None
        self._setup = {"groups": list(groups), "matrix": matrix}

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            code = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "  # this process's, tests/ included
                    "from support.cli_child import serve; serve(**json.loads(sys.argv[2]))")
            self._proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(sys.path), json.dumps(self._setup)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, close_fds=True)
        return self._proc

    def fork_main(self, argv: list[str], *, stdin: str | Path, stdout: str | Path, stderr: str | Path,
                  timeout: float, cwd: str | Path | None = None,
                  env_changes: Mapping[str, str | None] | None = None,
                  imported: str | Path | None = None) -> int | None:
        """``fork_main(argv, ...)`` (same arguments, same result) with the child forked by the server."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        request = {"argv": argv, "stdin": str(stdin), "stdout": str(stdout), "stderr": str(stderr),
                   "timeout": timeout, "cwd": str(cwd if cwd is not None else os.getcwd()), "env": dict(os.environ),
                   "env_changes": dict(env_changes or {}), "sys_argv": list(sys.argv),
                   "imported": None if imported is None else str(imported)}
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        # the server answers when the child ended or was killed at ``timeout``; a server that answers nothing
        # for longer than that is stuck, and is stopped
        ready, _, _ = select.select([proc.stdout], [], [], timeout + 60)
        line = proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RuntimeError(f"the fork server for `labwright {' '.join(argv)}` ended or stopped answering")
        code: int | None = json.loads(line)["code"]
        return code

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()  # the server's loop ends at end of input
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def warm_packaged_matrix(stamps: dict[str, object]) -> None:
    """The wheels matrix labwright ships, parsed here (labwright.matrix.load caches it per directory), so that a
    child reading it (matrix resolve/show/check, stack switch, wheelhouse stack: ~0.4 s of CPU a read) has it
    already; parsed again when a file of it changed since (``stamps`` keeps what was seen). A child pointed
    elsewhere (LABWRIGHT_MATRIX_DIR) reads that directory itself; one that cannot be read here is read, and refused,
    by the command, as before."""
    from labwright.matrix import load
    from labwright.paths import packaged_matrix_dir

    with contextlib.suppress(Exception):
        root = packaged_matrix_dir()
        stamp = [(p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(root.glob("*.toml"))]
        if stamps.get(str(root)) != stamp:
            load._load.cache_clear()
            stamps[str(root)] = stamp
        load.load_matrix(root)


def serve(groups: list[str], matrix: bool) -> None:
    """The fork server's loop (see ForkServer): one JSON request a line on stdin, one ``{"code": ...}`` line on
    stdout when its child ended; ends at end of input."""
    requests, answers = sys.stdin, sys.stdout
    for name in groups:  # the sweep's: every group, as its walk of the app imported them in the test process
        with contextlib.suppress(Exception):
            importlib.import_module(f"labwright.cli.{name}")
    stamps: dict[str, object] = {}
    for line in requests:
        request = json.loads(line)
        if matrix:
            warm_packaged_matrix(stamps)
        sys.argv = request["sys_argv"]
        code = fork_main(request["argv"], stdin=request["stdin"], stdout=request["stdout"], stderr=request["stderr"],
                         timeout=request["timeout"], cwd=request["cwd"], env=request["env"],
                         env_changes=request["env_changes"], imported=request["imported"])
        if request["imported"] is not None:
            path = Path(request["imported"])
            import_modules(path.read_text().split() if path.exists() else [])
        answers.write(json.dumps({"code": code}) + "\n")
        answers.flush()
