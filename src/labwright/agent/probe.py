"""The agent's ``probe`` subcommand: the context-ceiling probe's part that runs INSIDE the guest,
``python3 AGENT probe JSON``.

Standard library only (a bare Debian guest has python3 and systemd, nothing else). The control machine runs it with
one JSON argument per call and reads one JSON object back, so one candidate costs one exec, and every timing (poll
interval, startup timeout, kill) is measured on the guest itself. Starts go through labwright's one restart
(:func:`labwright.agent.service.restart_unit`).

Modes:

- ``state``: the unit's state and files (ActiveState, unit file, ExecStart line, drop-ins), whether paths exist.
- ``probe``: stop the unit for good (SIGKILL, ``systemctl stop``, which also cancels a pending automatic restart,
  ``reset-failed`` for the start limit), install the candidate's files, ``daemon-reload`` if asked, start it, and
  take the InvocationID systemd gives THIS start. The verdict reads only that invocation's journal entries
  (``_SYSTEMD_INVOCATION_ID`` for the service's own lines, ``INVOCATION_ID`` for systemd's "Main process exited"
  line), so a stale process, or an automatic restart with an older config, can never be read as this candidate's
  result. ok: a success line, or the health URL answering 200 while our invocation is still the running one, and
  the main process's peak memory (VmHWM) read right then (one that ended before it could be read is no "ok"). oom:
  an out-of-memory line, or the main process killed by SIGKILL (the OOM killer under a cgroup limit logs nothing).
  error: any other exit. timeout: none of these within the startup timeout; then the unit is SIGKILLed. The unit is
  always left stopped.
- ``watch``: the verdict for a given invocation (after the OOM killer took the first waiter along with the server).
- ``restore``: install/remove files, ``daemon-reload``, ``reset-failed``; start the unit again if it was running and
  wait (same rules) until it is healthy.
- ``leftovers``: the records of interrupted probes on this guest (see below).

The record: before a probe changes anything, ``probe`` writes what puts the original back (the ``restore`` request:
the original files' bytes, whether the unit ran) to ``/var/lib/labwright/probe/UNIT.json``, atomically (temporary
file, fsync, rename, fsync of the directory), and only when no record is there yet, so a record always holds the
state before the FIRST change. ``restore`` removes it once the original is installed and the unit is back as it
was. A record found later is what a killed probe (SIGKILL, a lost connection, a reboot) left: the next probe, or
``labwright probe restore``, runs it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

from labwright.agent.service import restart_unit

POLL = 0.2
#: How long an exit with no log line of its own waits for its lines to reach the journal.
LINES_GRACE_S = 3.0
#: A start still loading at its deadline while the guest's anonymous memory came this close to the guest's limit was
#: thrashing there (every file page evicted and read back), not slow: its verdict is "oom". Measured under a 512 MiB
#: limit with both cores busy (the guest's cgroup read from the host every 0.25 s): each start near the edge sits on a
#: plateau of anonymous memory while it thrashes; those that came up in time held 489-498 MiB there, those still
#: loading at their 20 s deadline 499-505 MiB.
THRASH_MARGIN = 16 * 1024**2
#: Seconds between two readings of the guest's memory while a start runs.
MEMORY_POLL = 0.5
RECORD_DIR = "/var/lib/labwright/probe"


def sh(*args: str, check: bool = False, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run a command; with ``timeout``, one that runs past it (a guest thrashing at its memory limit makes even
    journalctl take tens of seconds) is killed and answers exit 124 with no output."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(args), 124, "", f"ran past {timeout:g}s")


def props(service: str, timeout: float | None = None) -> dict:
    keys = "ActiveState,SubState,MainPID,InvocationID,ExecMainCode,ExecMainStatus,NRestarts,Result,LoadState," \
           "UnitFileState,FragmentPath,DropInPaths,ControlGroup,WorkingDirectory"
    out = sh("systemctl", "show", "-p", keys, service, timeout=timeout).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def exec_start_line(path: str) -> str | None:
    """The last ExecStart= of a unit file (systemd keeps the last one; an empty one resets the list)."""
    found = None
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith("ExecStart="):
                    found = line.rstrip("\n")[len("ExecStart="):]
    except OSError:
        return None
    return found


def state(req: dict) -> dict:
    service = req["service"]
    info = props(service)
    fragment = info.get("FragmentPath") or ""
    files = {}
    for path in req.get("paths", []):
        files[path] = os.path.exists(path)
    return {"props": info, "exec_start": exec_start_line(fragment) if fragment else None, "paths": files,
            "systemctl": sh("sh", "-c", "command -v systemctl").returncode == 0, "leftover": read_record(service)}


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


TMP_SUFFIX = ".labwright-probe-new"


def write_atomic(path: str, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
    """Temporary file beside ``path``, fsync, rename over it, fsync the directory: old bytes or new, never a mix."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}{TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def install(actions: list[dict]) -> list[str]:
    """Write or remove each file; returns the paths left alone because they hold someone else's content.

    ``ours``: the first line every candidate this probe writes starts with. A file to put back that holds neither
    the original nor a candidate was changed by someone else since the probe began: it is kept, and said.
    """
    kept = []
    for action in actions:
        path = action["path"]
        # A helper killed while writing this file (the restore's fence SIGKILLs it) left its temporary beside it: a
        # suite run found llama-server.service.d/90-labwright-probe.conf.labwright-probe-new after a Ctrl-C restore.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{TMP_SUFFIX}")
        if action.get("remove"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                fsync_dir(os.path.dirname(path))
            continue
        data = base64.b64decode(action["content_b64"])
        mode, owner = 0o644, None
        try:
            stat = os.stat(path)
            mode, owner = stat.st_mode & 0o7777, (stat.st_uid, stat.st_gid)
            if action.get("ours"):
                with open(path, "rb") as handle:
                    current = handle.read()
                if current != data and not current.startswith(action["ours"].encode()):
                    kept.append(path)
                    continue
        except FileNotFoundError:
            pass
        write_atomic(path, data, mode, owner)
    return kept


def record_path(service: str) -> str:
    return f"{RECORD_DIR}/{service}.json"


def read_record(service: str) -> dict | None:
    try:
        with open(record_path(service), "rb") as handle:
            record = json.loads(handle.read().decode())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"unreadable": f"{record_path(service)}: {exc}"}
    return record if isinstance(record, dict) else {"unreadable": f"{record_path(service)}: not a JSON object"}


