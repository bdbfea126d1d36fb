"""Expected values for the testinfra suites in labwright/verify/.

Each value comes from a pytest option, else an environment variable, else the default that matches
inventories/local.py, so a plain run checks a host deployed with the local inventory's data:

    labwright verify base --hosts=@lxd/lw-node1
    labwright verify base --hosts=@incus/lw-node1
    labwright verify base --hosts=@lxd/web1 --base-timezone=Europe/Berlin --base-unattended-upgrades=off
    labwright verify base --hosts=@ssh/labadmin@10.99.0.53 --ssh-identity-file=KEY --sudo
    labwright verify llamacpp --hosts=@lxd/lw-node1 --llamacpp-model=/srv/models/q.gguf \
        --llamacpp-flag ctx_size=65536
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from labwright import paths
from labwright.textio import ascii_digits, loads_json

# option name -> (environment variable, default, help); None: the default is computed (see expected_from)
BASE_OPTIONS = {
    "admin-user": ("LABWRIGHT_BASE_ADMIN_USER", "labadmin", "admin user the deploy created"),
    "admin-key-file": ("LABWRIGHT_BASE_ADMIN_KEY_FILE", None,
                       "public key file whose keys must be in the admin's authorized_keys"),
    "timezone": ("LABWRIGHT_BASE_TIMEZONE", "Etc/UTC", "expected timezone"),
    "locale": ("LABWRIGHT_BASE_LOCALE", "en_US.UTF-8", "expected default locale"),
    "unattended-upgrades": ("LABWRIGHT_BASE_UNATTENDED_UPGRADES", "on", "expected unattended upgrades: on or off"),
    "permit-root-login": ("LABWRIGHT_BASE_PERMIT_ROOT_LOGIN", "no",
                          "expected PermitRootLogin in sshd -T: no, or prohibit-password where the deploy kept root's "
                          "key logins (sshd_permit_root_login)"),
}


# deploys/llamacpp.py's defaults, read from the checkout this suite ships in (the same file the deploy reads).
LLAMACPP_DEFAULTS_FILE = paths.templates_dir("llamacpp") / "defaults.toml"
LLAMACPP_OPTIONS = {
    "service": ("LABWRIGHT_LLAMACPP_SERVICE", "systemd unit name (without .service)"),
    "user": ("LABWRIGHT_LLAMACPP_USER", "user the server runs as"),
    "model": ("LABWRIGHT_LLAMACPP_MODEL", "GGUF path the server was started with"),
    "alias": ("LABWRIGHT_LLAMACPP_ALIAS", "model id /v1/models reports (default: the model path or file name)"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("labwright base", "expected state for labwright/verify/test_base.py")
    for option, (env, default, text) in BASE_OPTIONS.items():
        shown = default or "the lab key, ~/.local/share/labwright/lab_ed25519.pub"
        group.addoption(f"--base-{option}", default=None, help=f"{text} (default: ${env}, else {shown})")
    llama = parser.getgroup("labwright llamacpp", "expected state for labwright/verify/test_llamacpp.py")
    for option, (env, text) in LLAMACPP_OPTIONS.items():
        llama.addoption(f"--llamacpp-{option}", default=None,
                        help=f"{text} (default: ${env}, else templates/llamacpp/defaults.toml)")
    llama.addoption("--llamacpp-api-key-file", default=None,
                    help="the key file llama-server reads (default: $LABWRIGHT_LLAMACPP_API_KEY_FILE, else "
                         "defaults.toml)")
    llama.addoption("--llamacpp-open", default=None, metavar="true|false",
                    help="the engine runs without a key on purpose (llamacpp_open=true): reported, not failed "
                         "(default: $LABWRIGHT_LLAMACPP_OPEN, else false)")
    security = parser.getgroup("labwright security", "expected state for labwright/verify/test_security.py")
    security.addoption("--security-open-ports", default=None, metavar="PORT,...",
                       help="ports that answer /v1/models without a key on purpose: reported, not failed (default: "
                            "$LABWRIGHT_SECURITY_OPEN_PORTS, else none)")
    security.addoption("--security-max-exposure", default=None, metavar="0-10",
                       help="the highest systemd-analyze security exposure a labwright unit may have (default: "
                            "$LABWRIGHT_SECURITY_MAX_EXPOSURE, else 5.0)")
    security.addoption("--security-secret-file", action="append", default=[], metavar="PATH",
                       help="another secret file (glob) to check besides the deploys' own (repeatable; also "
                            "$LABWRIGHT_SECURITY_SECRET_FILES, colon-separated)")
    llama.addoption("--llamacpp-flag", action="append", default=[], metavar="KEY=VALUE",
                    help="expected flag overriding defaults.toml [flags], e.g. ctx_size=65536 or metrics=false "
                         "(JSON values are parsed; repeatable)")


def default_key_file() -> str:
    # Same place as labwright.lab.keys.lab_key_path(), without importing labwright (nor creating
    # its data directory) on a machine that only runs this suite.
    base = os.environ.get("LABWRIGHT_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "labwright")
    return os.path.join(base, "lab_ed25519.pub")


def as_switch(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise pytest.UsageError(f"--base-unattended-upgrades: {value!r} is not on or off")


@dataclass(frozen=True)
class BaseExpected:
    admin_user: str
    admin_key_file: str
    timezone: str
    locale: str
    unattended_upgrades: bool
    permit_root_login: str = "no"


def expected_from(config: pytest.Config) -> BaseExpected:
    def value(option: str) -> str:
        env, default, _ = BASE_OPTIONS[option]
        return config.getoption(f"--base-{option}") or os.environ.get(env) or default or ""

    return BaseExpected(
        admin_user=value("admin-user"),
        admin_key_file=os.path.expanduser(value("admin-key-file") or default_key_file()),
        timezone=value("timezone"),
        locale=value("locale"),
        unattended_upgrades=as_switch(value("unattended-upgrades")),
        permit_root_login=value("permit-root-login").strip().lower().replace("without-password", "prohibit-password"),
    )


@dataclass(frozen=True)
class LlamacppExpected:
    service: str
    user: str
    model: str
    alias: str
    flags: dict[str, object] = field(default_factory=dict)
    api_key_file: str = "/etc/llama-server/api-key"
    open: bool = False

    @property
    def port(self) -> int:
        return int(str(self.flags["port"]))

    @property
    def url(self) -> str:
        host = str(self.flags.get("host") or "127.0.0.1")
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', 'auto') else host}:{self.port}"


def parse_flag_value(text: str) -> object:
    try:
        return loads_json(text)
    except json.JSONDecodeError:
        return text


def llamacpp_expected_from(config: pytest.Config) -> LlamacppExpected:
    defaults = tomllib.loads(LLAMACPP_DEFAULTS_FILE.read_text()) if LLAMACPP_DEFAULTS_FILE.is_file() else {}
    service_defaults = defaults.get("service", {})

    def value(option: str) -> str:
        env, _ = LLAMACPP_OPTIONS[option]
        return str(config.getoption(f"--llamacpp-{option}") or os.environ.get(env)
                   or service_defaults.get(option) or "")

    flags = dict(defaults.get("flags", {}))
    for item in config.getoption("--llamacpp-flag"):
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"--llamacpp-flag: {item!r} is not KEY=VALUE")
        flags[key.strip().replace("-", "_")] = parse_flag_value(text)
    if "port" not in flags:
        raise pytest.UsageError("--llamacpp-flag port=N is needed (no templates/llamacpp/defaults.toml here)")
    key_file = str(config.getoption("--llamacpp-api-key-file") or os.environ.get("LABWRIGHT_LLAMACPP_API_KEY_FILE")
                   or service_defaults.get("api_key_file") or "/etc/llama-server/api-key")
    open_text = str(config.getoption("--llamacpp-open") or os.environ.get("LABWRIGHT_LLAMACPP_OPEN") or "false")
    if open_text.strip().lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise pytest.UsageError(f"--llamacpp-open: {open_text!r} is not true or false")
    return LlamacppExpected(value("service"), value("user"), value("model"), value("alias"), flags, key_file,
                            open_text.strip().lower() in ("1", "true", "yes", "on"))


#: How often a command through ``lxc exec`` is asked when its answer was lost (see steady_lxc_run), and the pause
#: before the second try, doubled before each next one (0.2 + 0.4 + 0.8 + 1.6 s): a loaded host loses answers in
#: bursts, and three tries at once were all lost in a loaded suite run (testinfra then read ``uname -s`` as ''
#: and raised NotImplementedError for the service module).
LXC_TRIES = 5
LXC_RETRY_PAUSE = 0.2
#: The line each command run through ``lxc exec`` ends its stderr with: its absence means the answer was lost.
END_MARK = "@@labwright-verify-end"


def steady_lxc_run(self, command: str, *args: str, **kwargs: object):
    """testinfra's ``lxc://`` backend runs each command as ``lxc exec NAME --mode=non-interactive -- /bin/sh -c CMD``
    (testinfra/backend/lxc.py, LxcBackend.run). On a loaded host LXD 5.0 can lose a command's output: its log says
    "Failed getting exec control websocket reader, killing command" and the client gets exit 0 with nothing on
    stdout or stderr (seen in this repo's loaded runs: ``stat -c %U`` read ``''``, then ``ps -o user= -p PID``).
    Any command can be hit, so each one is run in a subshell followed by a mark on stderr (``END_MARK``): an answer
    without the mark was lost and is asked again (the verify suites only read), a bounded number of times; the mark
    is taken off before testinfra sees the answer, which is otherwise exactly the command's. The ``incus://`` backend
    (labwright.verify.hostspec.IncusBackend) runs the same through ``incus exec``: its ``CLIENT``."""
    cmd = self.get_command(command, *args)
    client = getattr(self, "CLIENT", "lxc")
    # The mark on both streams: LXD can lose one stream's websocket and deliver the other (a loaded full run read
    # `stat -Lc %a` as '' with stderr's mark intact).
    marked = f"( {cmd}\n); lw_rc=$?; echo {END_MARK}; echo {END_MARK} >&2; exit $lw_rc"
    tail = f"{END_MARK}\n".encode()
    for attempt in range(LXC_TRIES):
        if attempt:
            time.sleep(LXC_RETRY_PAUSE * 2 ** (attempt - 1))
        out = self.run_local(f"{client} exec %s --mode=non-interactive -- /bin/sh -c %s", self.name, marked)
        err, std = out.stderr_bytes, out.stdout_bytes
        if err.endswith(tail) and std.endswith(tail):
            out._stderr, out._stdout = err[: -len(tail)], std[: -len(tail)]
            out.command = self.encode(cmd)
            return out
    # Not an empty answer testinfra would misread (an empty `uname -s` is "no known system type"): say what happened.
    raise RuntimeError(f"{client} exec {self.name}: the daemon lost the answer to {cmd!r} {LXC_TRIES} times in a row "
                       f"(no output, no end mark: a loaded host); re-run the verify suite")


steady_lxc_run.steady = True  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SecurityExpected:
    open_ports: frozenset[int]
    max_exposure: float
    secret_files: tuple[str, ...]


def security_expected_from(config: pytest.Config) -> SecurityExpected:
    """--security-* options, else LABWRIGHT_SECURITY_* variables; junk in either is a usage error naming it."""
    def given(option: str, env: str) -> tuple[str, str]:
        value = config.getoption(f"--security-{option}")
        return (f"--security-{option}", str(value)) if value is not None else (env, os.environ.get(env, ""))

    name, text = given("open-ports", "LABWRIGHT_SECURITY_OPEN_PORTS")
    ports = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if not ascii_digits(item) or not 0 < int(item) < 65536:
            raise pytest.UsageError(f"{name}: {text!r} is not a list of TCP ports ({item!r}); give port numbers "
                                    "separated by commas, e.g. 8001,8880")
        ports.add(int(item))
    name, text = given("max-exposure", "LABWRIGHT_SECURITY_MAX_EXPOSURE")
    try:
        exposure = float(text) if text.strip() else 5.0
    except ValueError:
        exposure = -1.0
    if not 0.0 <= exposure <= 10.0:  # nan fails both
        raise pytest.UsageError(f"{name}: {text!r} is not a systemd-analyze exposure; give a number from 0 to 10 "
                                "(default 5.0)")
    extra = [*config.getoption("--security-secret-file"),
             *(part for part in os.environ.get("LABWRIGHT_SECURITY_SECRET_FILES", "").split(":") if part.strip())]
    relative = [path for path in extra if not path.startswith("/")]
    if relative:
        raise pytest.UsageError(f"--security-secret-file / LABWRIGHT_SECURITY_SECRET_FILES: {relative[0]!r} is not "
                                "an absolute path on the host; give /path/to/file (globs allowed)")
    return SecurityExpected(frozenset(ports), exposure, tuple(extra))


def pytest_configure(config: pytest.Config) -> None:
    # Check the options once, up front: a typo is a usage error, not twenty failed tests.
    expected_from(config)
    llamacpp_expected_from(config)
    security_expected_from(config)
    # then each host once: a wrong or unreachable --hosts is one line before any test, not an error per test
    from labwright.verify.hostspec import reach

    for given in (h.strip() for h in str(config.getoption("hosts", None) or "").split(",") if h.strip()):
        problem = reach(given)
        if problem is not None:
            raise pytest.UsageError(problem)
    # pyinfra's host names (@lxd/NAME, @incus/NAME, @pct/NODE/VMID, @ssh/HOST) as testinfra's, for a suite run by
    # pytest itself (labwright verify translates them before pytest starts); @pct and @incus hosts through labwright's
    # backends.
    from labwright.errors import BadInput
    from labwright.verify.hostspec import IncusBackend, register_pct_backend, translate_hosts

    register_pct_backend()
    if getattr(config.option, "hosts", None):
        try:
            config.option.hosts = translate_hosts(config.option.hosts)
        except BadInput as exc:
            raise pytest.UsageError(str(exc)) from None
    from testinfra.backend.lxc import LxcBackend

    for backend in (LxcBackend, IncusBackend):
        if not getattr(backend.run, "steady", False):
            backend.run = steady_lxc_run


@pytest.fixture(scope="session")
def llamacpp_expected(pytestconfig: pytest.Config) -> LlamacppExpected:
    return llamacpp_expected_from(pytestconfig)


@pytest.fixture(scope="session")
def security_expected(pytestconfig: pytest.Config) -> SecurityExpected:
    return security_expected_from(pytestconfig)


@pytest.fixture(scope="session")
def base_expected(pytestconfig: pytest.Config) -> BaseExpected:
    return expected_from(pytestconfig)


@pytest.fixture(scope="session")
def admin_public_keys(base_expected: BaseExpected) -> list[str]:
    """The "type base64" part of each key in the expected public key file (comments may differ)."""
    path = Path(base_expected.admin_key_file)
    if not path.is_file():
        pytest.fail(f"public key file {path} does not exist; pass --base-admin-key-file=PATH", pytrace=False)
    keys = [" ".join(line.split()[:2]) for line in path.read_text().splitlines() if line.strip()]
    return [k for k in keys if not k.startswith("#")]
