"""A guest's output read through the `lxc` command line whole, or asked again.

LXD 5.0.2's `lxc exec` can end before a short command's stdout has crossed its websocket: the exit status arrives,
the output does not (the full run at 4d45bbb: `ls /etc/pve/nodes` answered '' for a directory holding three; the
same loss in labwright's own exec is why its answers carry an end mark, labwright.verify.conftest). So the command
prints a mark after its output, and an answer without the mark is asked again.
"""

from __future__ import annotations

import shlex
import subprocess

MARK = "@@labwright-end-of-output"


def guest_output(name: str, *command: str, tries: int = 5, timeout: int = 600) -> str:
    """stdout of ``command`` run in the guest ``name`` (through `sh -c`), once its end mark arrived; AssertionError
    naming the command when it exits non-zero, or when ``tries`` answers all came without the mark."""
    script = f"{shlex.join(command)}; status=$?; printf '\\n%s\\n' {MARK}; exit $status"
    answers = []
    for _ in range(tries):
        done = subprocess.run(["lxc", "exec", name, "--", "sh", "-c", script], capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"{shlex.join(command)} on {name}: exit {done.returncode}: {done.stderr[-2000:]}")
        head, mark, _ = done.stdout.rpartition(f"\n{MARK}\n")
        if mark:
            return head
        answers.append(done.stdout[-200:])
    raise AssertionError(f"{shlex.join(command)} on {name}: {tries} answers came without their end: {answers}")
