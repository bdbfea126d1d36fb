"""pyinfra facts for deploys/llamacpp.py: who listens on a TCP port, and whether the host runs Ollama.

**Example:**

.. code:: python

    owner = host.get_fact(PortListeners, port=8001, service="llama-server")
    if owner["pids"] and not owner["ours"]:
        ...  # refuse: another program holds the port
"""

from __future__ import annotations

import re
from typing import Any

from pyinfra.api import FactBase

from labwright.shell import quote
from labwright.textio import ascii_digits

_PID = re.compile(r"(?a)pid=(\d{1,10})(?![0-9])")
_MAIN = "@@labwright-mainpid="


def parse_listeners(lines: list[str]) -> dict[str, Any]:
    """``ss -Hltnp`` lines plus the unit's MainPID line -> listener pids, names, and whether all are the unit's."""
    pids: set[int] = set()
    names: set[str] = set()
    main_pid = 0
    for line in lines:
        if line.startswith(_MAIN):
            value = line.removeprefix(_MAIN).strip()
            main_pid = int(value) if ascii_digits(value) else 0
            continue
        pids.update(int(p) for p in _PID.findall(line))
        names.update(re.findall(r'\(\("([^"]+)"', line))
    return {
        "pids": sorted(pids),
        "names": sorted(names),
        "main_pid": main_pid,
        "ours": bool(pids) and main_pid != 0 and pids == {main_pid},
    }


class PortListeners(FactBase):
    """Processes listening on TCP ``port``, and whether they are all the main process of systemd ``service``.

    A listener whose process is hidden (``ss`` shows no pid without root) counts as someone else's: the deploy runs
    as root, so that only happens when the port is held from outside the host's process namespace.
    """

    def command(self, port: int, service: str) -> str:
        unit = quote(f"{service}.service")
        return (
            f"ss -Hltnp 'sport = :{int(port)}' 2>/dev/null | sed 's/^/ss /'; "
            f"echo {_MAIN}$(systemctl show -p MainPID --value {unit} 2>/dev/null)"
        )

    def requires_command(self, port: int, service: str) -> str:
        return "ss"

    @staticmethod
    def default() -> dict[str, Any]:
        # What pyinfra returns when the host has no `ss` (a bare container without iproute2): no listener seen,
        # rather than None, which every caller would index (``listeners["pids"]``) and crash on.
        return {"pids": [], "names": [], "main_pid": 0, "ours": False}

    def process(self, output: list[str]) -> dict[str, Any]:
        result = parse_listeners(output)
        # A listener line without any pid is still a listener.
        if any(line.startswith("ss ") for line in output) and not result["pids"]:
            result["pids"] = [-1]
            result["ours"] = False
        return result


class OllamaPresent(FactBase):
    """Whether the host runs Ollama: an ``ollama`` systemd unit is known, or an ``ollama`` binary is on PATH."""

    def command(self) -> str:
        return (
            "if systemctl cat ollama.service >/dev/null 2>&1; then echo unit; fi; "
            "if command -v ollama >/dev/null 2>&1; then echo binary; fi; true"
        )

    @staticmethod
    def default() -> dict[str, bool]:
        return {"unit": False, "binary": False}

    def process(self, output: list[str]) -> dict[str, bool]:
        found = {line.strip() for line in output}
        return {"unit": "unit" in found, "binary": "binary" in found}


class ReadableBy(FactBase):
    """Whether ``user`` can read ``path`` (every directory on the way included).

    When the user does not exist yet (a first deploy creates it), ``nobody`` stands in: a fresh system user has no
    supplementary groups either, so what nobody cannot read, the new user cannot read.
    """

    def command(self, path: str, user: str) -> str:
        quoted_user = quote(user)
        return (
            f"if id -u {quoted_user} >/dev/null 2>&1; then u={quoted_user}; else u=nobody; fi; "
            f'if runuser -u "$u" -- test -r {quote(path)}; then echo yes; else echo no; fi'
        )

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[-1].strip() == "yes"


class GlibcVersion(FactBase):
    """The host's C library: ``getconf GNU_LIBC_VERSION`` ("glibc 2.36"), None where getconf has no answer (musl).
    Every llama-server build is refused on a guest whose glibc is older than its ELF files need
    (deploy_data.glibc_refusal)."""

    def command(self) -> str:
        return "getconf GNU_LIBC_VERSION 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = " ".join(output).strip()
        return text if text.startswith("glibc") else None
