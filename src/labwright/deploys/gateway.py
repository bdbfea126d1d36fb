"""One TLS entrance (Caddy from the distribution's packages) in front of LiteLLM and every engine of the inventory.

The routes, client names and certificate checks are labwright.gateway.config (pure); see deploys/gateway.py (the
pyinfra CLI shim, with usage) and docs/gateway.md.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, inventory
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from labwright import paths
from labwright.deploy_data import DeployData, keys_of, refuse_unknown_keys
from labwright.deploys.common import install_missing, port_taken_by
from labwright.facts.engine_keys import KeysFileCurrent
from labwright.facts.gateway import ClientKeysState
from labwright.gateway.config import (
    GatewayError,
    cert_key_problem,
    client_keys_command,
    clients_of,
    load_defaults,
    names_of,
    render_caddyfile,
    routes_of,
)
from labwright.guestlock import locked
from labwright.litellm.config import EngineHost, local_keys_script, render_secrets
from labwright.monitoring.config import MonitoringError, package_list
from labwright.operations import systemd as systemd_ops
from labwright.operations.secrets import secret_file
from labwright.shell import quote

DEFAULTS = load_defaults()
KEYS = DeployData("gateway", DEFAULTS)
fail, data = KEYS.fail, KEYS.get
CADDY_ROOT = "/var/lib/caddy/.local/share/caddy/pki/authorities/local/root.crt"
DROPIN = "/etc/systemd/system/caddy.service.d/50-labwright.conf"


def stored_root(host_name: str) -> Path:
    """Where the control machine keeps the gateway's root certificate (``labwright bench --ca``)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in host_name.lstrip("@"))
    return paths.data_root() / "gateway" / safe / "root.crt"


def _hosts() -> list[EngineHost]:
    return [EngineHost(h.name, h.data.dict(), h.name == host.name) for h in inventory]


def _address_of(engine: EngineHost) -> str:
    from labwright.deploys.litellm import address_of

    return address_of(engine)


def _own_address(here: dict[str, Any]) -> str:
    """The address clients reach this host at (as the LiteLLM gateway finds an engine's), else one line asking for
    gateway_names."""
    if not host.name.startswith("@"):
        return host.name
    try:
        return _address_of(EngineHost(host.name, here, False))
    except DeployError:
        raise fail("names", f"no address known for {host.name}; set gateway_names to the names and addresses "
                   "clients use (nothing was changed)") from None


def _read_local(key: str) -> tuple[str, bytes]:
    path = KEYS.path_of(key, data(key), absolute=False)
    try:
        return path, Path(path).expanduser().read_bytes()
    except OSError as exc:
        why = exc.strerror or exc
        raise fail(key, f"{path} cannot be read on this machine ({why}) (nothing was changed)") from None


def _health_script(port: int, ca: str) -> str:
    """Run on the gateway: until the entrance answers a request without a key with 401 over verified TLS."""
    script = ("import ssl, sys, time, urllib.error, urllib.request\n"
              "ca, url, end = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])\n"
              "context = ssl.create_default_context(cafile=ca or None)\n"
              "while True:\n"
              "    try:\n"
              "        urllib.request.urlopen(url, timeout=5, context=context)\n"
              "        sys.exit('labwright: the gateway answered without a key')\n"
              "    except urllib.error.HTTPError as error:\n"
              "        if error.code == 401: sys.exit(0)\n"
              "        why = error.code\n"
              "    except Exception as error:\n"
              "        why = error\n"
              "    if time.monotonic() > end: sys.exit(f'labwright: the gateway does not answer over TLS: {why}')\n"
              "    time.sleep(0.5)\n")
    return script


