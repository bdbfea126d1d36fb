"""A persistent command session in an LXD/Incus container: one long-lived exec running a tiny agent.

Why: a REST exec with recorded output costs ~15-20 ms a command, most of it the daemon's
``forkexec`` into the container. Starting one exec per connection and feeding it commands over its
stdin leaves ~1-2 ms a command (a websocket frame each way plus the agent's fork of ``sh``).

How: ``POST /1.0/instances/NAME/exec`` with ``wait-for-websocket`` runs ``python3 -c AGENT_SOURCE``;
the daemon relays its stdin/stdout/stderr over three websockets (plus a control one) that we
connect with :mod:`labwright.lxd.websocket`. The protocol on the agent's stdin/stdout is a stream
of length-prefixed (4-byte big-endian) JSON documents:

- agent, once at start: ``{"id": 0, "hello": "labwright-agent", "version": 1, "python": "3.11.2"}``
- request: ``{"id", "command", "stdin": base64 | null, "timeout": seconds | null}``
- response: ``{"id", "exit_code", "stdout": base64, "stderr": base64, "timed_out"}``, or
  ``{"id", "error", "started"}`` when the agent failed (``started``: whether the command had begun).

The agent runs ``["sh", "-c", command]`` with stdout/stderr captured separately (byte-exact), stdin
from the request or /dev/null, in its own process group, which is killed on timeout the way
coreutils ``timeout --kill-after=5`` does it (TERM, KILL 5 s later; exit 124, or 137 if killed).
The agent's own stderr carries diagnostics only; it is drained (and logged at debug level) while
waiting for answers, so a chatty agent cannot fill the pipe and stall.

Everything here is single-threaded: one selector over the websockets. Under pyinfra's CLI (gevent
monkey-patched) the sockets and the selector are cooperative; without it they simply block.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import selectors
import signal
import struct
import threading
import time
from typing import Any

from labwright.errors import LabwrightError, OperationFailed
from labwright.lxd.client import ExecResult, LxdClient
from labwright.lxd.websocket import OP_BINARY, WebSocket
from labwright.textio import loads_json

logger = logging.getLogger(__name__)

#: Seconds the daemon and the agent get to come up (exec, 4 handshakes, the hello).
START_TIMEOUT = 15.0
#: The agent's TERM -> KILL escalation on timeout (as ``timeout --kill-after=5``).
KILL_AFTER = 5.0
#: Extra time past a command's timeout (and KILL_AFTER) before the session is declared hung.
ANSWER_MARGIN = 30.0
#: Bytes of the agent's stderr kept for error messages.
DIAGNOSTICS_KEPT = 16 * 1024

# The agent. Runs in the container under whatever python3 it has: standard library only, and nothing
# newer than Python 3.7 (no walrus, no f-string "=", no 3.8+ APIs); tests/unit/lxd/test_agent.py
# runs it under every interpreter it finds. It must never write to its stdout except the protocol,
# so fd 1 is moved aside first and stray prints go to stderr.
AGENT_SOURCE = r'''
import base64, json, os, selectors, shlex, signal, struct, subprocess, sys, time

GRACE = 0.5
KILL_AFTER = @KILL_AFTER@
STEP = 0.1
CHUNK = 1 << 20
F_SETPIPE_SZ = 1031


def widen(fd):
    # Bigger pipes mean fewer wake-ups (here and in the daemon relaying our stdout) for big outputs.
    try:
        import fcntl
        fcntl.fcntl(fd, F_SETPIPE_SZ, CHUNK)
    except (ImportError, OSError):
        pass


def read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def send(fd, doc, raw=None):
    # raw: (key, ascii bytes) pairs spliced in as JSON strings without json.dumps scanning megabytes of
    # base64 (which needs no escaping).
    data = json.dumps(doc, separators=(",", ":")).encode("ascii")
    pieces = [data]
    if raw:
        pieces = [data[:-1]]
        for key, value in raw:
            pieces += [b',"' + key + b'":"', value, b'"']
        pieces.append(b"}")
    size = sum(len(piece) for piece in pieces)
    pieces.insert(0, struct.pack(">I", size))
    if size < CHUNK:
        # One write, so the daemon relays the answer as one frame (one wake-up at the other end).
        pieces = [b"".join(pieces)]
    for piece in pieces:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view):]


def signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass


def argv_for(command):
    # pyinfra sends its commands as `sh -c <shlex-quoted script>` (sudo/su/env prefixes aside). For
    # exactly that form the outer `sh -c` would only exec `sh -c script` in its place (same pid, argv
    # and environment), so run that directly and save one shell start (~0.6 ms, a third of a command).
    # The round trip through shlex.quote proves the rest of the line is one word meaning `script`.
    if command.startswith("sh -c "):
        quoted = command[6:]
        script = quoted
        if len(quoted) >= 2 and quoted[0] == quoted[-1] == "'":
            script = quoted[1:-1].replace("'\"'\"'", "'")
        if shlex.quote(script) == quoted:
            command = script
    return [b"sh", b"-c", command.encode("utf-8", "surrogateescape")]


def run(req, state):
    argv = argv_for(req["command"])
    data = req.get("stdin")
    data = None if data is None else base64.b64decode(data)
    timeout = req.get("timeout")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    state["started"] = True
    sel = selectors.DefaultSelector()
    out = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    for fd in out:
        widen(fd)
        sel.register(fd, selectors.EVENT_READ)
    pending = None
    if data:
        pending = memoryview(data)
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    elif proc.stdin is not None:
        proc.stdin.close()
    now = time.monotonic()
    deadline = now + timeout if timeout else None
    kill_at = exited_at = None
    timed_out = killed = False
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline and not timed_out:
            timed_out = True
            signal_group(proc, signal.SIGTERM)
            kill_at = now + KILL_AFTER
        if kill_at is not None and now >= kill_at:
            killed = True
            signal_group(proc, signal.SIGKILL)
            kill_at = None
        if proc.poll() is not None:
            if pending is not None:
                sel.unregister(proc.stdin.fileno())
                proc.stdin.close()
                pending = None
            if not sel.get_map():
                break
            # Something the command started in the background still holds its stdout/stderr: take
            # what comes within GRACE, then answer rather than wait for that process to end.
            if exited_at is None:
                exited_at = now
            elif now - exited_at >= GRACE:
                break
        waits = [STEP]
        for moment in (deadline if not timed_out else None, kill_at, exited_at and exited_at + GRACE):
            if moment:
                waits.append(moment - now)
        wait = max(0.0, min(waits))
        if not sel.get_map():
            try:
                proc.wait(wait)  # the command closed its output but runs on
            except subprocess.TimeoutExpired:
                pass
            continue
        for key, _ in sel.select(wait):
            if pending is not None and key.fd == proc.stdin.fileno():
                try:
                    pending = pending[os.write(key.fd, pending[:CHUNK]):]
                except BlockingIOError:
                    continue
                except OSError:
                    pending = pending[:0]  # the command closed its stdin: the rest is not wanted
                if not pending:
                    sel.unregister(key.fd)
                    proc.stdin.close()
                    pending = None
                continue
            chunk = os.read(key.fd, CHUNK)
            if chunk:
                out[key.fd].append(chunk)
            else:
                sel.unregister(key.fd)
    sel.close()
    stdout = b"".join(out[proc.stdout.fileno()])
    stderr = b"".join(out[proc.stderr.fileno()])
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait()
    if code < 0:
        code = 128 - code  # killed by a signal: report it as a shell does
    if timed_out:
        code = 137 if killed else 124
    answer = {"exit_code": code, "timed_out": timed_out}
    return answer, ((b"stdout", base64.b64encode(stdout)), (b"stderr", base64.b64encode(stderr)))


def main():
    rfd, wfd = os.dup(0), os.dup(1)
    widen(wfd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    sys.stdout = sys.stderr
    os.environ.pop("PYTHONCOERCECLOCALE", None)
    version = ".".join(str(part) for part in sys.version_info[:3])
    send(wfd, {"id": 0, "hello": "labwright-agent", "version": 1, "python": version})
    while True:
        head = read_exact(rfd, 4)
        body = head and read_exact(rfd, struct.unpack(">I", head)[0])
        if body is None:
            return
        state = {"started": False}
        rid = raw = None
        try:
            req = json.loads(body.decode("utf-8"))
            rid = req.get("id")
            answer, raw = run(req, state)
            answer["id"] = rid
        except Exception as exc:
            answer = {"id": rid, "error": "%s: %s" % (type(exc).__name__, exc), "started": state["started"]}
        send(wfd, answer, raw)


main()
'''.replace("@KILL_AFTER@", repr(KILL_AFTER))


class AgentUnavailable(OperationFailed):
    """The agent could not be started (no python3, one too old, exec refused): use REST execs."""


class AgentNotRun(OperationFailed):
    """The command certainly did not run (the request never reached the agent, or the agent failed before
    starting it): running it another way is safe. ``session_lost`` says whether the session is gone."""

    def __init__(self, message: str, session_lost: bool):
        super().__init__(message)
        self.session_lost = session_lost


class AgentLost(OperationFailed):
    """The session broke (or the agent failed) after the command was handed over: it may have run, and its
    result is lost. ``session_lost`` says whether the session is gone."""

    def __init__(self, message: str, session_lost: bool = True):
        super().__init__(message)
        self.session_lost = session_lost


class _Ended(Exception):
    """The agent's stdout ended (it exited, or the connection dropped)."""


