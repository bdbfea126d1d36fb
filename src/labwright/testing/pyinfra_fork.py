"""pyinfra runs for tests, forked from a process that has pyinfra imported already (a fork server).

A ``pyinfra`` process spends about a second of CPU before it reads its first argument (measured 2026-11-29 on the
2-core test machine, ``python -X importtime``): gevent's ``monkey.patch_all()`` alone scans every installed
distribution's entry points 25 times (``gevent/events.py`` ``notify_and_call_entry_points``, gevent 26.9), then
pyinfra's API and CLI. The suite runs pyinfra about a thousand times. :func:`run` runs the same pyinfra, same
code, same argv, environment, working directory, priority and standard streams, but in a child forked from a
server that made those imports once (one server per test process and interpreter-start environment), so each run
pays only for its own work. What differs from a spawned process is only what cannot matter to pyinfra: its parent
is the server's helper, and ``/proc/PID/cmdline`` shows the server's. Anything :func:`run` cannot serve that way
(another program, a keyword it does not know) is handed to :func:`subprocess.run` unchanged.

The server (``python pyinfra_fork.py SOCKET BIN``) saves the stdlib's ``fork``, ``waitpid`` and ``select`` before
pyinfra's import patches them, then for each connection: receives the request (JSON) and the three standard streams
(``SCM_RIGHTS``), forks a helper that forks the run, sends its pid, waits for it and sends its wait status.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from labwright.textio import loads_json

#: Variables read while an interpreter starts (or while gevent and pyinfra import): a run whose environment differs
#: from a server's in these gets a server of its own.
STARTUP_PREFIXES = ("PYTHON", "LC_", "GEVENT", "PYINFRA")
STARTUP_NAMES = ("LANG", "LANGUAGE")
#: subprocess.run keywords :func:`run` serves itself; any other sends the call to subprocess.run.
SERVED = {"cwd", "env", "timeout", "capture_output", "text", "input", "stdout", "stderr", "stdin", "check",
          "universal_newlines", "start_new_session", "encoding", "errors"}
DISABLE = "LABWRIGHT_TEST_PYINFRA_SPAWN"  # set to 1: every run spawned as before (to compare, or to rule this out)

_servers: dict[tuple, _Server] = {}
_lock = threading.Lock()


def startup_key(env: Mapping[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES))


class _Server:
    def __init__(self, pyinfra: Path, env: Mapping[str, str]) -> None:
        self.owner = os.getpid()  # a forked test child shares this server but must not end it
        self.dir = tempfile.mkdtemp(prefix="lw-pyinfra-fork-")
        self.path = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen([str(pyinfra.with_name("python")), __file__, self.path, str(pyinfra.parent)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env),
                                     start_new_session=True)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()  # the server's one line once pyinfra is imported and it listens
        if ready.strip() != b"ready":
            self.proc.kill()
            raise RuntimeError(f"pyinfra fork server did not start: {ready!r}")

    def close(self) -> None:
        if os.getpid() != self.owner:
            return
        if self.proc.stdin:
            self.proc.stdin.close()  # the server ends at EOF on its stdin (and if this process dies)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@atexit.register
def _close_all() -> None:
    for server in list(_servers.values()):
        server.close()
    _servers.clear()


def _server_for(pyinfra: Path, env: Mapping[str, str]) -> _Server:
    key = (str(pyinfra), startup_key(env))
    with _lock:
        server = _servers.get(key)
        if server is None or server.proc.poll() is not None:
            server = _servers[key] = _Server(pyinfra, env)
        return server


def _this_pyinfra(cmd: Sequence[Any], env: Mapping[str, str]) -> Path | None:
    """This venv's ``pyinfra`` when ``cmd`` runs it (by its path, or by name through ``env``'s PATH), else None."""
    if isinstance(cmd, (str, bytes)) or not cmd or not isinstance(cmd[0], (str, os.PathLike)):
        return None
    first = os.fspath(cmd[0])
    if os.path.basename(first) != "pyinfra":
        return None
    if os.sep not in first:
        found = shutil.which(first, path=env.get("PATH", os.defpath))
        if found is None:
            return None
        first = found
    mine = Path(sys.executable).parent / "pyinfra"
    return mine if os.path.abspath(first) == str(mine) and mine.is_file() else None


def run(cmd: Sequence[Any], **kwargs: Any) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` for ``pyinfra ...`` (this venv's), from the fork server; anything else as
    subprocess.run itself runs it."""
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    pyinfra = _this_pyinfra(cmd, env)
    if pyinfra is None or set(kwargs) - SERVED or os.environ.get(DISABLE) == "1":
        return _spawn(cmd, **kwargs)
    try:
        server = _server_for(pyinfra, env)
    except (OSError, RuntimeError):
        return _spawn(cmd, **kwargs)
    return _Call(server, cmd, [str(pyinfra), *(os.fspath(c) for c in cmd[1:])], env, kwargs).result()


