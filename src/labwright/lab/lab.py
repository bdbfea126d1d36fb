"""`labwright lab up|status|down`: the local lab, built from the inventory's `lab` group on LXD or Incus
(``lab_backend``, labwright.lab.backend).

Every object made here carries the lab's marker (a description, or a ``user.labwright.lab``
key on containers), so ``down`` removes exactly what ``up`` made, and ``up`` refuses to adopt
an object of the same name that somebody else made.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labwright.errors import BadInput, LxdError, OperationFailed
from labwright.lab import image as lab_image
from labwright.lab.backend import check_apart, choose_backend
from labwright.lab.daemon import LXD, Backend, ensure_daemon
from labwright.lab.keys import ensure_lab_key
from labwright.lab.spec import LabSpec
from labwright.lxd.client import LxdClient
from labwright.snapshots.lxd import freeze_note
from labwright.textio import loads_json
from labwright.ui import Reporter

LAB_KEY = "user.labwright.lab"
IMAGE_KEY = "user.labwright.image"
MIN_FREE_BYTES = 2 * 1024**3


# --- preflight --------------------------------------------------------------------------------
def host_networks(exclude_dev: str) -> list[tuple[str, ipaddress.IPv4Network]]:
    """Networks the host already routes (device, network), except on ``exclude_dev``."""
    proc = subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True)
    found = []
    for route in loads_json(proc.stdout or "[]"):
        dst, dev = route.get("dst", ""), route.get("dev", "")
        if dev == exclude_dev or dst in ("default", "") or route.get("type") in ("local", "broadcast"):
            continue
        try:
            found.append((dev, ipaddress.IPv4Network(dst, strict=False)))
        except ValueError:
            continue
    return found


def check_subnet_free(spec: LabSpec, client: LxdClient, backend: Backend = LXD) -> None:
    wanted = spec.subnet.network
    for dev, net in host_networks(spec.bridge):
        if net.overlaps(wanted) and net.prefixlen > 0:
            raise BadInput(f"{spec.source}: lab_subnet {wanted} is already in use by {dev} ({net}); "
                           "choose a free one, e.g. lab_subnet = '10.99.7.1/24'")
    for network in client.request("GET", "/1.0/networks", params={"recursion": 1}):
        if network["name"] == spec.bridge or not network.get("managed"):
            continue
        addr = network.get("config", {}).get("ipv4.address", "")
        if addr and addr not in ("none", "auto") and ipaddress.IPv4Interface(addr).network.overlaps(wanted):
            raise BadInput(f"{spec.source}: lab_subnet {wanted} overlaps {backend.title} network "
                           f"{network['name']} ({addr}); choose a free one")


def check_disk(path: str = "/var/lib", need: int = MIN_FREE_BYTES) -> None:
    free = shutil.disk_usage(path).free
    if free < need:
        raise OperationFailed(f"no disk space: {free / 1024**3:.1f} GiB free on {path}, the lab needs "
                              f"{need / 1024**3:.1f} GiB; free some space and run again")


# --- infrastructure: network, pool, profile ----------------------------------------------------
def cow_refusal(filesystems: str = "/proc/filesystems", loop_control: str = "/dev/loop-control") -> str | None:
    """Why a btrfs pool on a loop file cannot be made on this host, or None when it can.

    LXD's btrfs driver makes the loop file itself (``lxc storage create POOL btrfs size=N``: a sparse
    ``disks/POOL.img`` formatted with ``mkfs.btrfs`` and mounted through a loop device; LXD's own test suite runs its
    btrfs backend this way, test/backends/btrfs.sh). So it needs the kernel's btrfs, btrfs-progs and loop devices;
    a container without loop access (a nested lab) has none."""
    try:
        known = Path(filesystems).read_text()
    except OSError:
        known = ""
    if "btrfs" not in known.split():
        subprocess.run(["modprobe", "-q", "btrfs"], capture_output=True)  # a module not loaded yet
        try:
            known = Path(filesystems).read_text()
        except OSError:
            known = ""
        if "btrfs" not in known.split():
            return "this kernel has no btrfs (not in /proc/filesystems, modprobe btrfs failed)"
    if not any(shutil.which("mkfs.btrfs", path=d) for d in (os.environ.get("PATH", ""), "/usr/sbin:/sbin")):
        return "mkfs.btrfs is not installed (apt-get install btrfs-progs)"
    if not Path(loop_control).exists():
        return f"no loop devices here ({loop_control} is missing: a container without loop access)"
    return None


def pool_object(spec: LabSpec, driver: str) -> dict[str, Any]:
    config = {"size": spec.pool_size} if driver == "btrfs" else {}
    return {"name": spec.pool, "driver": driver, "description": spec.marker, "config": config}


def choose_pool_driver(spec: LabSpec, client: LxdClient | None, report: Reporter) -> str:
    """The driver of the lab's pool: the one it has when it exists (a pool's driver never changes), else
    ``lab_pool_driver`` with ``auto`` resolved (btrfs where ``cow_refusal`` finds nothing, else dir with the reason
    printed). An explicit ``btrfs`` the host cannot make, or an existing pool of another driver, is refused."""
    current = client.get_or_none(f"/1.0/storage-pools/{spec.pool}") if client is not None else None
    if current is not None:
        driver = str(current.get("driver", "dir"))
        if spec.pool_driver not in ("auto", driver) and current.get("description") == spec.marker:
            raise BadInput(f"{spec.source}: lab_pool_driver {spec.pool_driver} but pool {spec.pool} exists with "
                           f"driver {driver}; run `labwright lab down` and `lab up` again to remake it, or set "
                           f"lab_pool_driver = {driver!r}")
        return driver
    if spec.pool_driver == "dir":
        return "dir"
    refusal = cow_refusal()
    if refusal is None:
        return "btrfs"
    if spec.pool_driver == "btrfs":
        raise BadInput(f"{spec.source}: lab_pool_driver btrfs cannot be made here: {refusal}; fix that, or set "
                       "lab_pool_driver = 'dir' (or 'auto')")
    report.info(f"pool {spec.pool}: dir, not btrfs: {refusal}")
    return "dir"


def wanted_objects(spec: LabSpec, pool_driver: str | None = None) -> dict[str, dict[str, Any]]:
    return {
        "networks": {
            "name": spec.bridge, "type": "bridge", "description": spec.marker,
            "config": {"ipv4.address": str(spec.subnet), "ipv4.nat": "true", "ipv6.address": "none"},
        },
        "storage-pools": pool_object(spec, pool_driver or spec.pool_driver.replace("auto", "dir")),
        "profiles": {
            "name": spec.profile, "description": spec.marker,
            "config": {"limits.cpu": spec.cpu, "limits.memory": spec.memory},
            "devices": {
                "root": {"type": "disk", "path": "/", "pool": spec.pool},
                "eth0": {"type": "nic", "name": "eth0", "network": spec.bridge},
            },
        },
    }


def render_preseed(objects: dict[str, dict[str, Any]]) -> str:
    """The `lxd init --preseed` document for the given objects (YAML is a superset of JSON)."""
    key = {"networks": "networks", "storage-pools": "storage_pools", "profiles": "profiles"}
    doc = {key[kind]: [obj] for kind, obj in objects.items()}
    return json.dumps(doc, indent=2, sort_keys=True)


def _norm(value: Any) -> Any:
    """LXD hands every config value back as a string; compare on that footing."""
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return None if value is None else str(value)


def _differs(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    for field in ("config", "devices", "description"):
        if field not in wanted:
            continue
        have = current.get(field) or {}
        if isinstance(wanted[field], dict):
            if any(_norm(have.get(k)) != _norm(v) for k, v in wanted[field].items()):
                return True
        elif have != wanted[field]:
            return True
    return False


def plan_infrastructure(spec: LabSpec, client: LxdClient, pool_driver: str | None = None,
                        backend: Backend = LXD) -> dict[str, dict[str, Any]]:
    """Objects to create or update; refuses objects of the same name that labwright did not make."""
    todo = {}
    for kind, obj in wanted_objects(spec, pool_driver).items():
        current = client.get_or_none(f"/1.0/{kind}/{obj['name']}")
        if current is None:
            todo[kind] = obj
            continue
        if current.get("description") != spec.marker:
            field = {"networks": "lab_bridge", "storage-pools": "lab_pool", "profiles": "lab_profile"}[kind]
            raise BadInput(f"{spec.source}: {backend.title} {kind[:-1]} {obj['name']!r} exists and was not made by "
                           "labwright; "
                           f"set another {field} in the inventory")
        if kind == "storage-pools":
            continue  # made once: its driver and loop file size stay what they were made with
        if _differs(current, obj):
            todo[kind] = obj
    return todo


def apply_preseed(objects: dict[str, dict[str, Any]], backend: Backend = LXD) -> None:
    """``lxd init --preseed`` / ``incus admin init --preseed`` (always a preseed naming every object, never
    ``init --auto``), through the lab's own daemon's socket when LXD_SOCKET/INCUS_SOCKET or LXD_DIR/INCUS_DIR
    moved it."""
    cmd = list(backend.preseed)
    proc = subprocess.run(cmd, input=render_preseed(objects), capture_output=True, text=True)
    if proc.returncode != 0:
        raise OperationFailed(f"{' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")


# --- containers ---------------------------------------------------------------------------------
@dataclass
class ContainerRow:
    name: str
    state: str
    address: str
    image: str
    age: str
    #: A line about the state where it needs one (a guest left Frozen: what holds it, how to thaw it).
    note: str = ""


def instance_address(client: LxdClient, name: str) -> str | None:
    state = client.instance_state(name)
    for iface, info in (state.get("network") or {}).items():
        if iface == "lo":
            continue
        for addr in info.get("addresses", []):
            if addr.get("family") == "inet" and addr.get("scope") == "global":
                return str(addr["address"])
    return None


def wait_ready(client: LxdClient, name: str, timeout: float = 90, backend: Backend = LXD) -> str:
    """Wait until the container has an address and sshd listens; return the address."""
    deadline = time.monotonic() + timeout
    address = None
    while time.monotonic() < deadline:
        address = address or instance_address(client, name)
        if address:
            probe = client.exec(name, ["sh", "-c", "ss -Hltn 'sport = :22' | grep -q LISTEN"])
            if probe.exit_code == 0:
                return address
        time.sleep(0.5)
    raise OperationFailed(f"container {name} did not get an address and sshd within {timeout:.0f}s; "
                          f"see `{backend.client_tool} info {name} --show-log`")


def install_key(client: LxdClient, name: str, public_key: str) -> bool:
    """Put the lab key into root's authorized_keys; return True if it changed."""
    try:
        current = client.exec(name, ["cat", "/root/.ssh/authorized_keys"]).stdout.decode()
    except LxdError:
        current = ""
    if public_key in current:
        return False
    client.exec(name, ["sh", "-c", "mkdir -p -m 700 /root/.ssh"])
    client.push_file(name, "/root/.ssh/authorized_keys", (current + public_key + "\n").encode(), mode=0o600)
    return True