def save_record(service: str, record: dict) -> bool:
    """Write the record unless one is there (the first one holds the state before any change); True if written."""
    if os.path.exists(record_path(service)):
        return False
    write_atomic(record_path(service), json.dumps(record).encode(), 0o600)
    return True


def drop_record(service: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(service))
        fsync_dir(RECORD_DIR)


def leftovers() -> dict:
    records = {}
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(os.listdir(RECORD_DIR)):
            if entry.endswith(".json"):
                service = entry[:-len(".json")]
                records[service] = read_record(service)
    return {"leftovers": records}


def start_unit(service: str) -> tuple[bool, str]:
    """Start the (stopped) unit so that systemd's start limit cannot refuse it: labwright's one restart
    (reset-failed first; a refusal for the start limit retried after reset-failed with back-off)."""
    try:
        restart_unit(service, reset_first=True)
    except Exception as exc:  # OperationFailed: systemd's reason and what to look at
        return False, str(exc)
    return True, ""


def halt(service: str) -> None:
    """Stop the unit for good: kill what runs, cancel a pending automatic restart, clear the start-rate limit."""
    sh("systemctl", "kill", "--signal=SIGKILL", service)
    sh("systemctl", "stop", service)
    sh("systemctl", "reset-failed", service)


def journal(invocation: str, timeout: float | None = None) -> list[dict]:
    if not invocation:
        return []
    out = sh("journalctl", "--no-pager", "-o", "json", f"_SYSTEMD_INVOCATION_ID={invocation}", "+",
             f"INVOCATION_ID={invocation}", timeout=timeout).stdout
    entries = []
    for line in out.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def message(entry: dict) -> str:
    text = entry.get("MESSAGE", "")
    if isinstance(text, list):  # journald hands non-UTF-8 messages back as byte lists
        text = bytes(text).decode("utf-8", "replace")
    return str(text)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except Exception:
        return False


