"""testinfra checks of a host as a whole, as docs/security.md promises it (issue 31): what answers on the network
without a key, how hardened the units labwright wrote are, and who can read its secret files.

    labwright verify security --hosts=@lxd/lw-node1
    labwright verify security --hosts=@ssh/labadmin@llm1 --sudo --security-open-ports=8880

- **Ports**: every TCP port listening beyond loopback (``ss -Hltn``) is asked ``GET /v1/models`` without a key, from
  the host itself. An OpenAI-shaped answer (HTTP 200, a JSON object with a ``data`` list: what every engine and the
  gateway serve there) is a model endpoint anyone on the network uses: a failure naming the port and the process,
  or a warning (:class:`OpenPort`) for a port in ``--security-open-ports`` / ``LABWRIGHT_SECURITY_OPEN_PORTS``
  (open on purpose, as llamacpp_open=true / kokoro_open=true). 401/403, a web page, or no HTTP at all (sshd) pass.
- **Units**: every unit file whose first line says ``# Managed by labwright`` scores at most
  ``--security-max-exposure`` / ``LABWRIGHT_SECURITY_MAX_EXPOSURE`` (default 5.0) in ``systemd-analyze
  security`` (the live unit: what systemd applies, drop-ins included). A unit run as root by design says
  ``# labwright: runs as root`` and is listed, not scored (the host-upgrade and GPU device-node units).
- **Stack environments**: each engine stack environment (``/opt/labwright/stacks/*/stack.json``) whose
  dependencies were installed without a hashed lock (``stack_unpinned_dependencies=true``, asked for by name; or
  built before stack dependency locks existed) is a warning (:class:`UnpinnedDependencies`) naming it.
- **Secret files**: each file in :data:`SECRET_FILES` that exists (and any given with ``--security-secret-file``
  or ``LABWRIGHT_SECURITY_SECRET_FILES``, colon-separated) is a regular file no other user can read or write and
  only its owner can write.

Exit codes as for every suite: 0 all passed (warnings listed), 1 a check failed, 2 bad options.
"""

from __future__ import annotations

import re
import tomllib
import warnings

from labwright import paths
from labwright.shell import join, quote
from labwright.textio import ascii_digits, loads_json

TABBYAPI_DIR = str(tomllib.loads((paths.templates_dir("tabbyapi") / "defaults.toml").read_text())
                   ["source"]["dir"])
LLAMACPP_KEY = str(tomllib.loads((paths.templates_dir("llamacpp") / "defaults.toml").read_text())
                   ["service"]["api_key_file"])

#: What labwright's deploys write that holds a key, a token or a password (glob patterns, on the host).
SECRET_FILES = (
    LLAMACPP_KEY,                                   # deploys/llamacpp.py: llama-server's --api-key-file
    f"{TABBYAPI_DIR}/api_tokens.yml",               # deploys/tabbyapi.py: tabbyAPI's API and admin keys
    "/etc/litellm/master.env", "/etc/litellm/secrets.env", "/etc/litellm/engines-local.env",  # deploys/litellm.py
    "/etc/open-webui/secret.env", "/etc/open-webui/admin.env", "/etc/open-webui/openai.env",  # deploys/openwebui.py
    "/etc/open-webui/pipelines.env", "/etc/open-webui/engines.env",
    "/root/labwright-desktop-password-*",           # deploys/desktop.py
    "/var/lib/labwright/host-upgrade.env",          # host upgrade --resume (removed when the step ends)
)
MANAGED = "# Managed by labwright"
ROOT_BY_DESIGN = "# labwright: runs as root"
UNIT_DIRS = ("/etc/systemd/system",)


class OpenPort(UserWarning):
    """A model endpoint that answers without a key on purpose (LABWRIGHT_SECURITY_OPEN_PORTS): reported."""


class UnpinnedDependencies(UserWarning):
    """A stack environment whose dependencies were installed without hashes (docs/stacks.md): reported."""


STACK_MANIFESTS = "/opt/labwright/stacks/*/stack.json"  # labwright.stacks.plan.DEFAULT_ROOT, layout.MANIFEST


