"""The inventory's ``guest`` declaration typed by one schema (issue 33): every key declared once with its type, built
from :mod:`labwright.schema` (``Schema``: unknown keys refused naming the closest known one, in a mount, an
interface, a root disk or a PCI device too; ``whole`` ranges; booleans true or false, never the string "false") and
the guest value checks of :mod:`labwright.guests.fields`.

::

    typed = parse_guest(data, where="inv.py: guest llm1")
    # BadInput: inv.py: guest llm1: mounts[0].readonly: 'false' is a string, not true or false; write false without
    #           quotes

What the schema checks is each value alone (its type, range, spelling). What depends on other keys (the backend the
host name implies, a VM's container-only keys, a vmid a Proxmox guest needs) is checked after it by
:func:`labwright.guests.model.spec_from_data` and :func:`labwright.guests.vm.parse_vm`, each refusal one line too.

pydantic is imported inside :func:`guest_schema` (``labwright --help`` does not pay for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from labwright.errors import BadInput
from labwright.guests import fields
from labwright.guests.vm import BIOSES, MACHINE, MAPPING_ID, OSTYPES, PCI_ID
from labwright.schema import checks

if TYPE_CHECKING:
    from labwright.schema.model import Schema

#: Where the keys are listed, for an unknown key without a close known one.
DOCS = "docs/guests.md"
BACKENDS: tuple[str, ...] = ("proxmox", "lxd")
KINDS: tuple[str, ...] = ("ct", "vm")
#: ``auto``: the vendor the host has (labwright.gpu.dri.resolve_vendor, from /sys/class/drm), resolved by the backend.
GPU_KINDS: tuple[str, ...] = ("nvidia", "amd", "intel", "auto", "none")


def optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check``, but None (the key not set, or set to None) stays None."""
    return lambda value: None if value is None else check(value)


def _choice(choices: tuple[str, ...], fix: str = "") -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
        if text not in choices:
            raise ValueError(f"{value!r} must be {fix or 'one of ' + ', '.join(choices)}")
        return text

    return check