def owned_by(instance: dict[str, Any] | None, spec: LabSpec) -> bool:
    return bool(instance) and (instance or {}).get("config", {}).get(LAB_KEY) == spec.name


def ensure_image(client: LxdClient, report: Reporter) -> str:
    recipe = lab_image.load_recipe()
    if client.image_alias(recipe.alias):
        report.unchanged(f"image {recipe.alias}")
        return recipe.alias
    tarball = lab_image.cached_image(recipe)  # the one built, not one cut short or written over since
    if tarball is None:
        with report.step(f"build image {recipe.alias} with debootstrap (about a minute)"):
            tarball = lab_image.build_image(recipe, log=report.info)
    with report.step(f"import image {recipe.alias}"):
        client.import_image(str(tarball), recipe.alias, {"labwright.recipe": recipe.digest})
    report.change(f"image {recipe.alias} imported")
    return recipe.alias


def launch(client: LxdClient, spec: LabSpec, name: str, alias: str, extra_config: dict[str, str] | None = None,
           ) -> None:
    client.create_instance({
        "name": name,
        "type": "container",
        "source": {"type": "image", "alias": alias},
        "profiles": [spec.profile],
        "config": {LAB_KEY: spec.name, IMAGE_KEY: alias, **(extra_config or {})},
    })


