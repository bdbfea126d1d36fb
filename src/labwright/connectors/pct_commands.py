"""``pct``'s node-side command lines and what pct says, pure (quoting and parsing are tested on their own).

Used by the ``@pct`` connector (labwright.connectors.pct) and the node Host's ``pct exec`` (labwright.hosts.pct).
"""

from __future__ import annotations

import re

from labwright.shell import join, quote


# --- node-side command lines ------------------------------------------------------------------
def _path_arg(path: str) -> str:
    # pct parses a leading '-' as an option; './' keeps the same file (pct resolves relative to /).
    return f"./{path}" if path.startswith("-") else path


def format_perms(perms: int | str) -> str:
    """pct's --perms value (octal digits) from an int mode or a string like '644'/'0644'."""
    if isinstance(perms, int):
        if not 0 <= perms <= 0o7777:
            raise ValueError(f"file mode {perms:o} out of range")
        return f"0{perms:o}"
    if not re.fullmatch(r"0?[0-7]{1,4}", perms):
        raise ValueError(f"file mode {perms!r} is not octal")
    return perms if perms.startswith("0") else f"0{perms}"


#: The PATH a command gets in the CT. `pct exec` keeps the pct CLI's own environment (--keep-env, default 1), whose
#: PATH is /sbin:/bin:/usr/sbin:/usr/bin (pve-common 9.2.1 CLIHandler.pm 688; pve-container 6.1.10 pct.pm 230-251):
#: no /usr/local. Over SSH, root on Debian has /usr/local/sbin and /usr/local/bin first; a deploy must not behave
#: differently through @pct, so the CT command gets Debian's root PATH (a user's ``_env`` PATH still wins: pyinfra
#: puts it inside the ``sh -c`` command).
CT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def pct_exec_command(vmid: int, unix_command: str) -> str:
    """The node's command line running ``unix_command`` (shell syntax) in CT ``vmid``, with ``CT_PATH``."""
    return join(["pct", "exec", str(vmid), "--", "env", f"PATH={CT_PATH}", "sh", "-c", unix_command])


def _transfer_options(perms: int | str | None, user: str | None, group: str | None) -> list[str]:
    options = []
    if perms is not None:
        options += ["--perms", format_perms(perms)]
    if user:
        options += ["--user", user]
    if group:
        options += ["--group", group]
    return options


def pct_push_command(vmid: int, node_path: str, ct_path: str, perms: int | str | None = None,
                     user: str | None = None, group: str | None = None) -> str:
    """Copy the node's ``node_path`` to ``ct_path`` inside CT ``vmid``."""
    argv = ["pct", "push", str(vmid), _path_arg(node_path), _path_arg(ct_path)]
    return join(argv + _transfer_options(perms, user, group))


def pct_pull_command(vmid: int, ct_path: str, node_path: str, perms: int | str | None = None) -> str:
    """Copy ``ct_path`` inside CT ``vmid`` to the node's ``node_path``."""
    argv = ["pct", "pull", str(vmid), _path_arg(ct_path), _path_arg(node_path)]
    return join(argv + _transfer_options(perms, None, None))


def pct_status_command(vmid: int) -> str:
    return join(["pct", "status", str(vmid)])


def parse_pct_status(stdout: str) -> str | None:
    """'running', 'stopped', ... from ``pct status`` output; None if there is no status line."""
    match = re.search(r"^status:\s*(\S+)", stdout, re.MULTILINE)
    return match.group(1) if match else None


# --- what pct says (checked against pve-container 6.1.10 / pve-common 9.2.1; docs/connectors.md and
# tests/conformance/pct/ name the lines) ------------------------------------------------------------------
TASK_WARNINGS_LINE = re.compile(r"(?a)^Task finished with (\d{1,10}) warning\(s\)!$")
NOT_RUNNING_LINES = (
    re.compile(r"(?a)^container '\d+' not running!$"),  # pct exec/enter since pve-container 4.0-2
    re.compile(r"^can only (push files to|pull files from) a running (CT|VM)\b"),  # pct push/pull
    re.compile(r"lxc-attach: .*Failed to get init pid"),  # pct exec before 4.0-2: lxc-attach's own line
)


def pct_says_missing(stderr: str) -> bool:
    """pct's line for a VMID with no config on this node (load_config: "Configuration file
    'nodes/NODE/lxc/VMID.conf' does not exist")."""
    return bool(re.search(r"^Configuration file '\S+\.conf' does not exist$", stderr, re.MULTILINE))