#: subprocess.run itself (kept before any test plugin routes subprocess.run here)
_spawn = subprocess.run


class _Call:
    def __init__(self, server: _Server, cmd: Any, argv: list[str], env: dict[str, str], kwargs: dict[str, Any]) -> None:
        self.server, self.cmd, self.argv, self.env, self.kw = server, cmd, argv, env, kwargs
        self.text = bool(kwargs.get("text") or kwargs.get("universal_newlines") or kwargs.get("encoding")
                         or kwargs.get("errors"))

    def _stream(self, which: str, default_fd: int, opened: list[int], readers: dict[int, str]) -> int:
        spec = self.kw.get(which)
        if which != "stdin" and self.kw.get("capture_output"):
            spec = subprocess.PIPE
        if which == "stdin" and self.kw.get("input") is not None:
            spec = subprocess.PIPE
        if spec is None:
            return default_fd
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            opened.append(fd)
            return fd
        if spec == subprocess.STDOUT:
            return -1  # resolved by the caller: stderr goes where stdout goes
        if spec == subprocess.PIPE:
            read, write = os.pipe()
            if which == "stdin":
                readers[write] = "stdin"
                opened.append(read)
                return read
            readers[read] = which
            opened.append(write)
            return write
        return spec if isinstance(spec, int) else spec.fileno()

    def result(self) -> subprocess.CompletedProcess:
        opened: list[int] = []
        readers: dict[int, str] = {}
        fds = [self._stream("stdin", 0, opened, readers), self._stream("stdout", 1, opened, readers)]
        err = self._stream("stderr", 2, opened, readers)
        fds.append(fds[1] if err == -1 else err)
        cwd = os.path.abspath(os.fspath(self.kw.get("cwd") or "."))
        request = json.dumps({"argv": self.argv, "env": self.env, "cwd": cwd,
                              "setsid": bool(self.kw.get("start_new_session")), "umask": _umask(),
                              "nice": os.getpriority(os.PRIO_PROCESS, 0)}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.server.path)
            socket.send_fds(conn, [struct.pack("!I", len(request))], fds)
            conn.sendall(request)
        finally:
            for fd in opened:
                os.close(fd)
        return self._wait(conn, readers)

    def _wait(self, conn: socket.socket, readers: dict[int, str]) -> subprocess.CompletedProcess:
        import selectors
        import time

        timeout: float | None = self.kw.get("timeout")
        deadline = None if timeout is None else time.monotonic() + timeout
        out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        data = self.kw.get("input")
        pending = memoryview(data.encode() if isinstance(data, str) else (data or b""))
        sel = selectors.DefaultSelector()
        control = bytearray()
        sel.register(conn, selectors.EVENT_READ, "control")
        for fd, what in readers.items():
            if what == "stdin":
                if pending:
                    sel.register(fd, selectors.EVENT_WRITE, "stdin")
                else:
                    os.close(fd)
            else:
                sel.register(fd, selectors.EVENT_READ, what)
        pid = status = None
        try:
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if pid is not None:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(self.cmd, timeout or 0.0, bytes(out["stdout"]) or None,
                                                    bytes(out["stderr"]) or None)
                for key, _ in sel.select(left):
                    what = key.data
                    if what == "stdin":
                        try:
                            sent = os.write(key.fd, pending[:65536])
                        except BrokenPipeError:
                            sent = len(pending)
                        pending = pending[sent:]
                        if not pending:
                            sel.unregister(key.fd)
                            os.close(key.fd)
                        continue
                    chunk = conn.recv(65536) if what == "control" else os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        if what != "control":
                            os.close(key.fd)
                        continue
                    if what == "control":
                        control += chunk
                        lines = control.split(b"\n")
                        for line in lines[:-1]:
                            message = loads_json(line)
                            pid = message.get("pid", pid)
                            status = message.get("status", status)
                        control = lines[-1]
                    else:
                        out[what] += chunk
        finally:
            sel.close()
            conn.close()
            for fd in readers:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if status is None:
            raise RuntimeError("pyinfra fork server: the run ended without a wait status")
        code = os.waitstatus_to_exitcode(status)
        stdout = self._decode(out["stdout"]) if "stdout" in readers.values() else None
        stderr = self._decode(out["stderr"]) if "stderr" in readers.values() else None
        done = subprocess.CompletedProcess(self.cmd, code, stdout, stderr)
        if self.kw.get("check"):
            done.check_returncode()
        return done

    def _decode(self, data: bytearray) -> str | bytes:
        if not self.text:
            return bytes(data)
        import locale

        text = bytes(data).decode(self.kw.get("encoding") or locale.getpreferredencoding(False),
                                  self.kw.get("errors") or "strict")
        return text.replace("\r\n", "\n").replace("\r", "\n")  # subprocess's universal newlines


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --- the server --------------------------------------------------------------------------------------------------
def _serve(path: str, bin_dir: str) -> None:
    import posix  # the C functions: gevent's patch replaces os.fork, os.waitpid, os.close (deferred to its loop)
    import select

    real_select, std_socket = select.select, socket.socket
    listener = std_socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.path[0] = bin_dir  # as for the console script: its own directory first
    import gevent  # noqa: F401
    import pyinfra_cli.main  # noqa: F401  (patches the stdlib for gevent: the saved functions above are the real ones)

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # helpers are reaped by the kernel
    os.write(1, b"ready\n")
    while True:
        readable = real_select([listener.fileno(), 0], [], [])[0]
        if 0 in readable and not os.read(0, 1):
            return  # the test process closed our stdin or ended
        if listener.fileno() not in readable:
            continue
        fd, _ = listener._accept()  # type: ignore[attr-defined]  # the C method: accept() would build a gevent socket
        conn = std_socket(fileno=fd)
        try:
            head, fds, _, _ = socket.recv_fds(conn, 4, 3)
            size = struct.unpack("!I", head)[0]
            body = b""
            while len(body) < size:
                chunk = conn.recv(size - len(body))
                if not chunk:
                    raise OSError("short request")
                body += chunk
            request = loads_json(body)
        except (OSError, ValueError, struct.error):
            conn.close()
            continue
        if posix.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _helper(conn, fds, request)
        conn.close()
        for received in fds:
            posix.close(received)


def _helper(conn: socket.socket, fds: list[int], request: dict) -> None:
    import posix

    try:
        pid = posix.fork()
        if pid == 0:
            _pyinfra(conn, fds, request)
        for received in fds:
            posix.close(received)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        status = posix.waitpid(pid, 0)[1]
        conn.sendall(json.dumps({"status": status}).encode() + b"\n")
    finally:
        os._exit(0)


def _pyinfra(conn: socket.socket, fds: list[int], request: dict) -> None:
    code = 1
    try:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:  # the rest above 2 are the server's own (gevent's): not the caller's
            os.closerange(fd, fd + 1)
        if request["setsid"]:
            os.setsid()
        with contextlib.suppress(OSError):  # lowering it again needs root
            os.setpriority(os.PRIO_PROCESS, 0, request["nice"])
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import gevent

        gevent.reinit()
        sys.argv = list(request["argv"])
        from pyinfra_cli.main import main

        try:
            main()
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        with contextlib.suppress(OSError):
            threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                code = 120  # as CPython's exit does when flushing fails
    finally:
        os._exit(code & 0xFF if code >= 0 else 1)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
