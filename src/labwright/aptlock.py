"""Every apt-get labwright runs on a host waits for another apt to finish instead of failing on its lock.

A fresh Debian or Ubuntu guest runs unattended-upgrades (apt-daily-upgrade.timer, ``Persistent=true``: it fires at the
first boot of a container made from an image whose timer stamp is old) and apt-daily's ``apt-get update``; while they
run, a deploy's ``apt-get install`` failed at once with ``E: Could not get lock /var/lib/dpkg/lock-frontend. It is
held by process 1727 (unattended-upgr)`` and the deploy stopped as if the mirror were unreachable.

apt's own ``-o DPkg::Lock::Timeout=N`` does not cover it: it is read only where apt takes dpkg's lock
(apt-pkg/deb/debsystem.cc, ``debSystem::Lock``), while ``apt-get update`` takes the lists lock through
``pkgAcquire::GetLock`` without any wait (Debian/apt apt-pkg/update.cc ``ListUpdate``; checked on apt 2.6.1:
``apt-get -o DPkg::Lock::Timeout=20 update`` with /var/lib/apt/lists/lock held fails after 1 s). So the wait is
labwright's, one shell function for every lock apt names: ``lw_apt ARGS`` runs ``apt-get ARGS`` (output in ``$out``,
as the callers' error lines expect); on "Could not get lock" it says once what it waits for, waits until the holding
process exits (``tail --pid``, observed, not a fixed sleep), and tries again, for at most :data:`WAIT_S` seconds;
then it prints ONE line naming the holder and the fix and returns 3 (``lw_apt_locked=1``).
"""

from __future__ import annotations

from labwright.shell import join

WAIT_S = 900  # unattended-upgrades on a guest that has not been upgraded for months can take minutes


def function(wait_s: int = WAIT_S) -> str:
    """The ``lw_apt`` shell function (POSIX sh, one line ending in ``;``), to put before commands that call it.
    Call it with apt-get's command first (``lw_apt install -y ...``): its messages name ``$1``."""
    if not 0 < wait_s <= 86_400:
        raise ValueError(f"apt lock wait {wait_s!r} s is not in 1-86400")
    fix = ("let it finish (or stop it: systemctl stop unattended-upgrades apt-daily.service), then re-run "
           "(nothing was installed)")
    return (
        "lw_apt() { lw_apt_locked=; lw_said=; lw_end=$(( $(date +%s) + " + str(wait_s) + " )); "
        "while :; do "
        # C messages: the lock line is matched below, whatever the host's language is
        "out=$(LC_ALL=C.UTF-8 LANGUAGE= apt-get \"$@\" 2>&1) && return 0; "
        "printf '%s\\n' \"$out\" | grep -q '^E: Could not get lock' || return 1; "
        "lw_who=$(printf '%s\\n' \"$out\" | sed -n 's/^E: Could not get lock \\([^ ]*\\)\\. It is held by "
        "\\(process [0-9]* ([^)]*)\\).*/\\2 (\\1)/p' | head -n 1); "
        "lw_who=${lw_who:-another apt or dpkg}; "
        "lw_pid=$(printf '%s\\n' \"$lw_who\" | sed -n 's/^process \\([0-9][0-9]*\\).*/\\1/p'); "
        "lw_left=$(( lw_end - $(date +%s) )); "
        "if [ \"$lw_left\" -le 0 ]; then printf '%s\\n' \"$out\" | tail -n 2 >&2; "
        "echo \"labwright: apt-get $1: the apt lock is still held by $lw_who after " + str(wait_s) + " s: "
        + fix + "\" >&2; lw_apt_locked=1; return 3; fi; "
        "[ -n \"$lw_said\" ] || { echo \"labwright: apt-get $1 waits for $lw_who to release the apt lock "
        "(up to " + str(wait_s) + " s)\" >&2; lw_said=1; }; "
        "if [ -n \"$lw_pid\" ] && kill -0 \"$lw_pid\" 2>/dev/null; then "
        "timeout \"$lw_left\" tail --pid=\"$lw_pid\" -f /dev/null 2>/dev/null || :; "
        "else sleep 1 || :; fi; "  # a holder apt could not name, or one already gone: try again shortly
        "done; }; "
    )


def command(args: str, wait_s: int = WAIT_S) -> str:
    """One shell command: ``apt-get ARGS`` (``args``: shell words the caller quoted) with the lock wait, its output
    printed (to stderr when it fails) as apt-get's own would be."""
    return (f"export DEBIAN_FRONTEND=noninteractive; {function(wait_s)}"
            f"if lw_apt {args}; then printf '%s\\n' \"$out\"; else rc=$?; "
            f"[ -n \"$lw_apt_locked\" ] || printf '%s\\n' \"$out\" >&2; exit $rc; fi")


def install(packages: list[str], wait_s: int = WAIT_S) -> str:
    """``apt-get install`` of ``packages`` (no recommends, keep changed config files) with the lock wait."""
    names = join(packages)
    return command("install -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "
                   f"--no-install-recommends {names}", wait_s)


def update(cache_minutes: int | None = None, wait_s: int = WAIT_S) -> str:
    """``apt-get update`` with the lock wait; with ``cache_minutes``, nothing when a package list is younger (as
    pyinfra's ``apt.update(cache_time=...)``)."""
    refresh = command("update -q", wait_s)
    if cache_minutes is None:
        return refresh
    return (f"find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -{int(cache_minutes)} 2>/dev/null "
            f"| grep -q . || {{ {refresh}; }}")


def argv(args: list[str], wait_s: int = WAIT_S) -> list[str]:
    """``apt-get ARGS`` with the lock wait, as an argv for labwright's own processes on this machine."""
    return ["sh", "-c", command('"$@"', wait_s), "lw_apt", *args]


#: The line in a shell script of labwright.data that :func:`in_script` replaces with the ``lw_apt`` function.
SCRIPT_PLACEHOLDER = b"# @labwright.aptlock function@"


def in_script(text: bytes, wait_s: int = WAIT_S) -> bytes:
    """A data script with ``lw_apt`` defined where its placeholder line is (a script without one is refused: it
    would call apt-get without the wait)."""
    if SCRIPT_PLACEHOLDER not in text:
        raise ValueError("script has no lw_apt placeholder line")
    return text.replace(SCRIPT_PLACEHOLDER, function(wait_s).rstrip("; ").encode() + b";", 1)
