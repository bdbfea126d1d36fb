"""``labwright verify --hosts``: pyinfra's host names (what the inventories and every other command say) translated
to the host specs testinfra reads, checked before pytest starts.

- ``@lxd/NAME``, ``@lxd/REMOTE:NAME`` -> ``lxc://NAME`` (testinfra's lxc backend: ``lxc exec NAME``);
- ``@incus/NAME``, ``@incus/REMOTE:NAME`` -> ``incus://NAME`` (``IncusBackend`` below: ``incus exec NAME``; testinfra
  10.2 has no Incus backend of its own, its lxc one runs the ``lxc`` client);
- ``@pct/NODE/VMID`` -> ``pct://NODE?container=VMID`` (``PctBackend`` below: ``ssh NODE pct exec VMID -- ...``);
- ``@ssh/HOST`` (``@ssh/USER@HOST:PORT``) -> ``ssh://HOST`` (testinfra's ssh backend: the ``ssh`` command, so
  ``~/.ssh/config`` applies);
- ``@local`` -> ``local://``;
- testinfra's own specs (``lxc://NAME``, ``ssh://HOST``, ``docker://...``) and bare host names pass unchanged.

Several hosts are comma-separated, as testinfra takes them. Pure but for PctBackend and IncusBackend, which testinfra
loads by name (``pct`` and ``incus`` in testinfra.backend.BACKENDS, registered by the suites' conftest.py).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from labwright.errors import BadInput
from labwright.hostnames import BadHostName, LxdName, PctName, parse_host_name
from labwright.textio import ascii_digits

#: What --hosts takes, for the error lines.
FORMS = ("@lxd/NAME, @incus/NAME, @pct/NODE/VMID, @ssh/HOST (or testinfra's lxc://NAME, ssh://HOST), "
         "comma-separated")
#: ``[USER@]HOST[:PORT]`` as ssh takes it: no spaces, slashes or shell characters.
SSH_TARGET = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")
#: testinfra's backend name for @pct hosts, and the class it loads.
PCT_BACKEND = ("pct", "labwright.verify.hostspec.PctBackend")
#: testinfra's backend name for @incus hosts, and the class it loads.
INCUS_BACKEND = ("incus", "labwright.verify.hostspec.IncusBackend")


def translate_host(name: str) -> str:
    """One host name as testinfra's --hosts takes it; a malformed pyinfra name is BadInput naming it."""
    name = name.strip()
    if not name:
        raise BadInput(f"--hosts: an empty host name; give {FORMS}")
    if name == "@local":
        return "local://"
    if not name.startswith("@"):
        return name  # testinfra's own spec (lxc://NAME, ssh://HOST, ...) or a bare host (paramiko), as before
    connector, _, target = name.partition("/")
    if connector == "@ssh":
        if not SSH_TARGET.match(target):
            raise BadInput(f"--hosts {name}: {target!r} is not a host ssh can reach ([USER@]HOST[:PORT]); give "
                           f"{FORMS}")
        return f"ssh://{target}"
    try:
        parsed = parse_host_name(name)
    except BadHostName as exc:
        raise BadInput(f"--hosts: {exc}") from None
    if isinstance(parsed, LxdName):
        scheme = "incus" if parsed.flavour == "incus" else "lxc"
        return f"{scheme}://{parsed.remote + ':' if parsed.remote else ''}{parsed.instance}"
    if isinstance(parsed, PctName):
        return f"pct://{parsed.node}?container={parsed.vmid}"
    raise BadInput(f"--hosts {name}: not a host name labwright verify knows; give {FORMS}")


def translate_hosts(text: str) -> str:
    """``--hosts`` as given (comma-separated pyinfra or testinfra names) as testinfra's --hosts value."""
    return ",".join(translate_host(part) for part in text.split(","))


def register_pct_backend() -> None:
    """Make ``pct://NODE?container=VMID`` and ``incus://NAME`` testinfra backends (called from the suites'
    conftest.py)."""
    from testinfra.backend import BACKENDS

    BACKENDS.setdefault(*PCT_BACKEND)
    BACKENDS.setdefault(*INCUS_BACKEND)


