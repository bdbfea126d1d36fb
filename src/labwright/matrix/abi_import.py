"""Really import extension modules, in a subprocess running the environment's own Python.

``find_spec`` only proves a file is there; ``dlopen`` with RTLD_NOW (what CPython does for an extension module)
is what resolves every undefined symbol and fails with "undefined symbol: ...". So the child does exactly
what a program does: ``import torch`` first (real extensions rely on it to load libc10/libtorch into the
process), then loads each extension file under its module name and runs its PyInit.

One child imports torch once (1-2 s) and then takes the modules one by one, printing a JSON line before and
after each; if it dies inside one (a segfault in a PyInit, a hang past the timeout), that module is reported
as crashed and the rest go to a fresh child. The child is started early, so torch imports while the parent
is still hashing and reading ELF files.

The same child first answers where the environment looks for packages (``probe()``: sys.path, the stdlib and
where torch is, without importing it), then waits: torch is imported only once the parent says so (``start()``),
which a fully cached run never does. One interpreter start, not two, before torch's import begins on a cold run.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Runs under the environment's Python (any 3.8+): keep it free of newer syntax. Protocol lines go to a
# private copy of fd 1; fd 1 itself is pointed at stderr so prints from torch or a PyInit can't corrupt it.
CHILD = r"""
import json, os, sys
proto = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
def emit(obj):
    proto.write(json.dumps(obj) + "\n")
    proto.flush()
def describe(exc):
    return "%s: %s" % (type(exc).__name__, exc)
import importlib.util, sysconfig
spec = importlib.util.find_spec("torch")
emit({"probe": {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3], "path": sys.path,
                "stdlib": [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")],
                "torch": list(spec.submodule_search_locations or []) if spec else []}})
if not sys.stdin.readline():
    sys.exit(0)
try:
    import torch
except BaseException as exc:
    emit({"torch": False, "error": describe(exc)})
    sys.exit(0)
emit({"torch": True, "version": str(getattr(torch, "__version__", ""))})
import ctypes
promoted = set()
for line in sys.stdin:
    request = json.loads(line)
    emit({"start": request["id"]})
    try:
        for lib in request.get("promote") or []:
            if lib not in promoted:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                promoted.add(lib)
        if request["kind"] == "extension":
            spec = importlib.util.spec_from_file_location(request["module"], request["path"])
            module = importlib.util.module_from_spec(spec)
            sys.modules[request["module"]] = module
            spec.loader.exec_module(module)
        else:
            ctypes.CDLL(request["path"])
        emit({"id": request["id"], "ok": True})
    except BaseException as exc:
        emit({"id": request["id"], "ok": False, "error": describe(exc)})
