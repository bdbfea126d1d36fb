"""``check_ct_modify_config_perm`` (pve-container ``LXC.pm``): who may set which container option.

The rule that matters most for GPU guests: the function returns early only for the literal user
``root@pam``. Everyone else, an API token of root (``root@pam!ci``) included, is refused device
passthrough (``devN``), non-volume mount points and feature flags other than ``nesting``.

Provenance: pve-container 6.1.10 (94f558522ef6), src/PVE/LXC.pm ``check_ct_modify_config_perm`` (1655-1756):
root@pam returns early (1658); devN is root-only (1686-1687); features on a privileged CT (1691-1692), on an
unprivileged one all but nesting (1731-1732). The 403 text is pve-common 9.2.1 src/PVE/Exception.pm
``raise_perm_exc`` (53-68): "Permission check failed (WHAT)".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from support.pve_config import NEW_DISK_RE, classify_mountpoint
from support.pve_schema import PveApiError, indexed_schema, parse_property_string
from support.pve_state import PveCluster

ROOT = "root@pam"  # the only principal check_ct_modify_config_perm waves through; a token is never it


def perm_error(what: str) -> PveApiError:
    return PveApiError(403, f"Permission check failed ({what})")


def fmt(props: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return (indexed_schema(props, key) or {}).get("format") or {}


def parse_mountpoint(props: Mapping[str, Any], key: str, value: str) -> dict[str, str]:
    data = parse_property_string(fmt(props, key), value)
    data["type"] = classify_mountpoint(data.get("volume", ""))
    return data


def check_modify_perm(cluster: PveCluster, user: str, vmid: int, old: Mapping[str, str] | None,
                      new: Mapping[str, str], delete: list[str], unprivileged: bool,
                      props: Mapping[str, Any]) -> None:
    """``check_ct_modify_config_perm``: everything passes for the literal user root@pam and nobody else."""
    if user == ROOT:
        return
    vm = f"/vms/{vmid}"

    def check(opt: str, deleting: bool) -> None:
        if opt in ("cores", "cpuunits", "cpulimit"):
            cluster.check_perm(user, vm, ["VM.Config.CPU"])
        elif opt == "rootfs" or re.match(r"^mp\d+$", opt):
            cluster.check_perm(user, vm, ["VM.Config.Disk"])
            if deleting:
                return
            data = parse_mountpoint(props, opt, new[opt])
            if data["type"] != "volume":
                raise perm_error(f"mount point type {data['type']} is only allowed for root@pam")
            fresh = NEW_DISK_RE.match(data["volume"])
            if fresh:
                cluster.check_perm(user, f"/storage/{fresh.group(1)}", ["Datastore.AllocateSpace"])
        elif opt in ("memory", "swap"):
            cluster.check_perm(user, vm, ["VM.Config.Memory"])
        elif re.match(r"^net\d+$", opt) or opt in ("nameserver", "searchdomain", "hostname"):
            cluster.check_perm(user, vm, ["VM.Config.Network"])
        elif re.match(r"^dev\d+$", opt):
            raise perm_error("configuring device passthrough is only allowed for root@pam")
        elif opt == "features":
            if not unprivileged:
                raise perm_error("changing feature flags for privileged container is only allowed for root@pam")
            before = parse_property_string(fmt(props, opt), old[opt]) if old and old.get(opt) else None
            after = {} if deleting else parse_property_string(fmt(props, opt), new[opt])
            if deleting:
                touched = set(before or {})
            elif before is not None:
                touched = {k for k in set(before) | set(after) if before.get(k, "") != after.get(k, "")}
            else:
                touched = set(after)
            if touched - {"nesting"}:
                raise perm_error("changing feature flags (except nesting) is only allowed for root@pam")
            if touched:
                cluster.check_perm(user, vm, ["VM.Allocate"])
        elif opt == "hookscript":
            raise perm_error("changing the hookscript is only allowed for root@pam")
        else:
            cluster.check_perm(user, vm, ["VM.Config.Options"])

    for opt in new:
        check(opt, False)
    for opt in delete:
        check(opt, True)
