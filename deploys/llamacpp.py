"""llama.cpp llama-server as a systemd service, with the seed's production flags as data; an Ollama drop-in.

    python -m labwright.llamacpp.build             # once per machine: the pinned llama-server, cached
    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_model=/srv/models/qwen.gguf
    pyinfra -y @lxd/lw-node1 deploys/llamacpp.py --data llamacpp_model=/srv/models/q.gguf --data llamacpp_ctx_size=65536
    labwright verify llamacpp --hosts=lxc://lw-node1 --llamacpp-model=/srv/models/qwen.gguf

Host data: ``llamacpp_<key>`` for every key in templates/llamacpp/defaults.toml ([service] and [flags]),
``llamacpp_extra_args`` (a list appended to the command line), ``llamacpp_binary_src`` / ``llamacpp_binary_sha256``
(the binary to push, default the cached build and its recorded sha256) and ``llamacpp_ollama_<key>`` ([ollama]).
See docs/llamacpp.md.

The binary is pushed from the control machine rather than built on each guest: one 5-minute build per machine
instead of one per guest, no compiler in the guests, and every guest runs byte-for-byte the same engine (its sha256
is checked on the guest before it replaces the installed one).

Everything is checked before anything changes (model present, port free or already ours, cache types the engine
accepts, a quantized V cache only with flash attention); each refusal is one line naming the data key.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tomllib
from io import StringIO
from pathlib import Path, PurePosixPath
from typing import Any

from pyinfra import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, Sha256File
from pyinfra.operations import apt, files, server, systemd
from pyinfra.operations.util import any_changed

from labwright.deploy_data import FALSE, TRUE, DeployData, jinja
from labwright.facts.llamacpp import OllamaPresent, PortListeners, ReadableBy
from labwright.llamacpp.build import cache_dir

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "llamacpp"
DEFAULTS = tomllib.loads((TEMPLATES / "defaults.toml").read_text())
JINJA = jinja(TEMPLATES)
OLLAMA_DROPIN = "/etc/systemd/system/ollama.service.d/50-labwright.conf"
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


KEYS = DeployData("llamacpp", DEFAULTS)
fail, data, as_int, as_bool = KEYS.fail, KEYS.get, KEYS.int_of, KEYS.bool_of


def flag_values() -> dict[str, Any]:
    """The [flags] table with host overrides applied; false/""/None drop a flag, unknown keys need extra_args."""
    values = {key: data(key, "flags") for key in DEFAULTS["flags"]}
    engine = DEFAULTS["engine"]
    mode = values["flash_attn"]
    mode = ("on" if mode else "off") if isinstance(mode, bool) else str(mode).strip().lower()
    if mode not in engine["flash_attn_modes"]:
        raise fail("flash_attn", f"{mode!r} is not one of {', '.join(engine['flash_attn_modes'])}")
    values["flash_attn"] = mode
    for key in ("cache_type_k", "cache_type_v"):
        kind = str(values[key]).strip().lower()
        if kind not in engine["cache_types"]:
            raise fail(key, f"{kind!r} is not a cache type llama.cpp supports ({', '.join(engine['cache_types'])})")
        values[key] = kind
    if values["cache_type_v"] not in engine["unquantized_cache_types"] and mode == "off":
        raise fail("cache_type_v", f"{values['cache_type_v']} is a quantized V cache, which llama.cpp only runs with "
                   "flash attention: set llamacpp_flash_attn=on (or auto), or llamacpp_cache_type_v=f16")
    values["ctx_size"] = as_int("ctx_size", values["ctx_size"], 0)
    values["parallel"] = as_int("parallel", values["parallel"], 1)
    values["batch_size"] = as_int("batch_size", values["batch_size"], 1)
    values["ubatch_size"] = as_int("ubatch_size", values["ubatch_size"], 1, values["batch_size"])
    values["port"] = as_int("port", values["port"], 1, 65535)
    for key in ("metrics", "jinja"):
        values[key] = as_bool(key, values[key])
    kwargs = values["chat_template_kwargs"]
    if isinstance(kwargs, str) and kwargs.strip():
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError:
            raise fail("chat_template_kwargs", f"{kwargs!r} is not a JSON object") from None
    if kwargs and not isinstance(kwargs, dict):
        raise fail("chat_template_kwargs", "must be a table/JSON object such as {\"enable_thinking\": false}")
    values["chat_template_kwargs"] = kwargs
    return values


def command_line(binary: str, model: str, alias: str, flags: dict[str, Any], extra: list[str]) -> list[str]:
    args = [binary, "--model", model]
    if alias:
        args += ["--alias", alias]
    for key, value in flags.items():
        if value is None or value is False or value == "" or value == {}:
            continue
        option = "--" + key.replace("_", "-")
        if value is True:
            args.append(option)
        elif isinstance(value, dict | list):
            args += [option, json.dumps(value, separators=(",", ":"))]
        else:
            args += [option, str(value)]
    return args + extra


def systemd_quote(arg: str) -> str:
    """One ExecStart word: systemd expands % specifiers and $VARIABLES even inside quotes, so escape both."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if escaped and re.fullmatch(r"[A-Za-z0-9_./:=,+@-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def local_binary() -> tuple[str, str]:
    """The binary to push and its sha256, checked here so a corrupt cache never reaches a guest."""
    src = Path(str(data("binary_src") or cache_dir() / "llama-server")).expanduser()
    if not src.is_file():
        raise fail("binary_src", f"{src} does not exist; build it with `python -m labwright.llamacpp.build` "
                   "or pass --data llamacpp_binary_src=PATH")
    given = host.data.get("llamacpp_binary_sha256")
    # --data parses an all-digit digest as a number (dropping leading zeros): spell it back as 64 digits.
    expected = f"{given:064d}" if isinstance(given, int) and not isinstance(given, bool) else str(given or "").lower()
    if expected and not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise fail("binary_sha256", f"{given!r} is not a sha256 (64 hex digits)")
    sidecar = src.with_name(src.name + ".sha256")
    if not expected and sidecar.is_file():
        expected = sidecar.read_text().split()[0]
    actual = hashlib.sha256(src.read_bytes()).hexdigest()
    if expected and actual != expected:
        raise fail("binary_sha256", f"{src} has sha256 {actual}, expected {expected}")
    return str(src), actual


def health_check(url: str, wanted: list[str], timeout: int, service: str) -> str:
    """A shell command: wait for /health, then require /v1/models to list one of ``wanted``; else show why, fail."""
    script = f"""
import json, sys, time, urllib.request
deadline = time.monotonic() + {timeout}
while True:
    try:
        with urllib.request.urlopen({url + '/health'!r}, timeout=5) as r:
            if r.status == 200:
                break
    except Exception as error:
        last = error
    if time.monotonic() > deadline:
        sys.exit(f"labwright: {service} not healthy after {timeout}s ({{last}})")
    time.sleep(0.5)
with urllib.request.urlopen({url + '/v1/models'!r}, timeout=10) as r:
    ids = [m.get("id") for m in json.load(r).get("data", [])]
if not set(ids) & set({wanted!r}):
    sys.exit(f"labwright: {service} /v1/models lists {{ids}}, not {wanted[0]}")
print("healthy; /v1/models:", ", ".join(map(str, ids)))
"""
    journal = f"journalctl -u {shlex.quote(service)} -n 15 --no-pager -o cat >&2"
    return f"python3 -c {shlex.quote(script)} || {{ {journal}; exit 1; }}"


# --- read and check host data before touching anything ------------------------------------------
service = str(data("service"))
user = str(data("user"))
for key, value in (("service", service), ("user", user)):
    if not NAME.match(value) or value == "root":
        raise fail(key, f"{value!r} is not a valid name")
binary = str(data("binary"))
model = str(data("model"))
alias = str(data("alias") or "")
for key, value in (("binary", binary), ("model", model)):
    if not PurePosixPath(value).is_absolute():
        raise fail(key, f"{value!r} must be an absolute path on the guest")
flags = flag_values()
extra = data("extra_args") or []
if isinstance(extra, str):
    extra = shlex.split(extra)
if not all(isinstance(word, str) for word in extra):
    raise fail("extra_args", "must be a list of command-line words")
health_timeout = as_int("health_timeout", data("health_timeout"), 1)
restart_sec = as_int("restart_sec", data("restart_sec"), 0)
binary_src, binary_sha256 = local_binary()

if not host.get_fact(File, path=model):
    raise fail("model", f"{model} does not exist on {host.name}; copy the GGUF there first (nothing was changed)")
if not host.get_fact(ReadableBy, path=model, user=user):
    raise fail("model", f"{model} is not readable by the service user {user} on {host.name}; make the file and its "
               "directories world-readable or group-readable by it (nothing was changed)")
listeners = host.get_fact(PortListeners, port=flags["port"], service=service)
if listeners["pids"] and not listeners["ours"]:
    holder = ", ".join(listeners["names"]) or "another process"
    raise fail("port", f"{flags['port']} is already in use on {host.name} by {holder} (nothing was changed)")

ollama_mode = str(host.data.get("llamacpp_ollama_override", DEFAULTS["ollama"]["override"])).strip().lower()
if ollama_mode not in ("auto", *TRUE, *FALSE):
    raise fail("ollama_override", f"{ollama_mode!r} is not auto, true or false")
ollama = host.get_fact(OllamaPresent)
ollama_found = ollama["unit"] or ollama["binary"]
if ollama_mode in TRUE and not ollama_found:
    raise fail("ollama_override", f"no ollama unit or binary on {host.name}; use auto or false")
apply_ollama = ollama_found and ollama_mode not in FALSE
ollama_env: dict[str, str] = {}
if apply_ollama:
    def ollama_data(key: str) -> Any:
        value = host.data.get(f"llamacpp_ollama_{key}")
        return DEFAULTS["ollama"][key] if value is None else value

    kv_type = str(ollama_data("kv_cache_type")).strip().lower()
    if kv_type not in DEFAULTS["ollama"]["kv_cache_types"]:
        kinds = ", ".join(DEFAULTS["ollama"]["kv_cache_types"])
        raise fail("ollama_kv_cache_type", f"{kv_type!r} is not one of {kinds}")
    ollama_fa = as_bool("ollama_flash_attention", ollama_data("flash_attention"))
    if kv_type != "f16" and not ollama_fa:
        raise fail("ollama_kv_cache_type", f"{kv_type} needs llamacpp_ollama_flash_attention=true (Ollama ignores a "
                   "quantized KV cache without flash attention)")
    ollama_env = {
        "OLLAMA_FLASH_ATTENTION": "1" if ollama_fa else "0",
        "OLLAMA_KV_CACHE_TYPE": kv_type,
        "OLLAMA_KEEP_ALIVE": str(ollama_data("keep_alive")),
        "OLLAMA_CONTEXT_LENGTH": str(as_int("ollama_context_length", ollama_data("context_length"), 0)),
    }
    if any(re.search(r'["\\\n%$]', value) for value in ollama_env.values()):
        raise fail("ollama_keep_alive", "values must not contain quotes, backslashes, %, $ or newlines")

# --- runtime libraries (apt only when missing) and the service user ------------------------------
installed = host.get_fact(DebPackages)
missing = [p for p in data("runtime_packages") if p not in installed]
if missing:
    apt.update(name="Refresh apt lists (runtime libraries missing)", cache_time=3600)
    apt.packages(name="Install llama-server runtime libraries", packages=missing, no_recommends=True)
server.user(name=f"Service user {user}", user=user, system=True, shell="/usr/sbin/nologin",
            home=f"/var/lib/{service}", create_home=True)

# --- the binary: staged, sha256-checked on the guest, then moved over the old one ----------------
binary_changed = False
if host.get_fact(Sha256File, path=binary) != binary_sha256:
    stage = str(PurePosixPath(binary).with_name(f".{PurePosixPath(binary).name}.labwright-new"))
    files.put(name="Stage llama-server binary", src=binary_src, dest=stage, mode="755", user="root", group="root")
    server.shell(name=f"Check sha256 and install {binary}", commands=[
        f"echo '{binary_sha256}  {stage}' | sha256sum -c --quiet || {{ rm -f {shlex.quote(stage)}; "
        f"echo 'labwright: pushed llama-server does not match sha256 {binary_sha256}' >&2; exit 1; }}",
        f"mv -f {shlex.quote(stage)} {shlex.quote(binary)}",
    ])
    binary_changed = True

# --- unit, start, restart on change, health ------------------------------------------------------
exec_start = " ".join(systemd_quote(word) for word in command_line(binary, model, alias, flags, extra))
unit_text = JINJA.get_template("llama-server.service.j2").render(
    model=model, user=user, exec_start=exec_start, restart=data("restart"), restart_sec=restart_sec)
unit = files.put(name=f"Unit {service}.service", src=StringIO(unit_text), dest=f"/etc/systemd/system/{service}.service",
                 user="root", group="root", mode="644")
systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=unit.did_change)
started = systemd.service(name=f"{service} enabled and running", service=f"{service}.service", running=True,
                          enabled=True)
