"""One run at a time per guest: a lock file in the guest, taken atomically, naming its holder, released at the end.

Two labwright runs (or a labwright run and ``pyinfra INVENTORY deploys/X.py``) against the same guest must not
interleave: two stack switches building into the same directory, a probe restarting the engine a deploy is
health-checking. Every labwright ``@deploy`` takes the lock first and releases it last; a second run waits for it
(``labwright_lock_wait`` seconds, default 300, one line saying whom it waits for) and then refuses with one line
naming the holder: pid, controller host, command, since when.

The lock is ``/run/lock/labwright.lock`` in the guest (``/run`` is a tmpfs: a reboot of the guest drops it), one
JSON object written to a temporary file and renamed into place, so a reader never sees half an owner. Taking,
breaking and releasing run under ``flock(2)`` on ``/run/lock/labwright.guard``, so two runs that both find the same
stale lock cannot both break it.

A lock is stale, and is released with one line saying so, when:

- its holder ran on the machine that looks at it (same kernel boot id, machine id and host name: the controller for
  a deploy, the guest for an in-guest holder) and that process is gone (pid dead, or reused: its start time differs);
- or its lease expired (``labwright_lock_lease`` seconds, default 6 h): the only test possible for a holder on
  another controller, whose processes cannot be seen from here.

APIs:

- ``locked(name)``: pyinfra's ``@deploy(name)`` with the lock taken before the deploy's first operation and released
  after its last (also when an operation fails; a killed run leaves a lock the next run finds stale);
- ``held(host, purpose)``: a context manager over a :class:`labwright.hosts.Host` for commands outside pyinfra;
- ``hold_local(purpose)``: the same on the guest itself (stdlib only; for code that runs ON the guest, such as the
  stack bundle). When the environment carries ``LABWRIGHT_GUEST_LOCK=<token>`` of the run that holds the lock (the
  controller passes it to what it starts on the guest: ``shell_env()``), it is that run's own work and goes on.

This module imports only the standard library at the top: labwright's agent carries it to the guest (its ``lock``
subcommand, ``python3 AGENT lock ACTION JSON``; see :mod:`labwright.hosts.agent`) and the stack bundle can carry it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the top level stays stdlib-only (the guest runs this file)
    from labwright.hosts import Host

LOCK_PATH = "/run/lock/labwright.lock"
GUARD_PATH = "/run/lock/labwright.guard"
ENV = "LABWRIGHT_GUEST_LOCK"
DEFAULT_WAIT = 300.0
DEFAULT_LEASE = 6 * 3600.0
POLL = 1.0

try:  # on the controller and in the stack bundle; not when the guest runs this file as a script
    from labwright.errors import OperationFailed as _Failed
except ImportError:  # pragma: no cover - guest script
    _Failed = RuntimeError  # type: ignore[misc,assignment]


class GuestBusy(_Failed):
    """Another run holds the guest's lock (after waiting as long as allowed)."""


# --- both sides: who am I, is that process alive, the lock file itself ----------------------------------------


def _first_line(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def identity() -> dict[str, str]:
    """This machine as a holder names it: a pid means something only on the same boot of the same machine."""
    return {"boot_id": _first_line("/proc/sys/kernel/random/boot_id"),
            "machine_id": _first_line("/etc/machine-id"), "host": socket.gethostname()}


def start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot): tells a reused pid from its first owner."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return ""
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def alive(pid: int, started: str) -> bool:
    now = start_time(pid)
    return bool(now) and (not started or now == started)


def owner_record(purpose: str, lease: float | None = DEFAULT_LEASE, token: str | None = None) -> dict[str, Any]:
    """The owner JSON a run writes into the lock: what a refusal shows and what staleness is decided on."""
    now = time.time()
    pid = os.getpid()
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)) or "python3"
    return {"token": token or uuid.uuid4().hex, "pid": pid, "start": start_time(pid), **identity(),
            "user": os.environ.get("USER") or str(os.getuid()), "command": command[:200], "purpose": purpose,
            "since": now, "expires": now + lease if lease else None}