def up(spec: LabSpec, report: Reporter, dry_run: bool = False) -> list[str]:
    """Make the lab match ``spec``. Returns the list of changes (empty when nothing changed)."""
    backend, why = choose_backend(spec)
    report.unchanged(f"lab {spec.name} on {backend.title} ({why})")  # a fact, as "daemon running" is
    client = ensure_daemon(report, backend) if not dry_run else backend.client()
    check_disk()
    existing = {c.name: client.instance_or_none(c.name) for c in spec.containers}
    for name, inst in existing.items():
        if inst is not None and not owned_by(inst, spec):
            raise BadInput(f"{spec.source}: container {name!r} exists and was not made by labwright lab "
                           f"{spec.name!r}; rename it in the inventory or remove it yourself")
    bridge = client.get_or_none(f"/1.0/networks/{spec.bridge}")
    if not (bridge or {}).get("managed"):  # not this daemon's yet: the other daemon's, or a plain interface?
        check_apart(spec, backend)
    driver = choose_pool_driver(spec, client, report)
    todo = plan_infrastructure(spec, client, driver, backend)
    if "networks" in todo:
        check_subnet_free(spec, client, backend)
    if dry_run:
        for kind, obj in todo.items():
            what = f" ({obj['driver']})" if kind == "storage-pools" else ""
            report.change(f"would create/update {kind[:-1]} {obj['name']}{what}")
        for name, inst in existing.items():
            if inst is None:
                report.change(f"would launch container {name}")
            elif inst["status"] != "Running":
                report.change(f"would start container {name}")
        return report.changed
    if todo:
        with report.step(f"preseed {', '.join(o['name'] for o in todo.values())} (bridge {spec.subnet})"):
            try:
                apply_preseed(todo, backend)
            except OperationFailed as exc:
                if spec.pool_driver != "auto" or todo.get("storage-pools", {}).get("driver") != "btrfs":
                    raise
                # the daemon refused the loop file (lxd init reverts what the preseed made): the plain pool then
                report.info(f"pool {spec.pool}: dir, not btrfs: the daemon refused it ({exc})")
                todo["storage-pools"] = pool_object(spec, "dir")
                apply_preseed(todo, backend)
        for kind, obj in todo.items():
            report.change(f"{kind[:-1]} {obj['name']}" + (f" ({obj['driver']})" if kind == "storage-pools" else ""))
    else:
        report.unchanged(f"bridge {spec.bridge} {spec.subnet}, pool {spec.pool}, profile {spec.profile}")
    _, public_key, key_created = ensure_lab_key(say=report.change)  # a .pub rewritten from the private key
    if key_created:
        report.change("generated the lab SSH key")
    alias = ensure_image(client, report) if any(i is None for i in existing.values()) else ""
    for container in spec.containers:
        inst = existing[container.name]
        if inst is None:
            with report.step(f"launch {container.name}"):
                launch(client, spec, container.name, alias)
                client.set_state(container.name, "start")
                wait_ready(client, container.name, backend=backend)
            report.change(f"container {container.name} launched")
        elif inst["status"] != "Running":
            with report.step(f"start {container.name}"):
                client.set_state(container.name, "start")
                wait_ready(client, container.name, backend=backend)
            report.change(f"container {container.name} started")
        if install_key(client, container.name, public_key):
            report.change(f"lab key installed in {container.name}")
    client.shutdown()
    if not report.changed:
        report.info("lab is up to date: nothing changed")
    return report.changed