def unpinned_environments(listing: str) -> list[str]:
    """One line per stack environment whose dependencies are not pinned by a hashed lock, from ``PATH<TAB>JSON``
    lines (each manifest on one line); a manifest that is not JSON is said as such."""
    found = []
    for line in listing.splitlines():
        path, _, text = line.partition("\t")
        if not path.strip():
            continue
        where = path.rsplit("/", 1)[0]
        try:
            manifest = loads_json(text)
        except ValueError:
            found.append(f"{where}: its stack.json is not JSON")
            continue
        dependencies = manifest.get("dependencies") if isinstance(manifest, dict) else None
        stack = manifest.get("stack", "?") if isinstance(manifest, dict) else "?"
        if isinstance(manifest, dict) and "adopted_from" in manifest:
            continue  # the plain venv found at the path on the first switch: not built by labwright
        if not isinstance(dependencies, dict):
            found.append(f"{where} (stack {stack}) was built before stack dependency locks: what its wheels require "
                         "was installed without hashes; switch to the stack again to rebuild it pinned")
        elif dependencies.get("pinned") is not True:
            found.append(f"{where} (stack {stack}): its dependencies were installed WITHOUT hashes "
                         "(stack_unpinned_dependencies=true); switch again without it to pin them")
    return found


WILDCARDS = ("0.0.0.0", "::", "*", "")


def listeners(ss_output: str) -> dict[int, str]:
    """``ss -Hltn`` lines -> {port: address} for the sockets that listen beyond loopback (0.0.0.0, ::, *, or an
    address that is not 127.0.0.0/8 or ::1); a port on several addresses keeps the first."""
    found: dict[int, str] = {}
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        address, _, port = fields[3].rpartition(":")
        address = address.strip("[]").split("%", 1)[0]
        if not ascii_digits(port) or address.startswith("127.") or address == "::1":
            continue
        found.setdefault(int(port), address or "*")
    return found


def ask_address(address: str) -> str:
    """Where the host itself reaches a socket listening on ``address``: a wildcard on its loopback."""
    return "127.0.0.1" if address in WILDCARDS else address


# Run on the host: GET /v1/models on each "address port" argument pair without a key; prints one JSON object:
# {port: [status or null, openai_shaped]}. No key is ever sent; a non-HTTP service is null.
ASK = r"""
import json, sys, urllib.error, urllib.request
out = {}
args = sys.argv[1:]
for address, port in zip(args[::2], args[1::2]):
    host = f"[{address}]" if ":" in address else address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v1/models", timeout=5) as r:
            body = r.read(1 << 20)
            try:
                data = json.loads(body)
            except ValueError:
                data = None
            out[port] = [r.status, isinstance(data, dict) and isinstance(data.get("data"), list)]
    except urllib.error.HTTPError as error:
        out[port] = [error.code, False]
    except Exception:
        out[port] = [None, False]
print(json.dumps(out))
"""


def process_on(host, port: int) -> str:
    line = host.run(f"ss -Hltnp 'sport = :{port}'").stdout.strip()
    match = re.search(r'users:\(\("([^"]+)"', line)
    return match[1] if match else "an unknown process"


def test_no_model_endpoint_answers_the_network_without_a_key(host, security_expected):
    wanted_open = security_expected.open_ports
    ss = host.run("ss -Hltn")
    assert ss.rc == 0, f"ss -Hltn failed on the host: {ss.stderr.strip()} (iproute2 is needed)"
    ports = listeners(ss.stdout)
    if not ports:
        return
    pairs = [str(x) for port, address in sorted(ports.items()) for x in (ask_address(address), port)]
    asked = host.run(f"python3 -c {quote(ASK)} {join(pairs)}")
    assert asked.rc == 0, f"asking the ports failed: {asked.stderr.strip()[-300:]}"
    answers = loads_json(asked.stdout)
    exposed = []
    for port in sorted(ports):
        status, shaped = answers.get(str(port), [None, False])
        if status == 200 and shaped:
            what = f"port {port} ({process_on(host, port)}, listening on {ports[port]})"
            if port in wanted_open:
                warnings.warn(OpenPort(f"{what} answers /v1/models without a key, on purpose "
                                       "(--security-open-ports)"), stacklevel=1)
            else:
                exposed.append(what)
    assert not exposed, (f"{'; '.join(exposed)} answer(s) /v1/models without a key to anyone on the network: deploy "
                         "the engine again (its key is on by default), bind it to 127.0.0.1, or list the port in "
                         "--security-open-ports if that is on purpose")