def _matching(pattern: Any, what: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not (isinstance(value, str) and pattern.match(value)):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


def between(low: int, high: int) -> Callable[[Any], int]:
    """:func:`labwright.schema.checks.whole` from ``low`` to ``high``, its refusal saying the range as the guest
    declaration always has (``0 is outside 1-8192``, ``'six' is not a whole number between 1 and 8192``)."""
    whole = checks.whole(low, high)

    def check(value: Any) -> int:
        try:
            return whole(value)
        except ValueError:
            if isinstance(value, int) and not isinstance(value, bool):
                raise ValueError(f"{value} is outside {low}-{high}") from None
            raise ValueError(f"{value!r} is not a whole number between {low} and {high}") from None

    return check


def _gpu(value: Any) -> str:
    found = "none" if value in (None, False) else value
    if found not in GPU_KINDS:
        raise ValueError(f"{value!r} must be one of {', '.join(GPU_KINDS)} (auto: the vendor the host has)")
    return str(found)


def _text(value: Any) -> str:
    """A name or description: text (a number is taken as its digits), no control character but a line break."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not text")
    text = str(value)
    if any((ord(c) < 32 and c not in "\n\t") or ord(c) == 127 for c in text):
        raise ValueError(f"{text[:60]!r} holds a control character; remove it")
    return text


def _profiles(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) and p for p in value):
        raise ValueError(f"{value!r} must be a list of LXD/Incus profile names")
    return tuple(value)


def _lxd_config(value: Any) -> tuple[tuple[str, str], ...]:
    """Extra raw LXD config keys (a dict of keys to values), never LXD's own volatile.* keys; the two limits people
    write by hand checked here rather than by the daemon halfway through an apply."""
    from labwright.lab.spec import validate_cpu, validate_memory

    if value is None or value == ():  # not set (the default)
        return ()
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{value!r} must be a dict of LXD/Incus config keys to values")
    if any(k.startswith("volatile.") for k in value):
        raise ValueError("cannot set volatile.* keys; the daemon (LXD or Incus) owns them")
    for key, validate in (("limits.cpu", validate_cpu), ("limits.memory", validate_memory)):
        if key in value:
            try:
                validate(value[key], "", f"lxd_config {key}")
            except BadInput as error:
                raise ValueError(str(error).removeprefix(": ")) from None
    return tuple(sorted((k, "true" if v is True else "false" if v is False else str(v)) for k, v in value.items()))


def _list_of_tables(example: str, single: bool = False) -> Callable[[Any], Any]:
    """A list of tables (``single``: one table alone too); a table of another shape is refused by its model."""

    def check(value: Any) -> Any:
        if value is None:
            return ()
        if single and isinstance(value, Mapping):
            return [value]
        if not isinstance(value, list | tuple):
            raise ValueError(f"{value!r} is not a list like [{example}]")
        for index, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise ValueError(f"[{index}] {item!r} is not a dict like {example}")
        return value

    return check


def _root_disk(value: Any) -> Any:
    """``"local-lvm:64"``, ``"64"``/``64``/``"64G"`` or ``{"storage": ..., "size": ...}``, as a table."""
    if value is None or isinstance(value, Mapping):
        return value
    if isinstance(value, str) and ":" in value:
        storage, size = value.split(":", 1)
        return {"storage": storage, "size": size}
    return {"size": value}


def _pci_device(value: Any) -> Any:
    """A PCI device as a table; PVE's own spelling (``"0000:01:00,pcie=1,x-vga=1"``, ``"mapping=rtx4090"``) read
    into one, its 0/1 words as booleans."""
    if not isinstance(value, str):
        return value
    parsed: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        key, sep, found = part.partition("=")
        if not sep:
            key, found = "host", part
        if key in parsed:
            raise ValueError(f"{key} is given twice in {value!r}; write it once")
        parsed[key] = fields.word_bool(found) if key in ("pcie", "x-vga", "x_vga", "rombar") else found
    return parsed


def _pci_devices(value: Any) -> Any:
    if value is None:
        return ()
    items = list(value) if isinstance(value, list | tuple) else [value]
    devices = [_pci_device(item) for item in items]
    example = '{"host": "0000:01:00", "pcie": true, "x-vga": true} or {"mapping": "rtx4090"}'
    for index, item in enumerate(devices):
        if not isinstance(item, Mapping):
            raise ValueError(f"[{index}] {item!r} is not a PCI device like {example}")
    return devices


def _pci_addresses(value: Any) -> tuple[str, ...]:
    if value == ():  # not set (the default): then `mapping` names the device
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(";")
    addresses = tuple(str(a).strip().lower() for a in items)
    bad = [a for a in addresses if not PCI_ID.match(a)]
    if bad or not addresses:
        raise ValueError(f"{bad[0] if bad else value!r} is not a PCI address; write [DOMAIN:]BUS:DEVICE[.FUNCTION] in "
                         "hex as `lspci -D` shows it, e.g. \"0000:01:00\" (every function) or \"0000:01:00.0\"")
    return addresses


@cache
def guest_schema() -> type[Schema]:
    """The ``guest`` declaration's schema (built on first use)."""
    from typing import Annotated

    from pydantic import BeforeValidator as Check
    from pydantic import Field, model_validator

    from labwright.hostnames import INSTANCE_NAME, VMID_MAX, VMID_MIN
    from labwright.schema.model import Schema

    flag = Annotated[bool, Check(fields.guest_bool)]
    maybe_flag = Annotated[bool | None, Check(optional(fields.guest_bool))]

    class Mount(Schema):
        host: Annotated[str, Check(fields.mount_path)]
        guest: Annotated[str, Check(fields.mount_path)]
        readonly: flag = False
        required: flag = True
        name: Annotated[str | None, Check(optional(_matching(INSTANCE_NAME, "a mount name (letters, digits and "
                                                                            "hyphens)")))] = None
        shift: flag = False

        @model_validator(mode="after")
        def _not_the_system(self) -> Mount:
            # sweep at 2b91fd1: the host's / read-write at the guest's /proc was accepted. A guest path on a kernel
            # filesystem hides the guest's own; a host system directory writable from a guest is the host's root.
            from labwright.schema.checks import KERNEL_DIRS, SYSTEM_DIRS
            guest = self.guest.rstrip("/") or "/"
            if guest == "/" or any(guest == d or guest.startswith(f"{d}/") for d in KERNEL_DIRS):
                raise ValueError(f"guest {self.guest!r} is the guest's root or a kernel filesystem (/proc, /sys, "
                                 "/dev); mount at a directory of its own, e.g. /srv/models")
            host = self.host.rstrip("/") or "/"
            if not self.readonly and (host in SYSTEM_DIRS or any(host == d or host.startswith(f"{d}/")
                                                                  for d in KERNEL_DIRS)):
                raise ValueError(f"host {self.host!r} is a system directory; a guest may only read it (readonly: "
                                 "true), or mount a directory of its own such as /srv/models")
            return self

    class Interface(Schema):
        name: Annotated[str | None, Check(optional(fields.interface_name))] = None
        bridge: Annotated[str, Check(fields.bridge_name)] = None  # type: ignore[assignment]  # checked: required
        ip: Annotated[str, Check(lambda v: str(v).strip())] = "dhcp"
        gw: Annotated[str | None, Check(optional(lambda v: str(v).strip()))] = None
        hwaddr: Annotated[str | None, Check(optional(fields.mac_address))] = None
        vlan: Annotated[int | None, Check(optional(between(1, 4094)))] = None
        tag: Annotated[int | None, Check(optional(between(1, 4094)))] = None
        mtu: Annotated[int | None, Check(optional(between(576, 65535)))] = None

        @model_validator(mode="after")
        def _address(self) -> Interface:
            fields.check_address(self.ip, self.gw)
            return self

    class RootDisk(Schema):
        storage: Annotated[str | None, Check(optional(fields.pool_name))] = None
        size: Annotated[int | None, Check(optional(fields.gib))] = None

    class PciDevice(Schema):
        host: Annotated[tuple[str, ...], Check(optional(_pci_addresses))] = ()
        mapping: Annotated[str | None, Check(optional(_matching(
            MAPPING_ID, "a resource mapping id (letters, digits, - and _, starting with a letter; Datacenter > "
                        "Resource Mappings)")))] = None
        pcie: maybe_flag = None
        x_vga: maybe_flag = Field(None, alias="x-vga")
        x_vga_: maybe_flag = Field(None, alias="x_vga")
        rombar: maybe_flag = None

        @model_validator(mode="after")
        def _one_source(self) -> PciDevice:
            if self.host and self.mapping is not None:
                raise ValueError("give `host` or `mapping`, not both (PVE: Cannot set both 'host' and 'mapping')")
            if not self.host and self.mapping is None:
                raise ValueError("give the device's PCI address as `host` (e.g. \"0000:01:00\", from `lspci -D`) or "
                                 "a resource mapping id as `mapping`")
            return self

    name_check = _matching(fields.NAME_PATTERN, "a node name such as pve1")

    class GuestData(Schema):
        name: Annotated[str | None, Check(optional(_text))] = None
        backend: Annotated[str | None, Check(optional(_choice(BACKENDS)))] = None
        kind: Annotated[str, Check(_choice(KINDS, "ct (a container, the default) or vm (a Proxmox qemu VM)"))] = "ct"
        node: Annotated[str | None, Check(optional(name_check))] = None
        vmid: Annotated[int | None, Check(optional(between(VMID_MIN, VMID_MAX)))] = None
        hostname: Annotated[str | None, Check(optional(_matching(
            fields.HOSTNAME, "a valid host name (letters, digits, hyphens)")))] = None
        template: Annotated[str | None, Check(optional(checks.line))] = None
        image: Annotated[str | None, Check(optional(checks.line))] = None
        clone: Annotated[str | None, Check(optional(_matching(INSTANCE_NAME, "the name of an existing LXD/Incus "
                                                                             "instance")))] = None
        cores: Annotated[int | None, Check(optional(between(1, 8192)))] = None
        memory: Annotated[int | None, Check(optional(fields.memory_mib))] = None
        swap: Annotated[int | None, Check(optional(fields.mib))] = None
        rootfs: Annotated[RootDisk | None, Check(_root_disk)] = None
        net: Annotated[tuple[Interface, ...], Check(_list_of_tables('{"bridge": "vmbr0", "ip": "dhcp"}',
                                                                    single=True))] = ()
        unprivileged: flag = True
        features: Annotated[tuple[tuple[str, bool | str], ...], Check(lambda v: () if v is None else
                                                                       fields.features(v))] = ()
        mounts: Annotated[tuple[Mount, ...], Check(_list_of_tables('{"host": "/tank/models", "guest": '
                                                                   '"/models"}'))] = ()
        gpu: Annotated[str, Check(_gpu)] = "none"
        gpu_mode: Annotated[str, Check(checks.line)] = "auto"
        nvidia_runtime: maybe_flag = None
        profiles: Annotated[tuple[str, ...] | None, Check(optional(_profiles))] = None
        start: flag = True
        onboot: maybe_flag = None
        lxd_config: Annotated[tuple[tuple[str, str], ...], Check(_lxd_config)] = ()
        description: Annotated[str | None, Check(optional(_text))] = None
        # kind: vm (labwright.guests.vm): defaults that depend on hostpci are set there
        hostpci: Annotated[tuple[PciDevice, ...], Check(_pci_devices)] = ()
        ostype: Annotated[str | None, Check(optional(_choice(
            OSTYPES, f"a Proxmox OS type: one of {', '.join(OSTYPES)} (win11 for Windows 11, l26 for Linux)")))] = None
        bios: Annotated[str | None, Check(optional(_choice(BIOSES, "seabios or ovmf (ovmf for GPU passthrough)")))] \
            = None
        machine: Annotated[str | None, Check(optional(_machine(MACHINE)))] = None
        disk: Annotated[RootDisk | None, Check(_root_disk)] = None

    return GuestData


def _machine(pattern: Any) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = "pc" if str(value) == "i440fx" else str(value)
        if not pattern.match(text):
            raise ValueError(f"{text!r} must be q35, pc (i440fx) or a pinned version such as pc-q35-9.2+pve1")
        return text

    return check


def known_keys() -> frozenset[str]:
    """Every key a ``guest`` declaration may hold."""
    return frozenset(field.alias or name for name, field in guest_schema().model_fields.items())


def parse_guest(data: Mapping[str, Any], where: str) -> Any:
    """``data`` (a ``guest`` dict) typed by :func:`guest_schema`; BadInput ``WHERE: KEY: ...``, one line."""
    from labwright.schema.model import parse

    def refuse(line: str) -> BadInput:
        return BadInput(f"{where}: {line}")

    return parse(guest_schema(), data, error=refuse, where=DOCS)