@locked("TLS gateway")
def deploy_gateway() -> None:
    """Caddy (Debian's package) as the one TLS entrance: ``/engines/<model>/`` to each engine of the inventory and
    everything else to the LiteLLM gateway (or the only engine), each with its own key added on the way in; a
    client gets in only with its own bearer key (``gateway_clients``, generated on this host); TLS with your
    certificate (``gateway_cert_file`` / ``gateway_key_file``) or Caddy's internal CA, whose root is copied to the
    control machine for ``labwright bench --ca``.

    Everything is checked before anything changes; each refusal is one line naming the data key.
    """
    from labwright.deploys.litellm import engine_key_values

    # --- read and check everything before touching anything -----------------------------------------
    here = host.data.dict()
    refuse_unknown_keys(here, "gateway", keys_of(DEFAULTS["service"]), "docs/gateway.md and "
                        "templates/gateway/defaults.toml")
    port = KEYS.int_of("port", data("port"), 1, 65535)
    admin_port = KEYS.int_of("admin_port", data("admin_port"), 1, 65535)
    directory = KEYS.managed_of("dir", data("dir"))
    health_timeout = KEYS.int_of("health_timeout", data("health_timeout"), 1)
    hosts = _hosts()
    try:
        clients = clients_of(data("clients"))
        names = names_of(data("names"), [] if data("names") else [_own_address(here)])
        packages = package_list(data("packages"), "gateway_packages")
    except (GatewayError, MonitoringError) as exc:
        raise DeployError(str(exc)) from None
    for path_key in ("cert_file", "key_file", "ca_file"):  # each path as written, before the pair is judged
        if data(path_key):
            KEYS.path_of(path_key, data(path_key), absolute=False)
    cert_given, key_given = bool(data("cert_file")), bool(data("key_file"))
    if cert_given != key_given:
        raise fail("key_file" if cert_given else "cert_file", "give both gateway_cert_file and gateway_key_file, or "
                   "neither (Caddy's internal CA) (nothing was changed)")
    cert = key = ca = b""
    if cert_given:
        cert_path, cert = _read_local("cert_file")
        key_path, key = _read_local("key_file")
        problem = cert_key_problem(cert, key, cert_path, key_path)
        if problem:
            raise DeployError(problem)
    if data("ca_file"):
        _, ca = _read_local("ca_file")
    # the engines' routes last: finding an engine's key asks its host (sweep at 6d041d3: a bad gateway_names was
    # hidden behind "llamacpp_api_key_file ... does not exist" on the engine's host)
    try:
        routes, default = routes_of(hosts, _address_of)
    except (GatewayError, MonitoringError) as exc:
        raise DeployError(str(exc)) from None
    if not routes and default is None:
        raise fail("clients", "no engines and no LiteLLM gateway in the inventory: the entrance would lead nowhere "
                   "(nothing was changed)")
    holder = port_taken_by(port, "caddy")
    if holder:
        raise fail("port", f"{port} is already in use on {host.name} by {holder} (nothing was changed)")
    state = host.get_fact(ClientKeysState, command=client_keys_command(directory, clients, check=True))
    if state.startswith("bad "):
        raise fail("clients", f"{directory}/clients/{state.removeprefix('bad ')} on {host.name} holds no usable key "
                   "(a control character or a hand edit); delete it to have a new one made, and re-run (nothing "
                   "was changed)")
    engine_keys = {r.key.env: r.key for r in [*routes, *([default] if default else [])] if r.key is not None}
    remote = engine_key_values(list(engine_keys.values()))
    local_keys = [k for k in engine_keys.values() if k.local]
    tls_dir = f"{directory}/tls"

    # --- Caddy, keys, Caddyfile (validated before it replaces the old one), start -------------------
    install_missing(packages, "Caddy", name=f"Install {', '.join(packages)}")
    files.directory(name=f"{directory} (root:caddy 0750)", path=directory, user="root", group="caddy", mode="750")
    clients_changed = False
    if state != "current":
        server.shell(name=f"Client keys ({len(clients)}: {', '.join(clients)}), made on this host",
                     commands=[f"{client_keys_command(directory, clients)} && chown -R root:caddy "
                               f"{quote(directory + '/clients')} {quote(directory + '/clients.caddy')} && chmod 750 "
                               f"{quote(directory + '/clients')}"])
        clients_changed = True
    local_env, remote_env = f"{directory}/engines-local.env", f"{directory}/engines-remote.env"
    local_changed = False
    if not host.get_fact(KeysFileCurrent, script=local_keys_script(local_keys, local_env, check=True)):
        server.shell(name=f"Keys of the engines on this guest ({local_env}, 0600 root; read from their key files "
                     "there)", commands=[local_keys_script(local_keys, local_env)])
        local_changed = True
    remote_file = secret_file(name=f"Keys of the engines on other hosts ({remote_env}, 0600 root)",
                              content=render_secrets({}, remote), dest=remote_env)
    tls_ops = []
    if cert_given:
        files.directory(name=f"{tls_dir} (root:caddy 0750)", path=tls_dir, user="root", group="caddy", mode="750")
        tls_ops.append(files.put(name=f"Certificate {tls_dir}/cert.pem", src=StringIO(cert.decode()),
                                 dest=f"{tls_dir}/cert.pem", user="root", group="caddy", mode="644"))
        tls_ops.append(secret_file(name=f"Private key {tls_dir}/key.pem (0640 root:caddy)", content=key.decode(),
                                   dest=f"{tls_dir}/key.pem", user="root", group="caddy", mode="640"))
    if ca:
        files.directory(name=f"{tls_dir} (root:caddy 0750)", path=tls_dir, user="root", group="caddy", mode="750")
        tls_ops.append(files.put(name=f"CA {tls_dir}/ca.pem", src=StringIO(ca.decode()), dest=f"{tls_dir}/ca.pem",
                                 user="root", group="root", mode="644"))
    tls_files = (f"{tls_dir}/cert.pem", f"{tls_dir}/key.pem") if cert_given else ("", "")
    caddyfile = render_caddyfile(names, port, admin_port, directory, routes, default, *tls_files)
    staged = files.put(name="Caddyfile (staged)", src=StringIO(caddyfile), dest=f"{directory}/Caddyfile.new",
                       user="root", group="caddy", mode="640")
    # Validated as the caddy user with its own home (no second CA under root's), then moved over the old one.
    validated = server.shell(
        name=f"caddy validate, then the Caddyfile replaces the old ({len(routes)} engine route(s), default: "
             f"{default.source if default else 'none'})",
        commands=[f"runuser -u caddy -- env HOME=/var/lib/caddy caddy validate --adapter caddyfile --config "
                  f"{quote(directory + '/Caddyfile.new')} >/dev/null 2>&1 || {{ runuser -u caddy -- env "
                  f"HOME=/var/lib/caddy caddy validate --adapter caddyfile --config "
                  f"{quote(directory + '/Caddyfile.new')} 2>&1 | tail -n 3 >&2; exit 1; }}; "
                  f"install -m 644 -o root -g root {quote(directory + '/Caddyfile.new')} /etc/caddy/Caddyfile"],
        _if=lambda: staged.did_change() or clients_changed)
    dropin = files.put(name="caddy drop-in: engine keys from root-only env files, no --environ", src=StringIO(
        "# Managed by labwright deploys/gateway.py: the engines' keys reach Caddy's environment only (read by\n"
        "# systemd as root); Debian's unit prints its environment with --environ, this one does not.\n"
        "[Service]\n"
        f"EnvironmentFile=-{local_env}\nEnvironmentFile=-{remote_env}\n"
        "ExecStart=\nExecStart=/usr/bin/caddy run --config /etc/caddy/Caddyfile\n"
        "ExecReload=\nExecReload=/usr/bin/caddy reload --config /etc/caddy/Caddyfile --force\n"),
        dest=DROPIN, user="root", group="root", mode="644", create_remote_dir=True)
    systemd.daemon_reload(name="systemd daemon-reload (caddy drop-in changed)", _if=dropin.did_change)
    changed = any_changed(validated, dropin, remote_file, *tls_ops)
    systemd_ops.restarted_foreign(name="Restart caddy (Caddyfile, keys or certificate changed)", service="caddy",
                                  _if=lambda: local_changed or clients_changed or changed())
    ca_on_guest = f"{tls_dir}/ca.pem" if ca else ("" if cert_given else CADDY_ROOT)
    server.shell(name=f"Gateway answers over TLS on {port} (401 without a key)", commands=[
        f"python3 -c {quote(_health_script(port, ca_on_guest))} {quote(ca_on_guest)} "
        f"https://127.0.0.1:{port}/v1/models {health_timeout}"],
        _if=lambda: local_changed or clients_changed or changed())
    # The root the clients verify the entrance with, on the control machine (labwright bench --ca PATH).
    if ca_on_guest:
        root = stored_root(host.name)
        root.parent.mkdir(parents=True, exist_ok=True)
        files.get(name=f"Root certificate to this machine: {root}", src=ca_on_guest, dest=str(root))

