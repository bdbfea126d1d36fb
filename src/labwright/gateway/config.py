"""The TLS entrance's configuration as pure logic: routes to the inventory's engines, clients, certificate checks.

deploys/gateway.py feeds this the inventory's hosts and the control machine's certificate files; everything that
can be wrong in them is a ``GatewayError`` naming the data key, raised before the deploy changes anything.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labwright import paths
from labwright.deploy_data import jinja
from labwright.litellm.config import KEY_VALUE, EngineHost, EngineKey, discover_engines, key_env
from labwright.litellm.config import load_defaults as litellm_defaults
from labwright.schema import checks
from labwright.shell import quote

TEMPLATES = paths.templates_dir("gateway")
CLIENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
KEY_SCRIPT = "import secrets; print('lw-' + secrets.token_urlsafe(32))"


class GatewayError(ValueError):
    """Bad gateway data; the message starts with the data key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Route:
    """``/engines/<slug>/`` (or everything else, for the default) to ``upstream`` with the engine's key."""

    slug: str
    upstream: str
    source: str
    key: EngineKey | None = None

    @property
    def env(self) -> str:
        return self.key.env if self.key else ""


def load_defaults() -> dict[str, Any]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


def is_gateway(data: Mapping[str, Any]) -> bool:
    return any(str(key).startswith("gateway_") for key in data)


def _shown(text: str) -> str:
    """``text`` with control characters written as escapes (a refusal stays one printable line)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def _control(text: str) -> str | None:
    found = next((ch for ch in text if unicodedata.category(ch).startswith("C")), None)
    return None if found is None else found.encode("unicode_escape").decode()


def _listed(value: Any, key: str, example: str) -> list[str]:
    if value in (None, ""):
        return []
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise GatewayError(key, f"must be a list like {example}")
    return [str(item) for item in items]


def clients_of(value: Any) -> list[str]:
    """``gateway_clients``: names (letters, digits, - and _), each gets its own key; at least one."""
    names = _listed(value, "gateway_clients", '["laptop", "bench"]')
    if not names:
        raise GatewayError("gateway_clients", 'is empty: name at least one client, e.g. ["laptop"] (each gets its own '
                           "key)")
    for name in names:
        bad = _control(name)
        if bad:
            raise GatewayError("gateway_clients", f"'{_shown(name)}' contains a control character ({bad}); a client "
                               "name is letters, digits, - and _ (nothing was changed)")
        if not CLIENT.match(name):
            raise GatewayError("gateway_clients", f"{name!r} is not a client name (letters, digits, - and _, up to 32, "
                               "starting with a letter or digit) (nothing was changed)")
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise GatewayError("gateway_clients", f"{duplicate!r} is listed twice (nothing was changed)")
    return names


def names_of(value: Any, default: Iterable[str]) -> list[str]:
    """``gateway_names`` (else ``default``) plus localhost and 127.0.0.1: the names the certificate is for."""
    given = _listed(value, "gateway_names", '["llm.lab.example", "10.0.0.5"]') or list(default)
    names: list[str] = []
    for name in [*given, "localhost", "127.0.0.1"]:
        bad = _control(name)
        if bad:
            raise GatewayError("gateway_names", f"'{_shown(name)}' contains a control character ({bad}) (nothing was "
                               "changed)")
        if checks.host_problem(name, brackets=True) is not None:  # a non-string too
            raise GatewayError("gateway_names", f"{name!r} is neither an IP address nor a DNS name (nothing was "
                               "changed)")
        if name not in names:
            names.append(name)
    return names


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "engine"


def routes_of(hosts: list[EngineHost], address_of: Callable[[EngineHost], str]) -> tuple[list[Route], Route | None]:
    """One route per engine model of the inventory (``/engines/<model>/``) and the default route: the LiteLLM
    gateway when the inventory has one, else the only engine, else none."""
    defaults = litellm_defaults()
    routes: list[Route] = []
    for model in discover_engines(hosts, defaults["engines"], address_of):
        upstream = model.api_base.removeprefix("http://").removesuffix("/v1")
        slug = _slug(model.name)
        if any(r.slug == slug for r in routes):
            raise GatewayError("gateway_clients", f"two engines map to /engines/{slug}/ ({model.source} and "
                               f"{next(r.source for r in routes if r.slug == slug)}); give one another name (e.g. "
                               "llamacpp_alias)")
        routes.append(Route(slug, upstream, model.source, model.key))
    litellm = [h for h in hosts if any(str(k).startswith("litellm_") and k != "litellm_engine_address"
                                       for k in h.data)]
    default = None
    if litellm:
        gateway = litellm[0]
        service = defaults["service"]
        port = int(str(gateway.data.get("litellm_port") or service["port"]))
        config_dir = str(gateway.data.get("litellm_config_dir") or service["config_dir"]).rstrip("/")
        address = "127.0.0.1" if gateway.is_gateway else address_of(gateway)
        key = EngineKey(gateway.name, f"{config_dir}/master.env", "LITELLM_MASTER_KEY",
                        key_env("litellm", gateway.name), gateway.is_gateway, "litellm_config_dir")
        default = Route("", f"{address}:{port}", f"LiteLLM on {gateway.name}", key)
    elif len(routes) == 1:
        default = routes[0]
    return routes, default


def render_caddyfile(names: list[str], port: int, admin_port: int, directory: str, routes: list[Route],
                     default: Route | None, cert: str = "", key: str = "") -> str:
    sites = ", ".join(f"https://{'[' + n + ']' if ':' in n else n}:{port}" for n in names)
    return jinja(TEMPLATES).get_template("Caddyfile.j2").render(
        sites=sites, names=names, admin_port=admin_port, dir=directory, routes=routes, default=default, cert=cert,
        key=key)


def cert_key_problem(cert_pem: bytes, key_pem: bytes, cert_name: str, key_name: str) -> str | None:
    """Why the certificate and key cannot serve together (unreadable, or the key is not the certificate's); None
    when the key's public half is the certificate's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return f"gateway_cert_file: {cert_name} is not a PEM certificate (nothing was changed)"
    try:
        private = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        why = "it is encrypted; give Caddy an unencrypted key" if isinstance(exc, TypeError) else "not a PEM key"
        return f"gateway_key_file: {key_name} is not a usable private key ({why}) (nothing was changed)"
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*spki) != private.public_key().public_bytes(*spki):
        return (f"gateway_key_file: {key_name} does not belong to the certificate {cert_name} (their public keys "
                "differ); give the key the certificate was issued for (nothing was changed)")
    return None