def describe(holder: dict[str, Any]) -> str:
    """One phrase naming a holder: pid, controller host, command, since when."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("since") or 0)))
    return (f"pid {holder.get('pid')} on {holder.get('host') or '?'} ({holder.get('purpose') or '?'}: "
            f"{holder.get('command') or '?'}) since {since}")


def same_machine(holder: dict[str, Any], me: dict[str, str]) -> bool:
    return bool(me["boot_id"]) and all(holder.get(key) == me[key] for key in ("boot_id", "machine_id", "host"))


def stale_here(holder: dict[str, Any], now: float | None = None) -> str:
    """Why ``holder`` is stale as seen from this machine ("" when it may still be running)."""
    now = time.time() if now is None else now
    if not isinstance(holder.get("pid"), int) or not holder.get("token"):
        return "its owner record is unreadable"
    if same_machine(holder, identity()) and not alive(holder["pid"], str(holder.get("start") or "")):
        return f"pid {holder['pid']} is no longer running on {holder.get('host')}"
    expires = holder.get("expires")
    if isinstance(expires, int | float) and expires < now:
        return "its lease expired"
    return ""


def read_lock(path: str = LOCK_PATH) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return holder if isinstance(holder, dict) and _holder_shaped(holder) else {}


#: The owner record's keys as ``owner_record`` writes them (stdlib: this runs on the guest).
_HOLDER_TYPES: dict[str, tuple[type, ...]] = {
    "token": (str,), "pid": (int,), "start": (str,), "boot_id": (str,), "machine_id": (str,), "host": (str,),
    "user": (str,), "command": (str,), "purpose": (str,), "since": (int, float), "expires": (int, float, type(None))}


def _holder_shaped(holder: dict[str, Any]) -> bool:
    """Whether each key an owner record has is of the type ``owner_record`` writes (numbers finite): a record of
    another shape reads as unreadable ({}), as broken JSON does, never a ValueError in ``describe``."""
    for key, kinds in _HOLDER_TYPES.items():
        if key not in holder:
            continue
        value = holder[key]
        if isinstance(value, bool) or not isinstance(value, kinds):
            return False
        # a pid, or seconds since 1970: not NaN, not infinite, not past the year 5138
        if isinstance(value, int | float) and not -1e11 < value < 1e11:
            return False
    return True


@contextlib.contextmanager
def _guard(path: str) -> Iterator[None]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def take(owner: dict[str, Any], stale_tokens: Mapping[str, str] | None = None, path: str = LOCK_PATH,
         guard: str = GUARD_PATH) -> dict[str, Any]:
    """One attempt to take the lock. Returns ``{"taken": True, "replaced": old or None, "why": ...}``,
    ``{"taken": True, "nested": True}`` (already ours) or ``{"taken": False, "holder": current}``.

    A holder is replaced only when it is stale as seen from this machine, or its token is in ``stale_tokens`` (token
    -> why: the caller saw it stale from its own machine, the controller a deploy runs on)."""
    stale_tokens = stale_tokens or {}
    with _guard(guard):
        current = read_lock(path)
        why = ""
        if current is not None:
            if current.get("token") == owner["token"]:
                return {"taken": True, "nested": True}
            why = stale_tokens.get(str(current.get("token"))) or stale_here(current)
            if not why:
                return {"taken": False, "holder": current}
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            json.dump(owner, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        return {"taken": True, "replaced": current, "why": why}


def release(token: str, path: str = LOCK_PATH, guard: str = GUARD_PATH) -> bool:
    """Remove the lock if ``token`` holds it (a lock someone else took after ours went stale is left alone)."""
    with _guard(guard):
        current = read_lock(path)
        if current is None or current.get("token") != token:
            return False
        os.unlink(path)
        return True


# --- on the guest: hold the lock around work done there ----------------------------------------------------


@contextlib.contextmanager
def hold_local(purpose: str, wait: float = DEFAULT_WAIT, path: str = LOCK_PATH, guard: str = GUARD_PATH,
               say: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
    """Hold the guest's lock (on the guest itself) while the block runs; stdlib only.

    Nested in the run that holds it (``LABWRIGHT_GUEST_LOCK`` in the environment is its token), it goes on without
    taking it again. Else it waits up to ``wait`` seconds (one line through ``say``, default stderr) and raises
    :class:`GuestBusy` naming the holder."""
    inherited = os.environ.get(ENV, "")
    current = read_lock(path)
    if inherited and current and current.get("token") == inherited:
        yield current
        return
    owner = owner_record(purpose, lease=None)
    say = say or (lambda line: print(line, file=sys.stderr))
    deadline = time.monotonic() + wait
    told = False
    while True:
        result = take(owner, path=path, guard=guard)
        if result["taken"]:
            if result.get("replaced") is not None:
                say(f"labwright: released a stale lock ({result['why']}): {describe(result['replaced'])}")
            break
        holder = result["holder"]
        if time.monotonic() >= deadline:
            raise GuestBusy(f"another labwright run holds this guest ({describe(holder)}): let it finish and run "
                            f"again; if that run is gone, remove {path}")
        if not told:
            say(f"labwright: waiting up to {wait:g}s for this guest's lock, held by {describe(holder)}")
            told = True
        time.sleep(POLL)
    previous = os.environ.get(ENV)
    os.environ[ENV] = owner["token"]
    try:
        yield owner
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
        release(owner["token"], path=path, guard=guard)


# --- on the controller: the same through any labwright.hosts.Host ----------------------------------------------

def guest_command(action: str, argument: dict[str, Any], agent: str) -> str:
    """The shell line that runs ``take`` / ``release`` / ``read`` on the guest with this very file's code: the
    agent at ``agent`` carries it (``python3 AGENT lock ACTION JSON``). (This module's top level stays stdlib-only:
    it runs on the guest, where labwright is not installed.)"""
    from labwright.hosts.agent import command

    return (f"command -v python3 >/dev/null || {{ echo 'labwright: no python3 on the guest (the run lock needs it)' "
            f">&2; exit 127; }}; {command(agent, 'lock', action, json.dumps(argument, separators=(',', ':')))}")


def _call(host: Host, label: str, action: str, argument: dict[str, Any]) -> Any:
    from labwright.hosts.agent import ensure

    try:
        agent = ensure(host)  # once per host: labwright's agent, root's, checked by its sha256
    except OSError as exc:
        raise _Failed(f"cannot {action} the run lock {LOCK_PATH} on {label}: {exc}") from exc
    result = host.run(guest_command(action, argument, agent))
    rc, out, err = result.rc, result.stdout, result.stderr
    lines = [line for line in out.splitlines() if line.startswith("{") or line == "null" or line in ("true", "false")]
    if rc != 0 or not lines:
        last = next((line.strip() for line in reversed((err or out).splitlines()) if line.strip()), f"exit {rc}")
        raise _Failed(f"cannot {action} the run lock {LOCK_PATH} on {label}: {last}")
    return json.loads(lines[-1])


def acquire(host: Host, label: str, owner: dict[str, Any], wait: float = DEFAULT_WAIT,
            say: Callable[[str], None] = print) -> dict[str, Any]:
    """Take the guest's lock for ``owner`` (from ``owner_record``), waiting up to ``wait`` seconds; raises
    :class:`GuestBusy` naming the holder. A holder from this controller whose process is gone is released."""
    me = identity()
    deadline = time.monotonic() + wait
    stale: dict[str, str] = {}
    told = False
    while True:
        result = _call(host, label, "take", {"owner": owner, "stale": stale})
        if result["taken"]:
            if result.get("replaced") is not None:
                say(f"labwright: {label}: released a stale run lock ({result['why']}): {describe(result['replaced'])}")
            return dict(result)
        holder = result["holder"]
        if same_machine(holder, me) and not alive(int(holder.get("pid") or 0), str(holder.get("start") or "")):
            stale = {str(holder["token"]): f"pid {holder.get('pid')} is no longer running on {holder.get('host')}"}
            continue
        if time.monotonic() >= deadline:
            raise GuestBusy(f"{label}: another labwright run holds this guest ({describe(holder)}): let it finish "
                            f"and run again (waited {wait:g}s; labwright_lock_wait sets how long); if that run is "
                            f"gone, remove {LOCK_PATH} on {label}")
        if not told:
            say(f"labwright: {label}: waiting up to {wait:g}s for the run lock, held by {describe(holder)}")
            told = True
        time.sleep(POLL)


def release_remote(host: Host, label: str, token: str) -> bool:
    return bool(_call(host, label, "release", {"token": token}))


def read_remote(host: Host, label: str) -> dict[str, Any] | None:
    found = _call(host, label, "read", {})
    return found if isinstance(found, dict) else None


@contextlib.contextmanager
def held(host: Host, purpose: str, wait: float = DEFAULT_WAIT, lease: float = DEFAULT_LEASE,
         say: Callable[[str], None] = print) -> Iterator[dict[str, Any]]:
    """Hold ``host``'s run lock (a :class:`labwright.hosts.Host`) while the block runs."""
    owner = owner_record(purpose, lease)
    acquire(host, host.label, owner, wait=wait, say=say)
    try:
        yield owner
    finally:
        with contextlib.suppress(Exception):
            release_remote(host, host.label, owner["token"])