@functools.cache
def _pct_backend() -> type:
    from testinfra.backend.ssh import SshBackend

    from labwright.shell import quote

    class PctBackend(SshBackend):
        """A Proxmox container through its node: ``ssh NODE pct exec VMID -- /bin/sh -c CMD`` (NODE as
        ``~/.ssh/config`` names it; pct needs root there)."""

        NAME = "pct"

        def __init__(self, hostspec: str, container: str | None = None, *args: Any, **kwargs: Any) -> None:
            if container is None or not ascii_digits(container):
                raise RuntimeError(f"pct://{hostspec}: needs ?container=VMID (labwright verify --hosts "
                                   "@pct/NODE/VMID writes it)")
            self.vmid = container
            super().__init__(hostspec, *args, **kwargs)

        def run(self, command: str, *args: str, **kwargs: Any) -> Any:
            cmd = self.get_command(command, *args)
            out = self.run_ssh(f"pct exec {quote(self.vmid)} -- /bin/sh -c {quote(cmd)}")
            out.command = self.encode(cmd)
            return out

        def get_pytest_id(self) -> str:
            return f"pct://{self.host.name}/{self.vmid}"

    return PctBackend


@functools.cache
def _incus_backend() -> type:
    from testinfra.backend.lxc import LxcBackend

    class IncusBackend(LxcBackend):
        """An Incus instance through the ``incus`` client: ``incus exec NAME --mode=non-interactive -- /bin/sh -c
        CMD``, as testinfra's lxc backend runs ``lxc exec`` (testinfra/backend/lxc.py, LxcBackend.run, pytest-testinfra
        10.2.2); ``REMOTE:NAME`` and ``INCUS_SOCKET`` as the client takes them. The suites' conftest.py makes its
        ``run`` the steady one (``steady_lxc_run``, with ``CLIENT``)."""

        NAME = "incus"
        CLIENT = "incus"

        def run(self, command: str, *args: str, **kwargs: Any) -> Any:
            cmd = self.get_command(command, *args)
            out = self.run_local(f"{self.CLIENT} exec %s --mode=non-interactive -- /bin/sh -c %s", self.name, cmd)
            out.command = self.encode(cmd)
            return out

    return IncusBackend


def __getattr__(name: str) -> Any:
    # PctBackend and IncusBackend are built on first use: importing this module (the CLI's --hosts check) needs no
    # testinfra.
    if name == "PctBackend":
        return _pct_backend()
    if name == "IncusBackend":
        return _incus_backend()
    raise AttributeError(name)


#: How the suites say a host did not answer (labwright verify turns it into exit 1, any other usage error exit 2).
UNREACHABLE = "cannot reach it"


def reach(given: str) -> str | None:
    """Why the host testinfra names ``given`` (one --hosts entry, translated) does not answer a ``true``, as one
    line naming it; None when it does. A missing instance says "no such host" (bad input), anything else
    :data:`UNREACHABLE`. The suites ask this once per host before any test (conftest.pytest_configure), so a
    wrong --hosts is one line, not an error per test (CLI sweep at 2b91fd1: 1,456 lines for @lxd/nosuch)."""
    import testinfra

    register_pct_backend()
    try:
        answer = testinfra.get_host(given).run("true")
        code, said = answer.rc, (answer.stderr or answer.stdout or "").strip()
    except Exception as exc:  # a backend's own failure to connect (ssh's 255 is raised with its result)
        result = next((arg for arg in exc.args if hasattr(arg, "stderr")), None)
        code, said = 255, str(result.stderr if result is not None else exc).strip()
    if code == 0:
        return None
    last = said.splitlines()[-1] if said else f"exit {code}"
    if "not found" in last.lower() or "no such" in last.lower():
        return f"--hosts {given}: no such host ({last}); give an existing one"
    return f"--hosts {given}: {UNREACHABLE} ({last}); nothing was checked"