def memory(service: str, pid: str) -> dict:
    result: dict = {"peak_rss_bytes": None, "cgroup_peak_bytes": None}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    result["peak_rss_bytes"] = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    for path in (f"/sys/fs/cgroup/system.slice/{service}/memory.peak",
                 f"/sys/fs/cgroup/memory/system.slice/{service}/memory.max_usage_in_bytes"):
        try:
            with open(path) as handle:
                result["cgroup_peak_bytes"] = int(handle.read().strip())
                break
        except (OSError, ValueError):
            continue
    return result


def container_memory() -> dict:
    """The guest's own memory limit and usage (cgroup v2 or v1), for the planner's budget and the thrash verdict.

    Plain reads of the guest's own cgroup (no process started, cheap on a thrashing guest). The kernel's
    Documentation/admin-guide/cgroup-v2.rst: ``memory.max`` (the limit, "max" for none), ``memory.current``,
    ``memory.stat`` ``anon`` ("Amount of memory used in anonymous mappings"); cgroup-v1/memory.rst on a v1 memory
    controller: ``memory.limit_in_bytes``, ``memory.usage_in_bytes``, ``memory.stat`` ``total_rss`` (anonymous memory
    of the hierarchy).
    """
    result: dict = {"limit_bytes": None, "anon_bytes": None, "usage_bytes": None}
    pairs = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "anon"),
             ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
              "/sys/fs/cgroup/memory/memory.stat", "total_rss"))
    for limit_path, usage_path, stat_path, anon_key in pairs:
        try:
            with open(limit_path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        limit = None if text == "max" else int(text)
        if limit is not None and limit >= 1 << 60:
            limit = None  # cgroup v1 spells "no limit" as a huge number
        result["limit_bytes"] = limit
        try:
            with open(usage_path) as handle:
                result["usage_bytes"] = int(handle.read().strip())
            with open(stat_path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == anon_key:
                        result["anon_bytes"] = int(value)
        except (OSError, ValueError):
            pass
        break
    return result


def overdue(timeout: float, how: str, lines: list[str], closest: dict) -> dict:
    """The verdict of a start with no verdict by its deadline: "oom" when the guest's anonymous memory came within
    THRASH_MARGIN of its limit meanwhile (it was thrashing there, and would have been killed or crawled on), else
    "timeout"."""
    limit, anon = closest.get("limit_bytes"), closest.get("anon_bytes")
    if limit and anon is not None and limit - anon <= THRASH_MARGIN:
        return {"outcome": "oom", "why": f"thrashing at the guest's memory limit: still loading after {timeout:g}s "
                                         f"with {anon / 2**20:.1f} of {limit / 2**20:.0f} MiB anonymous ({how})",
                "lines": lines, "overdue": True, "guest_memory": closest}
    return {"outcome": "timeout", "why": f"no verdict within {timeout:g}s ({how})", "lines": lines, "overdue": True,
            "guest_memory": closest or None}


class Peak(threading.Thread):
    """The guest's memory at its highest anonymous reading while a start runs, read by a thread of its own every
    MEMORY_POLL seconds: on a thrashing guest one look of the verdict loop (a journal read) can span the whole
    deadline, while a file read still gets its turn."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict = {}
        self.done = threading.Event()

    def sample(self) -> None:
        now = container_memory()
        if now.get("anon_bytes") is not None and now["anon_bytes"] >= (self.seen.get("anon_bytes") or 0):
            self.seen = now

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(MEMORY_POLL)


def measured(service: str, pid: str, lost: list[str]) -> dict | None:
    """The memory of a start just judged healthy: the guest's, then the main process's peak (VmHWM) and its cgroup's.

    None when the main process had no memory left to read (gone, or a zombie, which has no VmHWM line): it was
    ended after it answered (the deadline's SIGALRM, the watchdog, the OOM killer), and the start is not "ok" (its
    exit decides the verdict; ``lost`` says what happened, for the verdict's why). An "ok" always carries its peak:
    the guest's reading comes first, so a VmHWM read afterwards proves the server was still up when it was taken.
    """
    guest = container_memory()
    reading = memory(service, pid)
    if reading["peak_rss_bytes"] is None:
        lost[:] = [f"it answered, but its main process (PID {pid}) ended before its memory could be read"]
        return None
    return {**reading, "guest_memory": guest}


def watch(req: dict, invocation: str, started: float) -> dict:
    """Wait for our invocation's verdict: ok (always with the server's peak memory), oom, error or timeout."""
    peak = Peak()
    peak.start()
    lost: list[str] = []
    try:
        verdict = _watch(req, invocation, started, peak, lost)
    finally:
        peak.done.set()
    if lost and verdict.get("outcome") != "ok":
        verdict["why"] = f"{verdict.get('why', '')}; {lost[0]}"
    return verdict


def _watch(req: dict, invocation: str, started: float, peak: Peak, lost: list[str]) -> dict:
    service, timeout = req["service"], float(req["timeout"])
    success, oom = req.get("success_lines", []), req.get("oom_lines", [])
    url = req.get("health_url")
    lines: list[str] = []
    deadline = started + timeout
    exit_seen = 0.0
    while True:
        # Each look is bounded by the time left: near the memory limit the guest thrashes and journalctl or
        # systemctl alone can take longer than the whole startup timeout.
        left = max(deadline - time.monotonic(), 1.0)
        entries = journal(invocation, timeout=left)
        lines = [message(e) for e in entries if e.get("_SYSTEMD_INVOCATION_ID") == invocation] or lines
        exits = [e for e in entries if e.get("INVOCATION_ID") == invocation and e.get("EXIT_CODE")]
        info = props(service, timeout=left)
        if OVERDUE.is_set():  # the watchdog's SIGKILL, not the OOM killer's
            return overdue(timeout, "killed at the deadline", lines, peak.seen)
        ours_running = info.get("InvocationID") == invocation and info.get("ActiveState") == "active" \
            and info.get("SubState") == "running"
        if any(word in line for line in lines for word in oom):
            return {"outcome": "oom", "why": "out-of-memory line", "lines": lines}
        if ours_running and any(word in line for line in lines for word in success):
            reading = measured(service, info["MainPID"], lost)
            if reading is not None:
                return {"outcome": "ok", "why": "success line", "lines": lines, **reading}
        # Health answered while our invocation is the running one: its memory is read at once (before the slow
        # systemctl below, while nothing can have killed it yet), then that our invocation is still the one running.
        if ours_running and url and healthy(url):
            reading = measured(service, info["MainPID"], lost)
            if reading is not None and props(service).get("InvocationID") == invocation:
                return {"outcome": "ok", "why": "health", "lines": lines, **reading}
        if exits:
            code, status = exits[-1].get("EXIT_CODE"), str(exits[-1].get("EXIT_STATUS", ""))
            text = f"code={code}, status={status}"
            if code == "killed" and status in ("9", "KILL"):
                return {"outcome": "oom", "why": "SIGKILL: the OOM killer", "exit": text,
                        "lines": lines}
            if code == "killed" and status in ("14", "ALRM"):  # the start's own deadline (tuning.probe's wrapper)
                return {**overdue(timeout, "its deadline's SIGALRM ended it", lines, peak.seen), "exit": text}
            # systemd's exit line and the service's own (its stdout, through journald's stream) arrive by two paths:
            # under load the exit can be in the journal before the line that says why (an out-of-memory line).
            exit_seen = exit_seen or time.monotonic()
            if not lines and time.monotonic() - exit_seen < LINES_GRACE_S:
                time.sleep(POLL)
                continue
            return {"outcome": "error", "why": f"main process exited ({text})", "exit": text, "lines": lines}
        if time.monotonic() > deadline:
            return overdue(timeout, "still running", lines, peak.seen)
        time.sleep(POLL)


#: Set by the watchdog when it killed the unit's processes at the deadline: the verdict is then "timeout".
OVERDUE = threading.Event()
#: Seconds since the helper began, per step (answered with the verdict as "steps").
STEPS: dict[str, float] = {}
BEGAN = time.monotonic()


def step(name: str) -> None:
    STEPS[name] = round(time.monotonic() - BEGAN, 2)
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")


def unit_pids(service: str) -> list[int]:
    """The unit's processes, read from its cgroup (cgroup v2, or v1's systemd or unified hierarchy) without asking
    systemd, which is as starved as everything else in a guest thrashing at its memory limit."""
    for root in CGROUP_ROOTS:
        try:
            with open(f"{root}/system.slice/{service}/cgroup.procs") as handle:
                return [int(word) for word in handle.read().split()]
        except (OSError, ValueError):
            continue
    return []


def kill_unit(service: str) -> int | str:
    """SIGKILL every process of the unit; returns how many, or "cgroup" when its cgroup was killed whole.

    ``cgroup.kill`` (kernel 5.14+, Documentation/admin-guide/cgroup-v2.rst: writing "1" kills every process of the
    cgroup and its descendants) is one write, with nothing to read first; else each pid of ``cgroup.procs``.
    """
    for root in CGROUP_ROOTS:
        try:  # never created: only the kernel's own file is written
            fd = os.open(f"{root}/system.slice/{service}/cgroup.kill", os.O_WRONLY)
        except OSError:
            continue
        try:
            os.write(fd, b"1")
            return "cgroup"
        except OSError:
            continue
        finally:
            os.close(fd)
    pids = unit_pids(service)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    return len(pids)


def watchdog(service: str, deadline: float) -> threading.Timer:
    """At ``deadline`` (monotonic), SIGKILL every process of the unit if no verdict came: a start that allocates
    near the memory limit keeps the guest thrashing (systemctl, journalctl and this waiter with it) until its
    memory is freed, and a 20-second timeout became minutes. The probe leaves the unit stopped in any case."""
    def fire() -> None:
        OVERDUE.set()
        step(f"killed {kill_unit(service)}")
    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), fire)
    timer.daemon = True
    timer.start()
    return timer


def pid_file(service: str) -> str:
    return f"/run/labwright-probe-{service}.pid"


def fence_file(service: str) -> str:
    return f"/run/labwright-probe-{service}.restored"


def lock_file(service: str) -> str:
    return f"/run/labwright-probe-{service}.lock"


@contextlib.contextmanager
def service_lock(service: str):
    """One helper at a time passes the gate below for ``service`` (flock: released when its holder dies)."""
    with open(lock_file(service), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def enter(service: str, run: str | None) -> bool:
    """A probe or watch helper's gate: False when the probe run ``run`` was already restored (its control machine
    was interrupted and put the original back); else this helper is the unit's waiter (its pid file written).

    The control machine's exec of the next candidate can reach the guest after the restore it sent on Ctrl-C (an
    exec LXD had accepted starts late on a loaded host): without this gate it installed its candidate over the
    restored original and halted the unit (a loaded suite run: the restored llama-server found "inactive" with the
    probe's drop-in back). Checked and pid written under the lock the restore takes to fence, so either the
    restore sees this helper's pid (and kills it) or this helper sees the fence."""
    with service_lock(service):
        if run:
            with contextlib.suppress(OSError), open(fence_file(service)) as handle:
                if handle.read().strip() == run:
                    return False
        stop_other_waiter(service)
        with open(pid_file(service), "w") as handle:
            handle.write(str(os.getpid()))
    return True


def fence(service: str, run: str | None) -> None:
    """The restore's side of :func:`enter`: no helper of run ``run`` acts on the unit from now on; the one acting
    now (its pid file) is killed."""
    with service_lock(service):
        if run:
            write_atomic(fence_file(service), run.encode(), 0o600)
        stop_other_waiter(service)


CANCELLED = {"outcome": "error", "why": "cancelled: this probe run was already restored (Ctrl-C on the control "
             "machine); the unit was not touched", "lines": [], "invocation": ""}


def stop_other_waiter(service: str) -> None:
    """A waiter still running for this unit (its control machine was interrupted) must not halt it later."""
    try:
        with open(pid_file(service)) as handle:
            pid = int(handle.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            mine = b".pyz\0probe\0" in handle.read() and pid != os.getpid()
    except (OSError, ValueError):
        return
    if mine:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
        # Gone before the caller goes on: a syscall it was in (creating a candidate's temporary file) completes after
        # the kill is sent, and the restore's install removes what it left only once it can add nothing more.
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def probe(req: dict) -> dict:
    service = req["service"]
    started = time.monotonic()
    if not enter(service, req.get("run")):
        return dict(CANCELLED)
    if req.get("record"):
        save_record(service, req["record"])  # before the first change: what puts the original back
    halt(service)
    step("halted")
    install(req.get("install", []))
    if req.get("daemon_reload"):
        sh("systemctl", "daemon-reload")
    dog = watchdog(service, started + float(req["timeout"]) + 1.0)
    started_ok, start_error = start_unit(service)
    step("started")
    invocation = props(service).get("InvocationID", "")
    # Said at once: under memory pressure the OOM killer may take this process too, and the control machine then
    # asks again (mode "watch") for this invocation's verdict, which the journal still holds.
    sys.stdout.write(json.dumps({"invocation": invocation, "started": started}) + "\n")
    sys.stdout.flush()
    if not started_ok and not invocation:
        dog.cancel()
        halt(service)
        return {"outcome": "error", "why": f"systemctl start failed: {start_error}", "lines": [],
                "seconds": time.monotonic() - started, "invocation": ""}
    return finish(req, invocation, started, dog)


def finish(req: dict, invocation: str, started: float, dog: threading.Timer | None = None) -> dict:
    service = req["service"]
    if dog is None:
        dog = watchdog(service, started + float(req["timeout"]) + 1.0)
    verdict = watch(req, invocation, started)
    step("verdict")
    dog.cancel()
    if verdict.pop("overdue", False):
        # Killed here at once, before halt() asks systemd: a server still allocating near the limit keeps the
        # whole guest thrashing (systemd and journald included) until its memory is freed. (Only here: restore()
        # also waits with watch() and must leave the original running.)
        kill_unit(service)
    restarts = int(props(service).get("NRestarts") or 0)
    halt(service)
    step("done")
    verdict.update(invocation=invocation, seconds=round(time.monotonic() - started, 3), restarts_seen=restarts,
                   steps=dict(STEPS))
    verdict["lines"] = verdict["lines"][-int(req.get("tail", 15)):]
    return verdict


def restore(req: dict) -> dict:
    service = req["service"]
    fence(service, req.get("run"))
    with contextlib.suppress(OSError):
        os.unlink(pid_file(service))
    halt(service)
    kept = install(req.get("install", []))
    if req.get("daemon_reload"):
        sh("systemctl", "daemon-reload")
    # halt() cleared the start-rate counter; a unit that was stopped stays stopped.
    sh("systemctl", "reset-failed", service)
    if not req.get("start"):
        drop_record(service)
        return {"outcome": "stopped", "props": props(service), "kept": kept}
    started = time.monotonic()
    started_ok, start_error = start_unit(service)
    invocation = props(service).get("InvocationID", "")
    if not started_ok:
        # The record stays: the original files are in place, the unit is down; a later restore starts it again.
        return {"outcome": "error", "why": f"systemctl start failed: {start_error}", "lines": [], "kept": kept}
    verdict = watch(req, invocation, started)
    if verdict.pop("overdue", False):
        verdict["outcome"] = "started"  # running, not yet healthy: leave it be, as it was before the probe
    if verdict["outcome"] in ("ok", "started"):
        drop_record(service)
    verdict["lines"] = verdict["lines"][-int(req.get("tail", 15)):]
    verdict["props"] = props(service)
    verdict["kept"] = kept
    return verdict


def main(argv: list[str]) -> int:
    req = json.loads(argv[0])
    mode = req["mode"]
    if mode == "state":
        result = state(req)
    elif mode == "probe":
        result = probe(req)
    elif mode == "watch":
        # A second look after the first waiter was killed: time already spent is taken off the timeout.
        req["timeout"] = max(0.0, float(req["timeout"]) - float(req.get("spent", 0)))
        if enter(req["service"], req.get("run")):
            result = finish(req, req["invocation"], time.monotonic())
        else:
            result = dict(CANCELLED)
    elif mode == "restore":
        result = restore(req)
    elif mode == "leftovers":
        result = leftovers()
    else:
        result = {"error": f"unknown mode {mode}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