# --- pyinfra: every labwright @deploy -------------------------------------------------------------------------

# host name -> [owner, depth]: this process's lock per host (a deploy nested in another takes it once).
_HELD: dict[str, list[Any]] = {}
_TOKENS: dict[str, str] = {}
_CALLBACK_ADDED: set[int] = set()


def token_for(host_name: str) -> str:
    """This run's token for a host (known while pyinfra prepares, before the lock is taken)."""
    return _TOKENS.setdefault(host_name, uuid.uuid4().hex)


def shell_env(host_name: str | None = None) -> str:
    """``LABWRIGHT_GUEST_LOCK=<token> `` to put before a command this run starts on the guest, so that a
    ``hold_local`` there knows it is part of the run holding the lock (pyinfra's current host by default)."""
    if host_name is None:
        from pyinfra import host
        host_name = host.name
    return f"{ENV}={token_for(host_name)} "


def _pyinfra_host(host: Any) -> Host:
    """pyinfra's connected ``host`` as a :class:`labwright.hosts.Host`."""
    from labwright.hosts.connector import ConnectorHost

    return ConnectorHost.from_host(host)


def _number(host: Any, key: str, default: float) -> float:
    value = host.data.get(key)
    if value is None:
        return default
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if number < 0:
        from pyinfra.api.exceptions import DeployError
        raise DeployError(f"{key}: {value!r} is not a number of seconds (0 or more)")
    return number