# Restart only for a real change; a fresh start above already runs the new binary and unit.
restarted = systemd.service(name=f"Restart {service} (unit or binary changed)", service=f"{service}.service",
                            restarted=True,
                            _if=lambda: (unit.did_change() or binary_changed) and not started.did_change())
health_host = "127.0.0.1" if flags["host"] in ("0.0.0.0", "::", "") else str(flags["host"])
server.shell(name=f"{service} health: /health then /v1/models",
             commands=[health_check(f"http://{health_host}:{flags['port']}",
                                    [alias] if alias else [model, PurePosixPath(model).name], health_timeout, service)],
             _if=lambda: binary_changed or any_changed(unit, started, restarted)())

# --- Ollama on the same host: the same KV policy, as a drop-in -----------------------------------
if apply_ollama:
    dropin = files.put(name="Ollama drop-in (flash attention, KV cache type, keep-alive, context)",
                       src=StringIO(JINJA.get_template("ollama-override.conf.j2").render(env=ollama_env)),
                       dest=OLLAMA_DROPIN, user="root", group="root", mode="644", create_remote_dir=True)
else:
    dropin = files.file(name="No labwright Ollama drop-in", path=OLLAMA_DROPIN, present=False)
systemd.daemon_reload(name="systemd daemon-reload (Ollama drop-in changed)", _if=dropin.did_change)
# try-restart: a stopped Ollama stays stopped, a running one picks up the new environment.
server.shell(name="Restart Ollama if running (drop-in changed)", commands=["systemctl try-restart ollama.service"],
             _if=lambda: dropin.did_change() and bool(ollama["unit"]))