def _age(created: str) -> str:
    try:
        born = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = int((datetime.now(UTC) - born).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def lab_client(spec: LabSpec) -> tuple[Backend, LxdClient]:
    """The lab's daemon (``choose_backend``) and a client of it, for ``status`` and ``down``."""
    backend, _ = choose_backend(spec)
    return backend, backend.client()


def status(spec: LabSpec, client: LxdClient | None = None) -> list[ContainerRow]:
    client = client or lab_client(spec)[1]
    rows = []
    declared = {c.name for c in spec.containers}
    for inst in client.instances():
        config = inst.get("config", {})
        if config.get(LAB_KEY) != spec.name and inst["name"] not in declared:
            continue
        ours = config.get(LAB_KEY) == spec.name
        running = inst["status"] == "Running"
        rows.append(ContainerRow(
            name=inst["name"] + ("" if ours else " (not labwright's)"),
            state=inst["status"] if inst["name"] in declared or not ours else inst["status"] + " (extra)",
            address=(instance_address(client, inst["name"]) or "-") if running else "-",
            image=config.get(IMAGE_KEY, config.get("image.description", "?")),
            age=_age(inst.get("created_at", "")),
            note=freeze_note(client, inst["name"], str(inst["status"])),
        ))
    for name in sorted(declared - {r.name for r in rows}):
        rows.append(ContainerRow(name, "absent", "-", "-", "-"))
    return sorted(rows, key=lambda r: r.name)


def down(spec: LabSpec, report: Reporter, dry_run: bool = False) -> list[str]:
    """Remove every object ``up`` made for this lab (containers, profile, pool, bridge, image)."""
    client = lab_client(spec)[1]
    for inst in client.instances():
        if inst.get("config", {}).get(LAB_KEY) != spec.name:
            continue
        name = inst["name"]
        if dry_run:
            report.change(f"would delete container {name}")
            continue
        with report.step(f"delete {name}"):
            if inst["status"] == "Running":
                client.set_state(name, "stop", force=True)
            client.delete_instance(name)
        report.change(f"container {name} deleted")
    for kind, name in (("profiles", spec.profile), ("storage-pools", spec.pool), ("networks", spec.bridge)):
        current = client.get_or_none(f"/1.0/{kind}/{name}")
        if current is None or current.get("description") != spec.marker:
            continue
        if dry_run:
            report.change(f"would delete {kind[:-1]} {name}")
            continue
        # the lab's own profile, and the image volumes a copy-on-write pool (btrfs) keeps of images it launched
        # from (_empty_pool removes those), do not keep it
        users = [u for u in current.get("used_by") or []
                 if not u.startswith(("/1.0/profiles/" + spec.profile, "/1.0/images/"))]
        if kind != "profiles" and users:
            raise OperationFailed(f"{kind[:-1]} {name} is still used by {', '.join(users)}; remove those first")
        if kind == "storage-pools":
            _empty_pool(client, name)
        client.request("DELETE", f"/1.0/{kind}/{name}")
        report.change(f"{kind[:-1]} {name} deleted")
    for img in client.request("GET", "/1.0/images", params={"recursion": 1}):
        if "labwright.recipe" not in img.get("properties", {}):
            continue
        if not any(a["name"].startswith("labwright/") for a in img.get("aliases", [])):
            continue
        if dry_run:
            report.change(f"would delete image {img['fingerprint'][:12]}")
            continue
        if _image_in_use(client, img["fingerprint"]):
            continue
        client.delete_image(img["fingerprint"])
        report.change(f"image {img['fingerprint'][:12]} deleted")
    if not report.changed:
        report.info("nothing to remove: the lab is already down")
    return report.changed


def _empty_pool(client: LxdClient, pool: str) -> None:
    """Delete cached image volumes the daemon keeps in the pool (they block the pool's deletion)."""
    for vol in client.request("GET", f"/1.0/storage-pools/{pool}/volumes", params={"recursion": 1}) or []:
        if vol.get("type") == "image":
            client.request("DELETE", f"/1.0/storage-pools/{pool}/volumes/image/{vol['name']}")


def _image_in_use(client: LxdClient, fingerprint: str) -> bool:
    return any(inst.get("config", {}).get("volatile.base_image") == fingerprint for inst in client.instances())