def _acquire_now(host: Any, purpose: str, wait: float, lease: float) -> str:
    """Take the lock for pyinfra's ``host`` ("" when taken, else the one-line refusal)."""
    from pyinfra import logger

    entry = _HELD.get(host.name)
    if entry is not None:
        entry[1] += 1
        return ""
    owner = owner_record(purpose, lease, token=token_for(host.name))
    try:
        acquire(_pyinfra_host(host), host.name, owner, wait=wait,
                say=lambda line: logger.warning(f"{host.print_prefix}{line}"))
    except _Failed as exc:
        return f"labwright: {exc}"
    _HELD[host.name] = [owner, 1, _pyinfra_host(host)]
    _watch_failures(host.state)
    return ""


def _release_now(host: Any) -> None:
    entry = _HELD.pop(host.name, None)
    if entry is not None:
        with contextlib.suppress(Exception):
            release_remote(_pyinfra_host(host), host.name, entry[0]["token"])


def _release_after(host: Any) -> None:
    entry = _HELD.get(host.name)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        _release_now(host)


@atexit.register
def _release_all_at_exit() -> None:
    """A run that ends on an exception (pyinfra stops every host) gives back what it still holds, where it can."""
    for name in list(_HELD):
        entry = _HELD.pop(name)
        lock_host = entry[2] if len(entry) > 2 else None
        if lock_host is not None:
            with contextlib.suppress(Exception):
                release_remote(lock_host, name, entry[0]["token"])


