"""testinfra checks of what deploys/gateway.py promises, on the gateway host.

    labwright verify gateway --hosts=@lxd/lw-node1
    LABWRIGHT_GATEWAY_PORT=8443 LABWRIGHT_GATEWAY_CA=/etc/caddy/labwright/tls/ca.pem labwright verify gateway ...

Expected values come from the environment, else templates/gateway/defaults.toml: LABWRIGHT_GATEWAY_PORT,
LABWRIGHT_GATEWAY_DIR, LABWRIGHT_GATEWAY_CA (the CA on the host TLS is verified against; default: Caddy's internal
root). The HTTPS checks run on the host itself with TLS verified (never unverified); a client's key is read there as
root and never printed.
"""

from __future__ import annotations

import os
import re
import tomllib

from labwright import paths
from labwright.shell import quote
from labwright.verify.service_checks import assert_root_only, assert_runs_as, assert_unit_enabled_and_running

DEFAULTS = tomllib.loads((paths.templates_dir("gateway") / "defaults.toml").read_text())["service"]
CADDY_ROOT = "/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt"


def setting(name: str) -> str:
    return os.environ.get(f"LABWRIGHT_GATEWAY_{name.upper()}") or str(DEFAULTS[name])


PORT, DIR = int(setting("port")), setting("dir")
CA = os.environ.get("LABWRIGHT_GATEWAY_CA") or CADDY_ROOT

STATUS = """
import ssl, sys, urllib.error, urllib.request
url, ca, key_file = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {}
if key_file == "wrong":
    headers = {"Authorization": "Bearer lw-not-a-client-key"}
elif key_file != "-":
    headers = {"Authorization": "Bearer " + open(key_file).read().strip()}
try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30,
                                context=ssl.create_default_context(cafile=ca)) as answer:
        print(answer.status)
except urllib.error.HTTPError as error:
    print(error.code)
"""


def status(host, path: str, key_file: str) -> int:
    with host.sudo():
        result = host.run(f"python3 -c {quote(STATUS)} {quote(f'https://127.0.0.1:{PORT}{path}')} {quote(CA)} "
                          f"{quote(key_file)}")
    assert result.rc == 0, f"GET {path} over TLS (verified with {CA}) failed: {result.stderr.strip()[-500:]}"
    return int(result.stdout.strip())


def clients(host) -> list[str]:
    with host.sudo():
        listed = host.run(f"ls -1 {quote(DIR + '/clients')}")
    assert listed.rc == 0 and listed.stdout.split(), f"no client keys in {DIR}/clients"
    return listed.stdout.split()


def test_caddy_enabled_and_running(host):
    assert_unit_enabled_and_running(host, "caddy")
    assert_runs_as(host, "caddy", "caddy")


def test_caddy_does_not_print_its_environment(host):
    """Debian's unit runs ``caddy run --environ`` (the engines' keys would reach the journal); the drop-in not."""
    pid = host.run("systemctl show -p MainPID --value caddy.service").stdout.strip()
    argv = host.run(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout
    assert "--environ" not in argv, argv


def test_keys_closed_to_others(host):
    for name in ("engines-local.env", "engines-remote.env"):
        assert_root_only(host, f"{DIR}/{name}")
    with host.sudo():
        seen = host.run(f"stat -c '%a %U %G %n' {quote(DIR + '/clients.caddy')} {quote(DIR + '/clients')}/*")
    for line in seen.stdout.splitlines():
        mode, user, group, name = line.split(" ", 3)
        assert (mode, user, group) == ("640", "root", "caddy"), f"{name}: {mode} {user}:{group}"


def test_without_a_client_key_401_with_one_200(host):
    assert status(host, "/v1/models", "-") == 401
    assert status(host, "/v1/models", "wrong") == 401
    for client in clients(host):
        assert status(host, "/v1/models", f"{DIR}/clients/{client}") == 200, client


def test_engines_behind_it_are_not_on_every_address(host):
    """Every upstream on this host (127.0.0.1:PORT in the Caddyfile) listens on loopback only, not 0.0.0.0/::."""
    caddyfile = host.file("/etc/caddy/Caddyfile").content_string
    for port in sorted(set(re.findall(r"(?a)reverse_proxy 127\.0\.0\.1:(\d+)", caddyfile))):
        listeners = host.run(f"ss -Hltn 'sport = :{port}'").stdout
        assert listeners.strip(), f"nothing listens on {port} (an engine behind the gateway)"
        wide = [line for line in listeners.splitlines() if re.search(r"(?a)\s(0\.0\.0\.0|\*|\[::\]):\d+\s", line)]
        assert not wide, f"port {port} listens on every address: reachable without the gateway: {wide}"