"""


@dataclass
class ImportRequest:
    id: int
    module: str  # dotted module name, or the file name for a plain library loaded with ctypes
    path: str
    kind: str  # "extension" (has PyInit_) or "library"
    promote: list[str] = field(default_factory=list)  # torch libs to load RTLD_GLOBAL first (late-bound modules)


@dataclass
class ImportOutcome:
    ok: bool
    error: str | None = None


@dataclass
class TorchImport:
    ok: bool
    version: str | None = None
    error: str | None = None


class ProbeFailed(Exception):
    """The interpreter did not answer the probe (not a Python, or one that cannot start): the reason."""


class Importer:
    """One child process at a time; ``probe()`` first, ``start()`` (import torch) early, ``run()`` when the module
    list is known."""

    def __init__(self, python: str, timeout: float = 60.0, env: dict[str, str] | None = None):
        self.python = python
        self.timeout = timeout
        self.env = env
        self.torch: TorchImport | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._buffer = b""
        self._last_death = "the interpreter exited"
        self._started = False  # "go" sent: the child is importing torch

    def probe(self, timeout: float = 60.0) -> dict:
        """Start the child and return its answer on the environment (sys.path, stdlib, where torch is); torch is
        not imported until ``start()``. ProbeFailed, with the reason, when no answer comes."""
        self._spawn()
        assert self._proc is not None
        line = self._readline(time.monotonic() + timeout)
        try:
            message = json.loads(line) if line is not None else None
        except ValueError:
            message = None
        if isinstance(message, dict) and isinstance(message.get("probe"), dict):
            return message["probe"]
        hung = line is None and self._proc.poll() is None
        if not hung and line is None:
            # stdout hit EOF: it is exiting; a core dump can delay its reaping
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=30)
        self.close_child_only()
        reason = (f"no answer within {timeout:.0f} s (killed)" if hung else
                  self._death_reason(timed_out=False) if line is None else f"it printed {line[:80]!r}")
        self.close()
        raise ProbeFailed(reason)

    def start(self) -> None:
        """Have the child import torch (spawning one first if none is running)."""
        if self._proc is None:
            self._spawn()
        if self._started:
            return
        self._started = True
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(b"go\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died already: run() reports why

    def _spawn(self) -> None:
        if self._proc is not None:
            return
        self._started = False
        # stderr goes to a file, not a pipe: a chatty import (torch's warnings, a library's banner) could fill
        # a pipe nobody reads and deadlock the child.
        self._stderr = tempfile.NamedTemporaryFile(prefix="labwright-import-", suffix=".log")  # noqa: SIM115  (closed in close())
        self._buffer = b""
        # -I: ignore PYTHONPATH/user site and the current directory, so the environment is what it would be
        # for its service; site-packages and .pth files still apply.
        self._proc = subprocess.Popen([self.python, "-I", "-c", CHILD], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, env=self.env)

    def close(self) -> None:
        self._started = False
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream:
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def run(self, requests: list[ImportRequest]) -> dict[int, ImportOutcome]:
        outcomes: dict[int, ImportOutcome] = {}
        pending = list(requests)
        while pending:
            self.start()
            before = len(outcomes)
            self._run_one_child(pending, outcomes)
            reason = self._last_death
            self.close()
            if self.torch is not None and not self.torch.ok:
                break  # nothing can be imported without torch; the caller reports torch's own error
            pending = [r for r in pending if r.id not in outcomes]
            if pending and len(outcomes) == before:
                # The child died between modules, blaming none: don't loop; every module left gets the reason.
                for request in pending:
                    outcomes[request.id] = ImportOutcome(ok=False, error=f"import crashed: {reason}")
                break
            # Otherwise the child died in one module (which has its outcome); the rest go to a fresh child.
        return outcomes

    def _run_one_child(self, pending: list[ImportRequest], outcomes: dict[int, ImportOutcome]) -> bool:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        try:
            for request in pending:
                self._proc.stdin.write((json.dumps(request.__dict__) + "\n").encode())
            self._proc.stdin.close()
        except BrokenPipeError:
            pass  # the child already died (torch failed to import): its stdout says why
        by_id = {r.id: r for r in pending}
        current: int | None = None
        # torch's own import gets a generous budget: a CUDA build loads ~2 GB of libraries on a cold page cache.
        deadline = time.monotonic() + max(self.timeout, 120.0)
        while True:
            line = self._readline(deadline)
            if line is None:  # timed out, or the child exited
                timed_out = time.monotonic() >= deadline
                if not timed_out:
                    # stdout hit EOF: the child is dying; a core dump can delay its reaping, so wait for it
                    # rather than mistake it for a hang.
                    try:
                        self._proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        timed_out = True
                self.close_child_only()
                reason = self._last_death = self._death_reason(timed_out)
                if self.torch is None:
                    self.torch = TorchImport(ok=False, error=f"import torch did not finish: {reason}")
                elif current is not None:
                    outcomes[current] = ImportOutcome(ok=False, error=f"import crashed: {reason}")
                return False
            message = json.loads(line)
            if "probe" in message:
                continue  # a fresh child's answer on the environment: already known
            if "torch" in message:
                self.torch = TorchImport(ok=bool(message["torch"]), version=message.get("version"),
                                         error=message.get("error"))
                if not self.torch.ok:
                    return True
            elif "start" in message:
                current = int(message["start"])
                deadline = time.monotonic() + self.timeout
            elif "id" in message:
                outcomes[int(message["id"])] = ImportOutcome(ok=bool(message["ok"]), error=message.get("error"))
                current = None
                if all(i in outcomes for i in by_id):
                    return True

    def close_child_only(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._proc is not None:
            self._proc.wait()

    def _death_reason(self, timed_out: bool) -> str:
        assert self._proc is not None
        if timed_out:
            reason = f"no answer within {self.timeout:.0f} s (killed)"
        elif self._proc.returncode is not None and self._proc.returncode < 0:
            reason = f"killed by signal {-self._proc.returncode}"
        else:
            reason = f"exited with status {self._proc.returncode}"
        tail = self._stderr_tail()
        return f"{reason}; stderr: {tail}" if tail else reason

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            text = Path(self._stderr.name).read_bytes()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return " | ".join(lines[-3:])

    def _readline(self, deadline: float) -> str | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(timeout=left):
                    return None
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace")
