"""Terminal output shared by the CLI: a step reporter with spinners, tables, and progress for the long steps.

Progress (``progress``, ``run_with_progress``, ``copy_with_progress``) is the one way a step a person waits for
(a build, a venv, a download, an image) says what it is doing: a line on stderr when it starts, lines while it runs
(what the tool says it is at, e.g. ninja's ``[120/287]``, or that it is still running), and a line when it ends with
how long it took. On a terminal the lines in between are one line redrawn in place; anywhere else (a log, a pipe, a
CI job, and under ``--json``) they are plain lines, at most one every ``interval`` seconds, never a carriage return.
``LABWRIGHT_PROGRESS=lines`` forces plain lines, ``LABWRIGHT_PROGRESS=off`` silences progress, and
``LABWRIGHT_PROGRESS_INTERVAL=SECONDS`` sets how often plain lines come (default 10).

The progress part is stdlib only (rich is imported by Reporter, the consoles and ``table`` when first used), so the
code that runs without rich (the stack bundle on a guest) can use it as well.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: Plain lines only (no line redrawn in place), whatever the stream is: the CLI sets it for a command run with
#: ``--json`` (labwright.cli), so a terminal shows the same lines a log would.
plain_lines = False

_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    """``console`` (stderr) and ``stdout``: rich consoles, made on first use so importing this module costs no rich."""
    if name not in ("console", "stdout"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _consoles:
        from rich.console import Console

        _consoles[name] = Console(stderr=name == "console", highlight=False)
    return _consoles[name]


def remake_consoles() -> None:
    """The consoles made again, in place, from this process's environment now (COLUMNS, NO_COLOR, the terminal are
    read when a console is made): for a forked child, whose modules hold the consoles by reference
    (``from labwright.ui import stdout``) but whose environment is its own."""
    for name, made in _consoles.items():
        made.__init__(stderr=name == "console", highlight=False)  # type: ignore[misc]


class Reporter:
    """Prints one line per step; steps show a spinner while they run (long steps stay visible). Not on a terminal,
    a step that runs long says so every ``heartbeat`` seconds (a log shows it is alive, and for how long)."""

    def __init__(self, quiet: bool = False, out: Console | None = None, heartbeat: float = 30.0):
        self.quiet = quiet
        self.out = out if out is not None else __getattr__("console")
        self.heartbeat = heartbeat
        self.changed: list[str] = []

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        started = time.monotonic()
        if self.quiet:
            yield
            return
        if self.out.is_terminal:
            with self.out.status(message):
                yield
        else:
            # Not a terminal (CI logs): say the step has started so a long one is visibly in progress.
            self.out.print(f"… {message}")
            beat = _Heartbeat(self.heartbeat, lambda: self.out.print(
                f"… {message}: still running [{format_duration(time.monotonic() - started)}]"))
            with beat:
                yield
        self.out.print(f"[green]✓[/] {message} [dim]({time.monotonic() - started:.1f}s)[/]")

    def info(self, message: str) -> None:
        if not self.quiet:
            self.out.print(message)

    def change(self, message: str) -> None:
        self.changed.append(message)
        if not self.quiet:
            self.out.print(f"[yellow]+[/] {message}")

    def unchanged(self, message: str) -> None:
        if not self.quiet:
            self.out.print(f"[dim]= {message}[/]")


def table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    return t


def is_interactive() -> bool:
    return sys.stdin.isatty()


# --- progress for the long steps ------------------------------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """``4.2s``, ``5m31s``, ``1h02m``: what a person reads at a glance."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class _Heartbeat:
    """Calls ``beat`` every ``interval`` seconds on a daemon thread until the block ends (never when interval <= 0)."""

    def __init__(self, interval: float, beat: Callable[[], None]):
        self.interval = interval
        self.beat = beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Heartbeat:
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="labwright-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class Progress:
    """One long step's progress on ``stream`` (stderr unless given): see the module docstring.

    ``update(detail)`` says where the step is now (``step 120/287 (41%)``); in plain-lines mode it is printed when
    ``interval`` seconds have passed since the last line (``force=True``: now). A step that says nothing for
    ``interval`` seconds gets a ``still running`` line with the time so far (``heartbeat=False``: none).
    """

    def __init__(self, what: str, *, stream: TextIO | None = None, interval: float | None = None,
                 bar: bool | None = None, quiet: bool = False, heartbeat: bool = True):
        setting = _setting("LABWRIGHT_PROGRESS") or ""
        if interval is None:
            interval = _default_interval()
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet or setting == "off"
        if bar is None:
            bar = not plain_lines and setting != "lines" and _is_terminal(self.stream)
        self.bar = bar
        # On a terminal the one line is redrawn often (its clock ticks); plain lines are at most one per interval.
        self.interval = min(interval, 1.0) if bar else interval
        self.detail = ""
        #: what the step came to, said on its end line (``✓ download x.whl (4.2s): 3.1 MB at 0.7 MB/s``)
        self.result = ""
        self.started = time.monotonic()
        self.elapsed = 0.0
        self._last = self.started
        self._lock = threading.Lock()
        self._heartbeat = _Heartbeat(self.interval if heartbeat else 0.0, self._beat)
        self._drawn = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the reader went away (a closed pipe): progress is not worth failing for
            pass

    def _line(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar:
            width = _columns(self.stream)  # a line wider than the terminal wraps, and \r redraws only its last row
            self._write(f"\r\x1b[K{text if len(text) < width else text[:width - 2] + '…'}")
            self._drawn = True
        else:
            self._write(text + "\n")
        self._last = time.monotonic()

    def _now(self) -> str:
        return f"… {self.what}: {self.detail or 'still running'} [{format_duration(time.monotonic() - self.started)}]"

    def _beat(self) -> None:
        with self._lock:
            if time.monotonic() - self._last >= self.interval * 0.9:
                self._line(self._now())

    def start(self) -> Progress:
        self.started = self._last = time.monotonic()
        with self._lock:
            if not self.quiet:  # its own line, on a terminal too: the redrawn line goes below it
                self._write(f"… {self.what}\n")
        self._heartbeat.__enter__()
        return self

    def update(self, detail: str, *, force: bool = False) -> None:
        with self._lock:
            self.detail = detail
            # a redrawn line at most ten times a second (ninja prints hundreds of lines a second at the end)
            if force or (self.bar and not self._drawn) or \
                    time.monotonic() - self._last >= (0.1 if self.bar else self.interval):
                self._line(self._now())

    def finish(self, ok: bool = True) -> float:
        """Print the last line (``✓ what (5m31s)`` or ``✗ what failed after 12.0s``); the seconds it took."""
        self._heartbeat.__exit__()
        self.elapsed = time.monotonic() - self.started
        with self._lock:
            if self.bar and self._drawn:
                self._write("\r\x1b[K")
            took = format_duration(self.elapsed)
            if not self.quiet:
                result = f": {self.result}" if ok and self.result else ""
                self._write((f"✓ {self.what} ({took}){result}" if ok else f"✗ {self.what} failed after {took}")
                            + "\n")
        return self.elapsed


@contextmanager
def progress(what: str, **options: Any) -> Iterator[Progress]:
    """``with progress("build llama-server") as p: ... p.update("step 3/287")``: start, periodic and end lines
    (options: those of ``Progress``). An exception ends it with the ``failed after`` line and goes on."""
    step = Progress(what, **options).start()
    try:
        yield step
    except BaseException:
        step.finish(ok=False)
        raise
    step.finish()


def _default_interval() -> float:
    """Seconds between plain progress lines: ``LABWRIGHT_PROGRESS_INTERVAL`` (0: every update, no heartbeat), else 10
    (a 6-minute build is ~40 lines in a log). A value that is not a number is ignored: a long build is not worth
    stopping over how often it reports."""
    value = _setting("LABWRIGHT_PROGRESS_INTERVAL")
    return 10.0 if value is None else float(value)


def _setting(name: str) -> Any:
    """A progress variable as labwright.schema.env reads it; junk as unset here (the CLI refused it at its start, and a
    deploy run's progress is not worth stopping over)."""
    from labwright.errors import BadInput
    from labwright.schema.env import read

    try:
        return read(name)
    except BadInput:
        return None


def _columns(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


# What the long-running tools print, turned into a progress detail (None: a line that says nothing about progress).

_STEP = re.compile(r"(?a)^\[\s*(\d+)\s*/\s*(\d+)\s*\]")  # ninja: [120/287] Building CXX object ...
_PERCENT = re.compile(r"(?a)^\[\s*(\d{1,3})%\]")  # cmake's Makefiles: [ 42%] Building CXX object ...


def build_step(line: str) -> str | None:
    """cmake/ninja: ``[120/287] ...`` -> ``step 120/287 (41%)``; ``[ 42%] ...`` -> ``42%``; cmake's configure
    lines (``-- Detecting CXX compiler``) -> their text."""
    line = line.strip()
    match = _STEP.match(line)
    if match:
        done, total = int(match[1]), int(match[2])
        return f"step {done}/{total} ({100 * done // max(total, 1)}%)"
    match = _PERCENT.match(line)
    if match:
        return f"{int(match[1])}%"
    if line.startswith("-- "):
        return line[3:][:100]
    return None


_INSTALL_WORDS = ("Collecting ", "Downloading ", "Building wheel", "Installing collected packages", "Successfully ",
                  "Resolved ", "Prepared ", "Installed ", "Downloaded ", "Get:", "Unpacking ", "Setting up ",
                  "Fetched ")


def install_step(line: str) -> str | None:
    """pip, uv, apt-get and debootstrap: the lines that say which package they are at (``Collecting torch==2.8.0``,
    ``Setting up cmake ...``, debootstrap's ``I: Retrieving libc6 2.36-9``) -> the line, shortened."""
    line = line.strip()
    if line.startswith("I: "):  # debootstrap's progress lines (W: and E: are its warnings and errors)
        line = line[3:]
        return line if len(line) <= 100 else line[:99] + "…"
    if line.startswith(_INSTALL_WORDS):
        return line if len(line) <= 100 else line[:99] + "…"
    return None


def run_with_progress(argv: Sequence[str], what: str, *, parse: Callable[[str], str | None] | None = build_step,
                      log: Path | None = None, cwd: str | Path | None = None, env: dict[str, str] | None = None,
                      keep: int = 40, timeout: float | None = None,
                      failed: Callable[[int, list[str]], None] | None = None, **options: Any) -> list[str]:
    """Run ``argv`` with its output (stdout and stderr together) read line by line: what ``parse`` makes of a line
    is the progress detail, every line goes to ``log`` when given (the full output, for when it fails), and the last
    ``keep`` lines are returned. A non-zero exit is OperationFailed naming ``what``, the exit code, the last line and
    the log; the last lines are shown on the progress stream first. A ``parse`` with a ``summary()`` method
    (InstallProgress) gives the end line its result. ``failed(code, tail)`` sees a non-zero exit first
    and may raise an error of its own (the caller's wording, its own exception type). ``timeout``: seconds after
    which the tool and what it started are killed (OperationFailed ``still running after ...``)."""
    from labwright.errors import OperationFailed

    tail: deque[str] = deque(maxlen=keep)
    handle = log.open("w", encoding="utf-8") if log is not None else None
    try:
        with progress(what, **options) as step:
            def spawn() -> subprocess.Popen[str]:
                # its own process group: an interrupted step stops the tool and everything it started (cmake's
                # ninja and compilers), not only the tool
                try:
                    return subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                            errors="replace", bufsize=1, cwd=cwd, env=env, start_new_session=True)
                except OSError as exc:
                    raise OperationFailed(f"{what}: cannot run {argv[0]} ({exc.strerror or exc})") from None

            expired = threading.Event()
            with _stopped_on_terminate(spawn) as proc:
                def expire() -> None:
                    expired.set()
                    _kill_group(proc)

                watchdog = threading.Timer(timeout, expire) if timeout is not None else None
                try:
                    if watchdog is not None:
                        watchdog.daemon = True
                        watchdog.start()
                    assert proc.stdout is not None
                    for line in proc.stdout:
                        if handle is not None:
                            handle.write(line)
                        line = line.rstrip("\n")
                        tail.append(line)
                        detail = parse(line) if parse is not None else None
                        if detail:
                            step.update(detail)
                    code = proc.wait()
                except BaseException:
                    _stop_group(proc)
                    raise
                finally:
                    if watchdog is not None:
                        watchdog.cancel()
            if expired.is_set():
                raise OperationFailed(f"{what}: still running after {format_duration(timeout or 0)}; stopped it")
            if code != 0:
                if not step.quiet:
                    step._write("".join(f"  | {line}\n" for line in list(tail)[-15:]))
                if failed is not None:
                    failed(code, list(tail))
                last = next((line.strip() for line in reversed(tail) if line.strip()), "no output")
                where = f"; the whole output is in {log}" if log is not None else ""
                raise OperationFailed(f"{what} failed (exit {code}): {last}{where}")
            summary = getattr(parse, "summary", None)  # a stateful parse (InstallProgress) says what it came to
            if callable(summary):
                step.result = summary()
    finally:
        if handle is not None:
            handle.close()
    return list(tail)


_in_flight: set[int] = set()  # the process groups of the steps now running (run_with_progress)
_spawning: list[int] = []  # one entry per step whose tool is being started: its group is not known yet
_pending: list[int] = []  # a SIGTERM that came while a tool was being started


@contextmanager
def _stopped_on_terminate(spawn: Callable[[], subprocess.Popen[str]]) -> Iterator[subprocess.Popen[str]]:
    """Start the step's tool (``spawn``) so that SIGTERM (a timeout, systemd, ``kill``) stops its process group
    before the process ends. Python's default for SIGTERM ends the process at once, and the tool, started in a
    session of its own, went on alone (a cmake build orphaned for minutes, sweep at 6d041d3). The handler kills the
    groups in flight itself, then ends the process as the default would (exit by SIGTERM): no exception has to find
    its way out of pyinfra's greenlets. It is in place before the tool starts, and a SIGTERM that comes while the
    tool is being started waits until its group is known (the suite's run at 94dc8bc saw the window: the signal came
    after the tool had started, before the handler was set, and the tool ran on). Only where SIGTERM has its default
    handler (or this one), and only where a handler can be set (the main thread)."""
    import signal

    def terminate(signum: int, frame: object) -> None:
        if _spawning:  # a tool is being started: end as soon as its group can be killed with the others
            _pending.append(signum)
            return
        for group in list(_in_flight):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(ValueError):  # not the main thread: the signal sent again finds this handler there
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    current = signal.getsignal(signal.SIGTERM)
    ours = current == signal.SIG_DFL or getattr(current, "__name__", "") == "terminate"
    try:
        if ours:
            signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread
        ours = False
    proc: subprocess.Popen[str] | None = None
    try:
        _spawning.append(1)
        try:
            proc = spawn()
            _in_flight.add(proc.pid)
        finally:
            _spawning.pop()
            if _pending and not _spawning:
                terminate(_pending.pop(), None)  # kills every group in flight, this one too, and ends the process
        yield proc
    finally:
        if proc is not None:
            _in_flight.discard(proc.pid)
        if ours and not _in_flight and not _spawning:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc``'s process group (the tool and what it started), then reap ``proc``."""
    _kill_group(proc)
    proc.wait()


def megabytes(count: float) -> str:
    """``3.1 MB``: sizes in progress lines (decimal megabytes, as pip and PyPI give them)."""
    return f"{count / 1e6:.1f} MB"


def rate(count: float, seconds: float) -> str:
    """``7.8 MB/s``: how fast ``count`` bytes came in ``seconds``."""
    return f"{count / 1e6 / max(seconds, 1e-3):.1f} MB/s"


def copy_with_progress(source: IO[bytes], target: IO[bytes], step: Progress, total: int | None = None,
                       chunk: int = 1 << 20, each: Callable[[bytes], object] | None = None) -> int:
    """Copy ``source`` to ``target`` in chunks, the progress detail saying how much of ``total`` bytes (when known)
    has come and how fast; ``each`` sees every chunk (``digest.update``, to hash what is written as it comes); the
    end line says the size and the rate. The number of bytes copied."""
    done = 0
    began = time.monotonic()
    while True:
        block = source.read(chunk)
        if not block:
            step.result = f"{megabytes(done)} at {rate(done, time.monotonic() - began)}"
            return done
        if each is not None:
            each(block)
        target.write(block)
        done += len(block)
        speed = rate(done, time.monotonic() - began)
        if total:
            step.update(f"{done / 1e6:.1f} of {total / 1e6:.1f} MB ({100 * done // total}%), {speed}")
        else:
            step.update(f"{megabytes(done)}, {speed}")


class InstallProgress:
    """A stateful ``parse`` for ``run_with_progress`` over pip, uv or ``pip download``: which package of how many
    it is at, what it is downloading (with pip's ``--progress-bar raw``: bytes of the total and the rate), and the
    megabytes downloaded so far. ``summary()`` is the end line's result (``7 packages, 912.4 MB downloaded``).

    What it reads (pip 24.1+ and uv 0.4+ with their output not a terminal): pip's ``Collecting X`` / ``Processing
    X`` (one per package), ``Downloading X (888.1 MB)``, ``Progress N of M`` (``--progress-bar raw``,
    pip/_internal/cli/progress_bars.py), ``Installing collected packages: a, b``; uv's ``Downloading torch
    (845.3MiB)``, ``Resolved N packages``, ``Prepared N packages``, ``Installed N packages``; anything else
    ``install_step`` knows (apt, debootstrap)."""

    _SIZE = re.compile(r"(?a)\(([\d.]+)\s*(k|M|G|Ki|Mi|Gi)?i?B\)\s*$")
    _UNIT = {None: 1, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024, "Mi": 1 << 20, "Gi": 1 << 30}
    _COUNT = re.compile(r"(?a)^(Resolved|Prepared|Installed|Downloaded|Uninstalled) (\d+) packages?")

    def __init__(self, total: int | None = None):
        self.total = total
        self.packages = 0
        self.current = ""
        self.downloaded = 0  # bytes of the downloads that finished
        self.download_bytes = 0  # of the one under way
        self.download_total = 0
        self._download_began = 0.0
        self.installed: int | None = None

    def _package(self) -> str:
        if self.total:
            return f"package {min(self.packages, self.total)} of {self.total}"
        return f"package {self.packages}"

    def _finish_download(self) -> None:
        self.downloaded += self.download_bytes
        self.download_bytes = self.download_total = 0

    def __call__(self, line: str) -> str | None:
        text = line.strip()
        if text.startswith(("Collecting ", "Processing ")):
            self._finish_download()
            self.packages += 1
            # "Processing /w/x.whl (from -r /e/requirements.txt (line 1))": the file's name; "Collecting sympy (from
            # torch==2.8.0)": which package wants it
            head, _, wanted_by = text.split(" ", 1)[1].partition(" (from ")
            self.current = head.rsplit("/", 1)[-1] + ("" if not wanted_by or wanted_by.startswith("-r ")
                                                      else f" (from {wanted_by}")
            self.current = self.current[:80]
            return f"{self._package()}: {self.current}"
        if text.startswith("Progress ") and " of " in text:
            try:
                done, total = (int(part) for part in text[len("Progress "):].split(" of ", 1))
            except ValueError:
                return None
            if done == 0 or not self._download_began:
                self._download_began = time.monotonic()
            self.download_bytes, self.download_total = done, total
            of = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB ({100 * done // total}%)" if total else megabytes(done)
            return (f"{self._package()}: {self.current}: {of}, {rate(done, time.monotonic() - self._download_began)}"
                    f"; {megabytes(self.downloaded + done)} downloaded")
        if text.startswith("Downloading "):
            self._finish_download()
            self._download_began = time.monotonic()
            size = self._SIZE.search(text)
            if size:  # announced: counted as downloaded once the next package or download starts
                self.download_bytes = int(float(size[1]) * self._UNIT.get(size[2], 1))
            name = text[len("Downloading "):].rsplit("/", 1)[-1][:90]
            return f"{self._package() + ': ' if self.packages else ''}downloading {name}"
        if text.startswith("Installing collected packages:"):
            self._finish_download()
            names = [name.strip() for name in text.split(":", 1)[1].split(",") if name.strip()]
            self.installed = len(names)
            listed = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            return f"installing {len(names)} package(s): {listed}"
        count = self._COUNT.match(text)
        if count:
            if count[1] == "Installed":
                self.installed = int(count[2])
            return text[:100]
        return install_step(text)

    def summary(self) -> str:
        self._finish_download()
        parts = []
        if self.installed is not None:
            parts.append(f"{self.installed} package(s) installed")
        elif self.packages:
            parts.append(f"{self.packages} package(s)")
        if self.downloaded:
            parts.append(f"{megabytes(self.downloaded)} downloaded")
        return ", ".join(parts)


def pip_progress_args() -> list[str]:
    """``--progress-bar raw`` when the pip this process imports (the one beside this interpreter, or the stack
    bundle's) prints ``Progress N of M`` lines; nothing for an older pip or none."""
    try:
        import pip
    except ImportError:
        return []
    return ["--progress-bar", "raw"] if pip_has_raw_progress(getattr(pip, "__version__", None)) else []


def pip_has_raw_progress(version: str | None) -> bool:
    """pip 24.1 and later print ``Progress N of M`` lines with ``--progress-bar raw`` (an error before)."""
    if not version:
        return False
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (24, 1)