# Run as root on the gateway (python3, standard library only): make a key for every client that has none, remove
# the keys of clients no longer listed, and write clients.caddy (the header matcher's lines). argv: the directory,
# "check" or "write", the client names. Check prints "current", "stale" or "bad NAME" (a key file that is not one
# line of key characters: a hand edit with a control character, say), never a key.
CLIENT_KEYS = r"""
import os, re, secrets, sys
base, mode, names = sys.argv[1], sys.argv[2], sys.argv[3:]
keys_dir, snippet = os.path.join(base, "clients"), os.path.join(base, "clients.caddy")
valid = re.compile(r"lw-[A-Za-z0-9_-]{43}|[A-Za-z0-9._~+/=-]{16,512}")
keys, bad = {}, []
for name in names:
    try:
        raw = open(os.path.join(keys_dir, name), "rb").read()
    except OSError:
        continue
    text = raw.decode("latin-1").rstrip("\n")
    if not valid.fullmatch(text):
        bad.append(name)
    keys[name] = text
stray = [n for n in (os.listdir(keys_dir) if os.path.isdir(keys_dir) else []) if n not in names]
if mode == "check":
    if bad:
        print("bad", bad[0])
        sys.exit(0)
    want = "".join('header Authorization "Bearer %s"\n' % keys[n] for n in names if n in keys)
    try:
        have = open(snippet).read()
    except OSError:
        have = None
    print("current" if len(keys) == len(names) and not stray and have == want else "stale")
    sys.exit(0)
if bad:
    sys.exit("labwright: %s holds no usable key; delete it to have a new one made" % os.path.join(keys_dir, bad[0]))
os.umask(0o027)
os.makedirs(keys_dir, exist_ok=True)
for name in names:
    if name not in keys:
        keys[name] = "lw-" + secrets.token_urlsafe(32)
        path = os.path.join(keys_dir, name)
        with open(path + ".new", "w") as out:
            out.write(keys[name] + "\n")
        os.replace(path + ".new", path)
for name in stray:
    os.remove(os.path.join(keys_dir, name))
with open(snippet + ".new", "w") as out:
    out.write("".join('header Authorization "Bearer %s"\n' % keys[n] for n in names))
os.replace(snippet + ".new", snippet)
"""


def client_keys_command(directory: str, clients: list[str], check: bool = False) -> str:
    return (f"python3 -c {quote(CLIENT_KEYS)} {quote(directory)} {'check' if check else 'write'} "
            + " ".join(quote(c) for c in clients))


def usable_key(value: str) -> bool:
    return bool(KEY_VALUE.match(value))