def _watch_failures(state: Any) -> None:
    """A failed operation ends the host's run: give the lock back then, not after the lease."""
    if id(state) in _CALLBACK_ADDED:
        return
    from pyinfra.api.state import BaseStateCallback

    class ReleaseOnFailure(BaseStateCallback):
        @staticmethod
        def operation_host_error(state: Any, host: Any, op_hash: Any, retry_count: int = 0,
                                 max_retries: int = 0) -> None:
            arguments = state.get_op_data_for_host(host, op_hash).global_arguments
            if retry_count < max_retries or arguments.get("_ignore_errors") or arguments.get("_continue_on_error"):
                return
            _release_now(host)

    state.add_callback_handler(ReleaseOnFailure())
    _CALLBACK_ADDED.add(id(state))


def _refuse(state: Any, host: Any, line: str) -> bool:
    from pyinfra import logger

    logger.error(f"{host.print_prefix}{line}")
    return False


def lock_operations(purpose: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The two pyinfra operations ``(take, give_back)`` a deploy runs first and last. Both work while pyinfra
    executes (their bodies run then) and change nothing on the host that a deploy is about, so they count as "No
    change": a second run of a deploy still reports no change at all."""
    from pyinfra import host
    from pyinfra.api import FunctionCommand, operation

    # Read while pyinfra prepares: a bad value is then one DeployError line, not a traceback at execution.
    wait = _number(host, "labwright_lock_wait", DEFAULT_WAIT)
    lease = _number(host, "labwright_lock_lease", DEFAULT_LEASE)

    @operation(is_idempotent=False)
    def take_lock() -> Any:
        if host.state.is_executing:
            refused = _acquire_now(host, purpose, wait, lease)
            if refused:
                # Raised here, at execution, an OperationError would print a traceback: fail the operation instead.
                yield FunctionCommand(_refuse, (refused,), {})
                return
        host.noop(f"{LOCK_PATH} held by this run")

    @operation(is_idempotent=False)
    def give_back() -> Any:
        if host.state.is_executing:
            _release_after(host)
        host.noop(f"{LOCK_PATH} released")
        yield from ()

    return (lambda: take_lock(name=f"Run lock {LOCK_PATH} ({purpose})"),
            lambda: give_back(name=f"Release run lock {LOCK_PATH}"))


def locked(name: str) -> Callable[[Callable[..., Any]], Any]:
    """pyinfra's ``@deploy(name)``, with the guest's run lock held from before its first operation to after its
    last. Checks that run while pyinfra prepares (data errors) happen before anything, lock included."""
    import functools

    def decorate(function: Callable[..., Any]) -> Any:
        from pyinfra.api import deploy

        @functools.wraps(function)
        def body(*args: Any, **kwargs: Any) -> Any:
            from pyinfra.api.exceptions import DeployError

            from labwright.errors import LabwrightError

            take_lock, give_back = lock_operations(name)
            take_lock()
            try:
                result = function(*args, **kwargs)
            except DeployError:
                raise
            except LabwrightError as exc:
                # a refusal raised anywhere in the deploy's body (a data check after a fact, a host answer) is the
                # one line pyinfra prints for a DeployError, never a traceback (sweep at 2b91fd1: vllm_model typo)
                raise DeployError(str(exc)) from None
            give_back()
            return result

        return deploy(name)(body)

    return decorate


def _main(argv: list[str]) -> int:
    """The guest side when run as a script: ``take`` / ``release`` / ``read`` with a JSON argument; JSON out."""
    action, argument = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    if action == "take":
        print(json.dumps(take(argument["owner"], argument.get("stale") or {})))
    elif action == "release":
        print(json.dumps(release(argument["token"])))
    elif action == "read":
        print(json.dumps(read_lock()))
    else:
        print(f"labwright: unknown lock action {action!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
