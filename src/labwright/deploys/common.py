"""Steps every service deploy takes the same way: check the service's name, user and pinned release, refuse a port
someone else holds, install only missing packages, pip from a wheelhouse or an index."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.facts.deb import DebPackages

from labwright import aptlock
from labwright.deploy_data import DeployData
from labwright.errors import BadInput
from labwright.facts.llamacpp import PortListeners
from labwright.locks import LOCK_NAME
from labwright.schema.checks import service_user  # a systemd unit / system user name, never root
from labwright.shell import join, quote
from labwright.snapshots import deploy as snapshot_ops

RELEASE = re.compile(r"(?a)^\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?$")  # a PyPI release such as 0.12.4 or 1.80.0rc1


def service_user_version(keys: DeployData, package: str, example: str) -> tuple[str, str, str]:
    """The ``service``, ``user`` and ``version`` data of a pip-installed service, checked: plain names (never root)
    and a release of ``package`` such as ``example``; a refusal names the data key."""
    names = []
    for key in ("service", "user"):
        try:
            names.append(service_user(keys.get(key)))
        except ValueError as error:
            raise keys.fail(key, str(error)) from None
    service, user = names
    version = str(keys.get("version")).strip()
    if not RELEASE.match(version):
        raise keys.fail("version", f"{version!r} is not a release of {package} such as {example}")
    return service, user, version


def pip_source(find_links: str, extra_index_url: str = "", trusted_host: str | None = None) -> str:
    """pip's source arguments: a wheelhouse alone (--no-index), else PyPI plus an optional extra index (the CPU
    torch's, say). A plain http:// wheelhouse is refused (BadInput, one line) unless the user named its host in the
    data key ``pip_trusted_host`` (``trusted_host`` here; None: read from the host's data): pip ignores a plain http
    host otherwise, and labwright never trusts one on its own."""
    if find_links:
        args = f"--no-index --find-links {quote(find_links)}"
        if find_links.startswith("http://"):
            name = urlsplit(find_links).hostname or ""
            named = _trusted_host_data() if trusted_host is None else trusted_host
            if named.strip() != name:
                raise BadInput(f"{find_links} is plain HTTP (pip fetches it unauthenticated): serve the wheelhouse as "
                               "a directory in the guest or over https, or trust that host by name with the data key "
                               f"pip_trusted_host={name} (its files are still checked against the hashed lock); "
                               "nothing was run")
            args += f" --trusted-host {quote(name)}"
        return args
    if extra_index_url:
        return f"--extra-index-url {quote(extra_index_url)}"
    return ""


def _trusted_host_data() -> str:
    value = host.data.get("pip_trusted_host")
    return str(value) if value else ""


def lock_of(find_links: str) -> str:
    """Where a wheelhouse keeps its hashed lock (labwright.wheelhouse writes it beside the wheels)."""
    return find_links.rstrip("/") + "/" + LOCK_NAME


GUEST_PYTHON = "python3 -c 'import platform; print(platform.python_version())'"
LOCKS_DIR = "/var/lib/labwright/locks"  # on the guest: the hashed locks of the venvs installed from an index


def index_lock(requirements: list[str], extra_index_url: str, dest: str, what: str) -> str:
    """From the index (no wheelhouse): the hashed lock of ``requirements`` for the guest's CPython, made on this
    machine from the sha256 the index publishes (labwright.locks.cached_lock, kept in the cache so every deploy installs
    the same files), put at ``dest`` on the guest (root, 0644); returns pip's words to install from it alone
    (``--require-hashes -r DEST``). A lock that cannot be made stops the deploy here in one line, before the install."""
    from pyinfra.api.exceptions import DeployError
    from pyinfra.facts.server import Command
    from pyinfra.operations import files

    from labwright.errors import LabwrightError
    from labwright.locks import PYPI_SIMPLE, cached_lock
    from labwright.wheelhouse import PLATFORMS

    python = str(host.get_fact(Command, command=GUEST_PYTHON) or "").strip()
    if not re.fullmatch(r"(?a)3\.\d+\.\d+", python):
        raise DeployError(f"{host.name}: python3 answered {python!r}, not a CPython 3 version: the hashed lock for "
                          f"{what} is made for the guest's Python (install python3 there, or use a wheelhouse)")
    try:
        lock = cached_lock(requirements, python, PLATFORMS, PYPI_SIMPLE,
                           (extra_index_url,) if extra_index_url else ())
    except LabwrightError as exc:
        raise DeployError(f"the hashed lock for {what} (CPython {python}): {exc}") from None
    files.put(name=f"Hashed lock for {what} ({dest})", src=str(lock), dest=dest, user="root", group="root",
              mode="644")
    return f"{pip_source('', extra_index_url)} --require-hashes -r {quote(dest)}".strip()


def pip_requirements(find_links: str, extra_index_url: str, requirements: str,
                     trusted_host: str | None = None) -> str:
    """pip's source and requirement words for a service venv. From a wheelhouse: its hashed lock alone
    (``--require-hashes -r DIR/requirements.lock``: every file pinned by the sha256 its index published; the
    ``requirements`` are in the lock, and pip refuses a requirement without a hash). Else the index and
    ``requirements`` (shell words the caller quoted)."""
    source = pip_source(find_links, extra_index_url, trusted_host)
    if find_links:
        return f"{source} --require-hashes -r {quote(lock_of(find_links))}"
    return f"{source} {requirements}".strip()


def port_taken_by(port: int, service: str) -> str | None:
    """Who holds ``port`` on the host when it is not ``service`` itself (None: free, or already ours)."""
    listeners = host.get_fact(PortListeners, port=port, service=service)
    if listeners["pids"] and not listeners["ours"]:
        return ", ".join(listeners["names"]) or "another process"
    return None


def install_missing(packages: Iterable[str], what: str, name: str | None = None) -> None:
    """apt-get install (no recommends) only the packages the host lacks; nothing at all when none is missing, so a
    second run has no apt step. ``what`` says what they are in the refresh step's name.

    When the package registry cannot be reached (no network, a dead mirror or proxy), the step fails with apt's last
    lines and ONE line naming the packages and the fix; nothing after it (unit, start) runs, so no half-installed
    service is left enabled as if it were good, and a re-run once the mirror answers completes.

    When packages are missing, a container guest is snapshotted right before apt runs, in the same operation (host
    data ``snapshot_before``, ``snapshot_keep``, ``snapshot_required``; docs/snapshots.md); the ``snapshot_*`` data is
    checked here, while pyinfra prepares, for every deploy that installs packages this way."""
    snapshot_ops.check_snapshot_data()
    installed = host.get_fact(DebPackages)
    missing = [package for package in packages if package not in installed]
    if not missing:
        return
    names = join(missing)
    fix = (f"labwright: cannot install {', '.join(missing)} ({what}) from the package registry: apt-get %s failed "
           f"(see above); check {host.name}'s network, apt mirror and proxy, then re-run (nothing was started)")
    # cache_time: a second attempt right after a failed one need not refresh the lists again (apt.update's rule).
    fresh = "find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -60 2>/dev/null | grep -q ."
    # One operation: the guest snapshot (labwright.snapshots.deploy; snapshot_before/keep/required) right before apt.
    snapshot_ops.shell(name=name or f"Install {', '.join(missing)}", step="packages", commands=[
        # lw_apt: apt-get that waits for another apt's lock (unattended-upgrades on a fresh guest; labwright.aptlock)
        f"export DEBIAN_FRONTEND=noninteractive; {aptlock.function()}"
        f"fail() {{ [ -z \"$lw_apt_locked\" ] || exit 1; printf '%s\\n' \"$out\" | tail -n 4 >&2; "
        f"printf {quote(fix)}'\\n' \"$1\" >&2; exit 1; }}; "
        f"{fresh} || {{ lw_apt update -q && ! printf '%s' \"$out\" | grep -q '^\\(W\\|E\\): "
        f"Failed to fetch' || fail update; }}; "
        f"lw_apt install -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "
        f"--no-install-recommends {names} || fail install",
    ])


def venv_create(venv: str) -> str:
    """The shell line that makes the venv ``venv`` unless it has a pip already (the path quoted)."""
    return f"test -x {quote(venv + '/bin/pip')} || python3 -m venv {quote(venv)}"


def pip_install(pip: str, args: str, what: str, source: str, key: str, where: str | None = None) -> str:
    """The shell line for ``PIP install -q ARGS`` that, when the index or wheelhouse cannot be reached (or a
    wheel is missing), prints pip's last lines and ONE line naming what failed and the data key to fix; nothing after
    it in the deploy runs, so the service is not restarted onto a half-installed venv, and a re-run installs again.
    ``pip`` is a path (quoted here); ``args`` are shell words the caller has quoted."""
    fix = (f"labwright: cannot install {what} from {source}: pip failed (see above); check {where or host.name}'s "
           "network "
           f"or {key}, then re-run (the service was not restarted)")
    tampered = (f"labwright: cannot install {what} from {source}: a file's sha256 is not the one in the hashed lock "
                "(tampered with or replaced since the lock was made; pip names it above): rebuild the wheelhouse "
                f"from its index, or fix {key}, then re-run (nothing was installed, the service was not restarted)")
    return (f"out=$({quote(pip)} install -q --disable-pip-version-check {args} 2>&1) || "
            f"{{ printf '%s\\n' \"$out\" | tail -n 4 >&2; "
            f"if printf '%s' \"$out\" | grep -q 'DO NOT MATCH THE HASHES'; then echo {quote(tampered)} >&2; "
            f"else echo {quote(fix)} >&2; fi; exit 1; }}")