class AgentSession:
    """One agent process in one instance; commands run one at a time (as a pyinfra host runs them)."""

    def __init__(self, client: LxdClient, instance: str, python: str = "python3",
                 start_timeout: float = START_TIMEOUT, log: logging.Logger = logger):
        self.client = client
        self.log = log  # debug lines (start, the agent's stderr) go here: pyinfra's logger under pyinfra
        self.instance = instance
        self.python = python
        self.start_timeout = start_timeout
        self.operation: str | None = None
        self.python_version: str | None = None
        self._ws: dict[str, WebSocket] = {}
        self._selector: selectors.BaseSelector | None = None
        self._stream = bytearray()  # the agent's stdout, not yet parsed
        self._diagnostics = bytearray()
        self._next_id = 1
        self._alive = False
        # One request at a time on the stream. pyinfra runs a host's commands in turn, so this only guards
        # API users who share a host between threads (under gevent the patched lock is cooperative).
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def diagnostics(self) -> str:
        """The tail of what the agent wrote on its stderr."""
        return self._diagnostics.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<AgentSession {self.instance} {'alive' if self._alive else 'closed'}>"

    # --- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the agent; raises AgentUnavailable (with the reason) when it cannot run."""
        where = f"{self.instance}: exec agent"
        deadline = time.monotonic() + self.start_timeout
        body = {
            "command": [self.python, "-c", AGENT_SOURCE],
            # A python3 started in the C locale would otherwise put LC_CTYPE=C.UTF-8 into the environment
            # every command inherits (PEP 538); the agent removes this variable again at once.
            "environment": {"PYTHONCOERCECLOCALE": "0"},
            "wait-for-websocket": True,
            "interactive": False,
            "record-output": False,
        }
        try:
            meta = self.client.request("POST", f"/1.0/instances/{self.instance}/exec", body, wait=False)
            self.operation = str(meta["id"])
            fds = meta["metadata"]["fds"]
            # The daemon starts the process once 0, 1 and 2 are connected (and gives up after 5 s).
            for name in ("0", "1", "2", "control"):
                sock = self.client.new_socket(timeout=max(1.0, deadline - time.monotonic()))
                resource = self.client.api_path(f"/1.0/operations/{self.operation}/websocket",
                                                {"secret": fds[name]})
                self._ws[name] = WebSocket.connect(sock, self.client.host_header, resource)
            selector = selectors.DefaultSelector()
            for name, ws in self._ws.items():
                ws.sock.settimeout(None)  # waits are the selector's, with their own deadlines
                selector.register(ws.sock, selectors.EVENT_READ, name)
            self._selector = selector
            self._alive = True
            hello = self._answer(deadline)
        except _Ended:
            self._teardown()
            raise AgentUnavailable(f"{where} did not start{self._why_ended()}") from None
        except TimeoutError:
            self._teardown()
            raise AgentUnavailable(f"{where} did not answer within {self.start_timeout:.0f}s"
                                   f"{self._stderr_tail()}") from None
        except (LabwrightError, OSError, KeyError, TypeError, ValueError) as exc:
            self._teardown()
            raise AgentUnavailable(f"{where} could not be started: {exc}") from exc
        except BaseException:
            self._teardown()
            raise
        if hello.get("hello") != "labwright-agent" or hello.get("id") != 0:
            self._teardown()
            raise AgentUnavailable(f"{where}: unexpected greeting {str(hello)[:200]}")
        self.python_version = str(hello.get("python"))
        self.log.debug("%s: exec agent up (python %s, operation %s)", self.instance, self.python_version,
                       self.operation)

    def close(self) -> None:
        """End the agent: close its stdin, give it a moment to exit, then drop the connections."""
        if not self._ws:
            return
        if self._alive:
            self._alive = False
            stdin = self._ws.get("0")
            if stdin is not None:
                stdin.send_close()  # the daemon closes the agent's stdin; it exits at EOF
            try:
                deadline = time.monotonic() + 2.0
                while not self._ws["1"].closed and time.monotonic() < deadline:
                    self._pump(deadline)
            except (TimeoutError, OSError, LabwrightError):
                pass
        self._teardown()

    def _teardown(self) -> None:
        self._alive = False
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        stdout, control = self._ws.get("1"), self._ws.get("control")
        if stdout is not None and not stdout.closed and control is not None and not control.closed:
            # The agent may still run (hung, or never greeted): closing the websockets does not end it
            # (LXD 5.0 leaves it running), so have the daemon kill it.
            with contextlib.suppress(OSError, LabwrightError):
                control.send_text(json.dumps({"command": "signal", "signal": signal.SIGKILL.value}))
        for name in ("0", "1", "2", "control"):
            ws = self._ws.pop(name, None)
            if ws is not None:
                ws.close()
        self._ws.clear()

    # --- commands -------------------------------------------------------------------------------
    def run(self, command: str, stdin: bytes | None = None, timeout: float | None = None) -> ExecResult:
        """Run ``sh -c command`` in the instance. A timeout comes back as ``timed_out`` (exit 124/137).

        Raises AgentNotRun when the command certainly did not run, AgentLost when it may have."""
        with self._lock:
            return self._run(command, stdin, timeout)

    def _run(self, command: str, stdin: bytes | None, timeout: float | None) -> ExecResult:
        if not self._alive:
            raise AgentNotRun(f"{self.instance}: exec agent is not running", session_lost=True)
        try:
            self._pump(0)  # notice an agent that died since the last command, before handing this one over
        except (OSError, LabwrightError) as exc:
            self._teardown()
            raise AgentNotRun(f"{self.instance}: exec agent connection failed: {exc}", session_lost=True) from None
        if self._ws["1"].closed:
            why = self._why_ended()
            self._teardown()
            raise AgentNotRun(f"{self.instance}: exec agent ended{why}", session_lost=True)
        if self._stream:
            self._teardown()
            raise AgentNotRun(f"{self.instance}: exec agent wrote out of turn: {bytes(self._stream[:100])!r}",
                              session_lost=True)
        rid = self._next_id
        self._next_id += 1
        request = {
            "id": rid,
            "command": command,
            "stdin": None if stdin is None else base64.b64encode(stdin).decode("ascii"),
            "timeout": timeout or None,
        }
        payload = json.dumps(request, separators=(",", ":")).encode("ascii")
        try:
            self._ws["0"].send(struct.pack(">I", len(payload)) + payload, OP_BINARY)
        except (OSError, LabwrightError) as exc:
            # The frame did not go out whole, so the agent cannot have read the request.
            self._teardown()
            raise AgentNotRun(f"{self.instance}: exec agent unreachable: {exc}", session_lost=True) from None
        except BaseException:
            self._teardown()  # interrupted mid-frame: the stream is unusable
            raise
        deadline = None if not timeout else time.monotonic() + timeout + KILL_AFTER + ANSWER_MARGIN
        try:
            answer = self._answer(deadline)
        except _Ended as exc:
            self._teardown()
            raise AgentLost(f"{self.instance}: exec agent ended while running the command "
                            f"(it may have run){self._why_ended(exc)}") from None
        except TimeoutError:
            self._teardown()
            raise AgentLost(f"{self.instance}: exec agent did not answer within {timeout}s + "
                            f"{KILL_AFTER + ANSWER_MARGIN:.0f}s") from None
        except (OSError, LabwrightError) as exc:
            self._teardown()
            raise AgentLost(f"{self.instance}: exec agent connection failed while running the command: {exc}") \
                from None
        except BaseException:
            # Interrupted (a gevent timeout, ^C): the answer would arrive out of turn later.
            self._teardown()
            raise
        if answer.get("id") != rid:
            self._teardown()
            raise AgentLost(f"{self.instance}: exec agent answered request {answer.get('id')!r}, not {rid}")
        if "error" in answer:
            message = f"{self.instance}: exec agent failed: {answer['error']}"
            if answer.get("started"):
                raise AgentLost(message + " (after starting the command)", session_lost=False)
            raise AgentNotRun(message, session_lost=False)
        try:
            return ExecResult(
                int(answer["exit_code"]),
                base64.b64decode(answer["stdout"]),
                base64.b64decode(answer["stderr"]),
                timed_out=bool(answer.get("timed_out")),
            )
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            self._teardown()
            raise AgentLost(f"{self.instance}: exec agent sent a malformed answer: {exc}") from None

    # --- plumbing -------------------------------------------------------------------------------
    def _answer(self, deadline: float | None) -> dict[str, Any]:
        """The next document from the agent's stdout. Raises _Ended or TimeoutError."""
        while True:
            doc = self._pop_document()
            if doc is not None:
                return doc
            if self._ws["1"].closed:
                raise _Ended()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()
            self._pump(deadline)

    def _pop_document(self) -> dict[str, Any] | None:
        stream = self._stream
        if len(stream) < 4:
            return None
        size = struct.unpack_from(">I", stream)[0]
        if len(stream) < 4 + size:
            return None
        body = bytes(stream[4:4 + size])
        del stream[:4 + size]
        try:
            doc = loads_json(body)
        except ValueError as exc:
            raise OperationFailed(f"exec agent sent a malformed document: {exc}") from None
        if not isinstance(doc, dict):
            raise OperationFailed("exec agent sent a malformed document: not an object")
        return doc

    def _pump(self, deadline: float | None) -> None:
        """Wait (until ``deadline``; 0 polls) for any websocket to be readable and take what came:
        stdout into the stream, stderr into diagnostics, pings answered everywhere."""
        assert self._selector is not None
        if deadline is None:
            wait = None
        elif deadline == 0:
            wait = 0.0
        else:
            wait = max(0.0, deadline - time.monotonic())
        for key, _ in self._selector.select(wait):
            name = key.data
            ws = self._ws[name]
            messages = ws.read_available()
            if ws.closed:
                self._selector.unregister(ws.sock)
            for message in messages:
                if name == "1":
                    self._stream += message.data
                elif name == "2":
                    self._diagnostics += message.data
                    del self._diagnostics[:-DIAGNOSTICS_KEPT]
                    for line in message.data.decode("utf-8", "replace").splitlines():
                        self.log.debug("%s: exec agent: %s", self.instance, line)

    def _stderr_tail(self) -> str:
        text = self.diagnostics.strip()
        return f": {text[-800:]}" if text else ""

    def _why_ended(self, exc: BaseException | None = None) -> str:
        """Why the agent is gone, as far as the daemon and the agent's stderr tell."""
        detail = f": {exc}" if exc is not None and str(exc) else ""
        if self.operation:
            try:
                # The agent is gone; the daemon finishes the operation (with the exit status) right after.
                op = self.client.request("GET", f"/1.0/operations/{self.operation}/wait", params={"timeout": 2})
                if op.get("err"):
                    detail += f": {op['err']}"
                elif (op.get("metadata") or {}).get("return") is not None:
                    detail += f" (exit status {op['metadata']['return']})"
            except (LabwrightError, OSError):
                pass
        return detail + self._stderr_tail()