def managed_units(host) -> tuple[list[str], list[str]]:
    """(scored, root by design): the unit files labwright wrote, by name."""
    scored: list[str] = []
    root: list[str] = []
    for where in UNIT_DIRS:
        listing = host.run(f"grep -l -s -m1 -x {quote(MANAGED + '.*')} {quote(where)}/*.service || true")
        for path in listing.stdout.split():
            name = path.rsplit("/", 1)[-1]
            text = host.file(path).content_string
            (root if ROOT_BY_DESIGN in text else scored).append(name)
    return sorted(scored), sorted(root)


EXPOSURE = re.compile(r"Overall exposure level for \S+: ([0-9.]+)")


def exposure_of(output: str) -> float | None:
    match = EXPOSURE.search(output)
    return float(match[1]) if match else None


def test_units_labwright_wrote_are_hardened(host, security_expected):
    limit = security_expected.max_exposure
    scored, root = managed_units(host)
    worse = []
    for unit in scored:
        run = host.run(f"systemd-analyze security --no-pager {quote(unit)}")
        score = exposure_of(run.stdout)
        assert score is not None, f"systemd-analyze security {unit} gave no score: {run.stderr.strip()[-300:]}"
        if score > limit:
            worse.append(f"{unit} {score}")
    assert not worse, (f"{', '.join(worse)}: more exposed than {limit} in systemd-analyze security (a drop-in that "
                       f"loosens it? `systemctl cat UNIT`); deploy it again, or see docs/security.md "
                       "\"Hardened units\"")
    for unit in root:
        warnings.warn(UserWarning(f"{unit} runs as root by design (docs/security.md): not scored"), stacklevel=1)


def test_stack_environments_install_pinned_dependencies(host):
    listing = host.run(f"for f in {STACK_MANIFESTS}; do [ -f \"$f\" ] && printf '%s\\t%s\\n' \"$f\" "
                       "\"$(tr -d '\\n' < \"$f\")\"; done; true")
    for line in unpinned_environments(listing.stdout):
        warnings.warn(UnpinnedDependencies(line), stacklevel=1)


# Run on the host: stat every path the patterns match; prints [[path, mode, owner, is_regular], ...].
STAT = r"""
import glob, json, os, pwd, stat, sys
out = []
for pattern in sys.argv[1:]:
    for path in sorted(glob.glob(pattern)):
        st = os.lstat(path)
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        out.append([path, stat.S_IMODE(st.st_mode), owner, stat.S_ISREG(st.st_mode)])
print(json.dumps(out))
"""


def test_secret_files_are_readable_only_by_their_owner_and_group(host, security_expected):
    patterns = [*SECRET_FILES, *security_expected.secret_files]
    run = host.run(f"python3 -c {quote(STAT)} {join(patterns)}")
    assert run.rc == 0, f"reading the secret files' modes failed: {run.stderr.strip()[-300:]}"
    wrong = []
    for path, mode, owner, regular in loads_json(run.stdout):
        if not regular:
            wrong.append(f"{path} is not a regular file")
        elif mode & 0o007:
            wrong.append(f"{path} is {mode:o} ({owner}'s): other users can {'read' if mode & 0o004 else 'use'} it")
        elif mode & 0o020:
            wrong.append(f"{path} is {mode:o} ({owner}'s): its group can write it")
    assert not wrong, (f"{'; '.join(wrong)}: chmod o-rwx,g-w the file (deploying again does it), and change the key "
                       "if it was readable")
