"""Progress on the long steps (labwright.ui.progress): real subprocesses printing what cmake, ninja and pip print,
a real cmake + ninja build through labwright.llamacpp.build, a real download over HTTP on 127.0.0.1, and a real
pseudo-terminal for the line redrawn in place (never into a log, never under --json)."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import select
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import typer

from labwright import ui
from labwright.errors import OperationFailed
from labwright.llamacpp import build as llama_build
from labwright.llamacpp.build import LlamaSource
from labwright.testing.waiting import wait_for

#: A child that prints what ninja prints when its output is not a terminal (one [N/M] line per edge), with a cmake
#: configure line first.
NINJA_LIKE = ("import sys\n"
              "print('-- Configuring done', flush=True)\n"
              "for k in range(1, 5):\n"
              "    print(f'[{k}/4] Building CXX object src/f{k}.cpp.o', flush=True)\n"
              "sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)\n")


def child(*args: str) -> list[str]:
    return [sys.executable, "-c", NINJA_LIKE, *args]


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    monkeypatch.delenv("LABWRIGHT_PROGRESS", raising=False)
    monkeypatch.delenv("LABWRIGHT_PROGRESS_INTERVAL", raising=False)
    monkeypatch.setattr(ui, "plain_lines", False)


@pytest.mark.parametrize("line, detail", [
    ("[120/287] Building CXX object tools/server/CMakeFiles/server.cpp.o", "step 120/287 (41%)"),
    ("[ 42%] Building CXX object ggml/src/ggml.c.o", "42%"),
    ("[100%] Linking CXX executable bin/llama-server", "100%"),
    ("-- Detecting CXX compiler ABI info", "Detecting CXX compiler ABI info"),
    ("/usr/bin/c++ -O3 -c x.cpp", None),
    ("", None),
])
def test_build_step_reads_cmake_and_ninja(line, detail):
    assert ui.build_step(line) == detail


@pytest.mark.parametrize("line, detail", [
    ("Collecting torch==2.8.0", "Collecting torch==2.8.0"),
    ("  Downloading torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl (888.1 MB)",
     "Downloading torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl (888.1 MB)"),
    ("Setting up cmake (3.25.1-1) ...", "Setting up cmake (3.25.1-1) ..."),
    ("I: Retrieving libc6 2.36-9+deb12u10", "Retrieving libc6 2.36-9+deb12u10"),
    ("W: Cannot check Release signature", None),
    ("Requirement already satisfied: numpy", None),
])
def test_install_step_reads_pip_uv_and_apt(line, detail):
    assert ui.install_step(line) == detail


@pytest.mark.parametrize("seconds, text", [(4.21, "4.2s"), (59.9, "59.9s"), (331, "5m31s"), (3725, "1h02m")])
def test_durations_read_at_a_glance(seconds, text):
    assert ui.format_duration(seconds) == text


def test_every_step_of_a_real_subprocess_is_a_line_with_the_time_so_far(tmp_path):
    stream = io.StringIO()
    log = tmp_path / "build.log"
    tail = ui.run_with_progress(child(), "build demo", log=log, stream=stream, interval=0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "… build demo"
    steps = [line for line in lines if line.startswith("… build demo: ")]
    assert [line.split(": ", 1)[1].split(" [")[0] for line in steps] == [
        "Configuring done", "step 1/4 (25%)", "step 2/4 (50%)", "step 3/4 (75%)", "step 4/4 (100%)"]
    assert all(line.endswith("s]") for line in steps), steps  # each says how long the step has run so far
    assert lines[-1].startswith("✓ build demo (") and lines[-1].endswith("s)")
    assert "\r" not in stream.getvalue()  # not a terminal: no line redrawn in place
    assert log.read_text().splitlines() == tail == ["-- Configuring done"] + [
        f"[{k}/4] Building CXX object src/f{k}.cpp.o" for k in range(1, 5)]


def test_plain_lines_come_at_most_once_per_interval():
    stream = io.StringIO()
    ui.run_with_progress(child(), "build demo", stream=stream, interval=3600)
    lines = stream.getvalue().splitlines()
    # the four steps come within a second of the start: none of them is printed, the start and the end are
    assert len(lines) == 2 and lines[0] == "… build demo" and lines[1].startswith("✓ build demo ("), lines


def test_a_failed_step_names_what_the_exit_code_the_last_line_and_the_log(tmp_path):
    stream = io.StringIO()
    log = tmp_path / "build.log"
    with pytest.raises(OperationFailed) as failed:
        ui.run_with_progress(child("3"), "build demo", log=log, stream=stream)
    message = str(failed.value)
    assert message.startswith("build demo failed (exit 3): [4/4] Building CXX object src/f4.cpp.o")
    assert str(log) in message and "\n" not in message
    out = stream.getvalue()
    assert "  | [4/4] Building CXX object src/f4.cpp.o\n" in out  # the last lines, for the person reading
    assert out.splitlines()[-1].startswith("✗ build demo failed after ")


def test_a_command_that_cannot_start_is_one_line():
    stream = io.StringIO()
    with pytest.raises(OperationFailed, match=r"^build demo: cannot run /nonexistent/cmake \("):
        ui.run_with_progress(["/nonexistent/cmake"], "build demo", stream=stream)
    assert stream.getvalue().splitlines()[-1].startswith("✗ build demo failed after ")


def test_a_silent_step_says_it_is_still_running():
    stream = io.StringIO()
    with ui.progress("import image", stream=stream, interval=0.05, bar=False):
        wait_for("a 'still running' line from the heartbeat",
                 lambda: "… import image: still running [" in stream.getvalue(), timeout=60)
    assert stream.getvalue().splitlines()[-1].startswith("✓ import image (")


def test_an_exception_ends_the_step_with_failed_after_and_goes_on():
    stream = io.StringIO()
    with pytest.raises(KeyError), ui.progress("launch lw-node1", stream=stream):
        raise KeyError("x")
    assert stream.getvalue().splitlines() == ["… launch lw-node1", stream.getvalue().splitlines()[-1]]
    assert stream.getvalue().splitlines()[-1].startswith("✗ launch lw-node1 failed after ")


def read_all(master: int) -> str:
    chunks = []
    while select.select([master], [], [], 0)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode()


@pytest.fixture
def terminal():
    """A real pseudo-terminal: (the stream progress writes to, a function reading what the terminal received)."""
    master, slave = os.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    yield stream, lambda: read_all(master)
    stream.close()
    os.close(master)


def test_on_a_terminal_the_step_is_one_line_redrawn_in_place(terminal):
    stream, received = terminal
    ui.run_with_progress(child(), "build demo", stream=stream)
    out = received()
    assert out.startswith("… build demo\r\n")  # the pty turns \n into \r\n
    assert "\r\x1b[K… build demo: " in out  # the redrawn line
    assert out.endswith("\r\x1b[K✓ build demo (" + out.rsplit("✓ build demo (", 1)[1])


@pytest.mark.parametrize("how", ["plain_lines", "LABWRIGHT_PROGRESS=lines"])
def test_plain_lines_even_on_a_terminal_when_asked(terminal, monkeypatch, how):
    stream, received = terminal
    if how == "plain_lines":
        monkeypatch.setattr(ui, "plain_lines", True)
    else:
        monkeypatch.setenv("LABWRIGHT_PROGRESS", "lines")
    ui.run_with_progress(child(), "build demo", stream=stream, interval=0)
    out = received()
    assert "\x1b[K" not in out and "… build demo: step 4/4 (100%)" in out and "✓ build demo (" in out


def test_labwright_progress_off_silences_it():
    stream = io.StringIO()
    os.environ["LABWRIGHT_PROGRESS"] = "off"
    try:
        ui.run_with_progress(child(), "build demo", stream=stream, interval=0)
    finally:
        del os.environ["LABWRIGHT_PROGRESS"]
    assert stream.getvalue() == ""


@pytest.mark.parametrize("value, interval", [("0", 0.0), ("30", 30.0), ("soon", 10.0), ("-1", 10.0), ("inf", 10.0)])
def test_the_interval_comes_from_the_environment(monkeypatch, value, interval):
    monkeypatch.setenv("LABWRIGHT_PROGRESS_INTERVAL", value)
    assert ui.Progress("x", bar=False).interval == interval


def test_under_json_a_terminal_gets_plain_lines_and_stdout_only_the_report(terminal, capsys):
    """The CLI's --json: the command's progress on the terminal is plain lines (and the setting ends with it)."""
    from labwright.cli import app, main

    stream, received = terminal

    @app.command("zz-progress-probe", hidden=True)
    def probe(json_out: bool = typer.Option(False, "--json")) -> None:
        ui.run_with_progress(child(), "build demo", stream=stream, interval=0)
        print('{"ok": true}' if json_out else "ok")

    assert main(["zz-progress-probe", "--json"]) == 0
    assert capsys.readouterr().out == '{"ok": true}\n'
    out = received()
    assert "\x1b[K" not in out and "… build demo: step 4/4 (100%)" in out
    assert ui.plain_lines is False
    assert main(["zz-progress-probe"]) == 0
    assert "\r\x1b[K… build demo: " in received()


TINY_PROJECT = """cmake_minimum_required(VERSION 3.13)
project(tiny C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(parts STATIC a.c b.c)
add_executable(llama-server main.c)
target_link_libraries(llama-server parts)
"""


def test_a_real_cmake_and_ninja_build_reports_configure_and_every_step(tmp_path, capsys):
    for tool in ("cmake", "ninja", "cc"):
        assert shutil.which(tool), f"{tool} is missing: scripts/setup installs the llama-server build tools"
    source = tmp_path / "tiny"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(TINY_PROJECT)
    (source / "a.c").write_text("int a(void) { return 40; }\n")
    (source / "b.c").write_text("int b(void) { return 2; }\n")
    (source / "main.c").write_text('#include <stdio.h>\nint a(void); int b(void);\n'
                                   'int main(void) { printf("%d\\n", a() + b()); return 0; }\n')
    os.environ["LABWRIGHT_PROGRESS_INTERVAL"] = "0"
    try:
        binary = llama_build.compile_target(source, tmp_path / "build", "llama-server", 2, tmp_path / "build.log")
    finally:
        del os.environ["LABWRIGHT_PROGRESS_INTERVAL"]
    assert subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout == "42\n"
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "… configure tiny (cmake)"
    assert any(line.startswith("… configure tiny (cmake): Build files have been written to") for line in err), err
    assert any(line.startswith("✓ configure tiny (cmake) (") for line in err), err
    building = "… build llama-server (2 jobs): "
    steps = [line.split(": ", 1)[1].split(" [")[0] for line in err if line.startswith(building)]
    assert steps and steps[-1].startswith("step ") and steps[-1].endswith("(100%)"), err
    total = steps[-1].split("/")[1].split(" ")[0]
    assert int(total) >= 4, steps  # 3 compiles, an archive, a link
    assert err[-1].startswith("✓ build llama-server (2 jobs) (")
    assert "Linking C executable bin/llama-server" in (tmp_path / "build.log").read_text()
    assert "Build files have been written to" in (tmp_path / "build.configure.log").read_text()


def test_the_sdist_download_reports_megabytes_of_the_total(tmp_path, capsys, monkeypatch):
    payload = os.urandom(3 * (1 << 20) + 123)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("LABWRIGHT_PROGRESS_INTERVAL", "0")
        source = LlamaSource(version="0", filename="x-0.tar.gz", sha256=hashlib.sha256(payload).hexdigest())
        url = f"http://127.0.0.1:{server.server_address[1]}/x-0.tar.gz"
        got = llama_build.download_sdist(tmp_path, source, url=url)
    finally:
        server.shutdown()
        server.server_close()
    assert got.read_bytes() == payload
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "… download x-0.tar.gz"
    assert "… download x-0.tar.gz: 1.0 of 3.1 MB (33%), " in "\n".join(err), err
    assert any(line.startswith("… download x-0.tar.gz: 3.1 of 3.1 MB (100%), ") for line in err), err
    assert err[-1].startswith("✓ download x-0.tar.gz (")


def test_progress_costs_no_rich_at_import():
    code = "import sys, labwright.ui; print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "[]"


def test_reporter_steps_are_unchanged_and_say_when_a_long_one_is_still_running():
    from rich.console import Console

    out = io.StringIO()
    reporter = ui.Reporter(out=Console(file=out, force_terminal=False, width=200), heartbeat=0.05)
    with reporter.step("build image lw-debian"):
        wait_for("a 'still running' line from the reporter",
                 lambda: "… build image lw-debian: still running [" in out.getvalue(), timeout=60)
    lines = out.getvalue().splitlines()
    assert lines[0] == "… build image lw-debian"
    assert lines[-1].startswith("✓ build image lw-debian (") and lines[-1].endswith("s)")


def test_the_build_module_runs_no_subprocess_of_its_own():
    # every long step of the llama-server build goes through the one progress helper
    text = Path(llama_build.__file__).read_text()
    assert "subprocess" not in text and "shutil.copyfileobj" not in text


def test_a_copy_hashes_every_chunk_it_writes():
    payload = os.urandom((1 << 20) * 2 + 7)
    digest = hashlib.sha256()
    target = io.BytesIO()
    stream = io.StringIO()
    with ui.progress("download w.whl", stream=stream, interval=0) as step:
        copied = ui.copy_with_progress(io.BytesIO(payload), target, step, each=digest.update)
    assert copied == len(payload) and target.getvalue() == payload
    assert digest.hexdigest() == hashlib.sha256(payload).hexdigest()
    assert "… download w.whl: 2.1 MB, " in stream.getvalue()  # no total known: how much has come, and the rate


def test_an_interrupted_step_stops_the_tool_and_what_it_started(tmp_path):
    """Ctrl-C in the middle of a build: cmake's ninja and compilers must not go on compiling, orphaned."""
    script = ("import subprocess, sys\n"
              "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              "print(f'pid {grandchild.pid}', flush=True)\n"
              "grandchild.wait()\n")
    seen: list[int] = []

    def parse(line: str) -> str | None:
        if line.startswith("pid "):
            seen.append(int(line.split()[1]))
            raise KeyboardInterrupt  # what a Ctrl-C raises in the loop reading the tool's output
        return None

    stream = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        ui.run_with_progress([sys.executable, "-c", script], "build demo", parse=parse, stream=stream)
    assert stream.getvalue().splitlines()[-1].startswith("✗ build demo failed after ")

    def gone() -> bool:
        try:
            state = Path(f"/proc/{seen[0]}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state in ("Z", "X")  # killed, waiting for its new parent to reap it

    wait_for(f"the grandchild {seen[0]} to be killed with the step", gone, timeout=60)


@pytest.mark.parametrize("runner", ["python", "pyinfra"])
def test_sigterm_during_a_step_stops_the_tool_and_what_it_started(tmp_path, runner):
    """SIGTERM (a timeout, systemd, kill) to labwright or to a pyinfra run in the middle of a build: Python's default
    ended the process at once and the tool, in a session of its own, went on compiling alone (sweep at 6d041d3).
    Both runners for real: a plain Python process, and pyinfra's CLI (gevent; the deploy prepares in a greenlet that
    is not the main thread)."""
    pidfile = tmp_path / "pids"
    step = (f"from labwright.ui import run_with_progress\n"
            f"run_with_progress(['sh', '-c', 'sleep 600 & echo $$ $! > {pidfile}; wait'], 'build demo')\n")
    if runner == "python":
        argv = [sys.executable, "-c", step]
    else:
        deploy = tmp_path / "deploy.py"
        deploy.write_text(step)
        argv = [str(Path(sys.executable).with_name("pyinfra")), "-y", "@local", str(deploy)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        wait_for("the step's tool to start", lambda: pidfile.is_file() and len(pidfile.read_text().split()) == 2,
                 timeout=120)
        proc.terminate()
        assert proc.wait(timeout=60) == -15, proc.stderr.read() if proc.stderr else ""  # ended as SIGTERM ends it
    finally:
        proc.kill()
        proc.wait()

    for pid in map(int, pidfile.read_text().split()):  # the tool (sh) and what it started (sleep)
        wait_for(f"{pid} to be killed with the step", lambda pid=pid: _gone(pid), timeout=60)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


# Popen for the script below: the real one, then SIGTERM to this process once the tool has started and before
# run_with_progress has the Popen object back (the window the suite's run at 94dc8bc hit under load)
LATE_SIGTERM = """import os, signal, subprocess, sys
real = subprocess.Popen
PIDFILE = sys.argv[1]

class SignalledWhileStarting(real):
    def __init__(self, *args, **kwargs):
        if sys.argv[2] == "fails":  # the tool cannot be started (a missing program), and the signal came first
            os.kill(os.getpid(), signal.SIGTERM)
            raise OSError(2, "No such file or directory")
        super().__init__(*args, **kwargs)
        with open(PIDFILE + ".fifo") as fifo:  # the tool writes its pids here once it runs
            open(PIDFILE, "w").write(fifo.read())
        os.kill(os.getpid(), signal.SIGTERM)

subprocess.Popen = SignalledWhileStarting
from labwright.ui import run_with_progress
run_with_progress(["sh", "-c", "sleep 600 & echo $$ $! > " + PIDFILE + ".fifo; wait"], "build demo")
"""


@pytest.mark.parametrize("spawn", ["starts", "fails"])
def test_sigterm_while_the_tool_is_being_started_still_stops_it(tmp_path, spawn):
    """The signal can come after the tool started and before its group is known to the handler: it waits until the
    group is known, then the tool and what it started are killed and the process ends by SIGTERM (before the fix the
    handler was set after the tool started, and a SIGTERM in between ended labwright and left the tool running). A
    tool that cannot be started while the signal is pending: the process still ends by SIGTERM."""
    pidfile = tmp_path / "pids"
    os.mkfifo(f"{pidfile}.fifo")
    proc = subprocess.run([sys.executable, "-c", LATE_SIGTERM, str(pidfile), spawn], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == -15, proc.stderr[-2000:]  # ended as SIGTERM ends it, not by an error
    if spawn == "starts":
        pids = list(map(int, pidfile.read_text().split()))
        assert len(pids) == 2
        for pid in pids:  # the tool (sh) and what it started (sleep)
            wait_for(f"{pid} to be killed with the step", lambda pid=pid: _gone(pid), timeout=60)


def test_after_a_step_sigterm_has_its_default_handler_again():
    import signal

    ui.run_with_progress([sys.executable, "-c", "print('done')"], "short step", stream=io.StringIO())
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