def pct_says_not_running(stderr: str) -> bool:
    """Any of the lines pct (or, before 4.0-2, lxc-attach) prints for a stopped CT."""
    return any(pattern.search(line) for line in stderr.splitlines() for pattern in NOT_RUNNING_LINES)


def pct_task_warnings(stderr: str) -> int:
    """N of a task that ended "TASK WARNINGS: N" (printed as "Task finished with N warning(s)!"): a success."""
    for line in stderr.splitlines():
        match = TASK_WARNINGS_LINE.match(line.strip())
        if match:
            return int(match.group(1))
    return 0


def pct_transfer_failure(exit_code: int, stderr: str) -> str | None:
    """What went wrong in a ``pct push``/``pct pull``, in one line; None if pct reported nothing.

    Both run the copy in a forked task and exit 0 whatever it did: a task that died is seen only by its
    message on stderr. A copy that fails silently (a short write) reports nothing at all, so None never
    means the file arrived: every transfer is verified by size and sha256 as well.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    problems = [line for line in lines if not TASK_WARNINGS_LINE.match(line)]
    if exit_code != 0:
        return "; ".join(problems or lines) or f"pct exited {exit_code} without a message"
    return "; ".join(problems) or None


def pct_exec_script(vmid: int, script: str, *args: str) -> str:
    """The node's command line running a POSIX sh ``script`` with ``args`` ($1...) in CT ``vmid``."""
    return join(["pct", "exec", str(vmid), "--", "sh", "-c", script, "sh", *args])


def ct_absolute(ct_path: str) -> str:
    """pct push/pull resolve a relative path from / in the CT (they chdir('/') first)."""
    return ct_path if ct_path.startswith("/") else "/" + ct_path


# Tools the scripts below run in the CT; pct exec finds them only in its own PATH (tests/conformance/pct).
CT_SCRIPT_TOOLS = ("wc", "sha256sum", "rm", "readlink", "stat", "chown", "chgrp", "chmod", "mv")

# Size and sha256 of $1, one "SIZE SHA256" line; POSIX tools only (busybox has them too). pct exec's PATH is
# /sbin:/bin:/usr/sbin:/usr/bin (the pct CLI sets it), where these live.
DIGEST_SCRIPT = 'set -e; s=$(wc -c < "$1"); h=$(sha256sum < "$1"); echo "$(echo $s) ${h%% *}"'

# Check the staged copy $1 against "SIZE SHA256" ($3), then move it over $2 keeping the replaced file's owner,
# group and mode ($4=1: mode, $5=1: owner not given by the push), as pct's own in-place write would. Exit 3 with
# the staged copy's "SIZE SHA256" on a mismatch; the staged copy never stays behind.
INSTALL_SCRIPT = """t=$1 d=$2
fail() { rm -f "$t"; echo "$*" >&2; exit 4; }
[ -f "$t" ] || { echo "missing"; exit 3; }
s=$(wc -c < "$t") && h=$(sha256sum < "$t") || fail "cannot read the pushed copy"
got="$(echo $s) ${h%% *}"
if [ "$got" != "$3" ]; then rm -f "$t"; echo "$got"; exit 3; fi
if [ -L "$d" ]; then d=$(readlink -f "$d") || fail "cannot resolve symlink $2"; fi
[ -d "$d" ] && fail "$2 is a directory"
if [ -e "$d" ]; then
  if [ "$5" = 1 ]; then chown "$(stat -c %u "$d")" "$t" || fail "cannot keep the owner of $2"; fi
  chgrp "$(stat -c %g "$d")" "$t" || fail "cannot keep the group of $2"
  if [ "$4" = 1 ]; then chmod "$(stat -c %a "$d")" "$t" || fail "cannot keep the mode of $2"; fi
fi
mv -f "$t" "$d" || fail "cannot move the pushed copy over $2"
"""


def parse_size_and_sha256(stdout: str) -> tuple[int, str] | None:
    """(size, sha256) from a "SIZE SHA256" line; None if there is none."""
    match = re.search(r"(?a)^(\d{1,20}) ([0-9a-f]{64})$", stdout, re.MULTILINE)
    return (int(match.group(1)), match.group(2)) if match else None


def describe_digest(size: int, sha256: str) -> str:
    return f"{size} bytes, sha256 {sha256[:16]}"


def then_remove(command: str, path: str) -> str:
    """``command``, then remove ``path`` whatever happened, keeping the command's exit code."""
    return f"{command}; rc=$?; rm -f {quote(path)}; exit $rc"


def one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())
