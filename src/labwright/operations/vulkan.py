"""The guest side of an AMD/Intel GPU (docs/gpu.md, AMD and Intel): the engine's service user in the groups that open
the nodes (``video`` for card nodes, the render nodes' group, made as ``render`` with their gid where the image has
no such group: a minimal Debian image has no udev, so no ``render``), and Mesa's Vulkan drivers (radv for AMD, anv
for Intel: ``mesa-vulkan-drivers``) with ``vulkaninfo`` (``vulkan-tools``, which ``labwright gpu check`` reads).

Nothing happens in a guest without a /dev/dri render node (a CPU or NVIDIA guest): the fact says so first.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.operations import server

from labwright.deploys.common import install_missing
from labwright.facts.dri import DriRenderNodes
from labwright.gpu.devices import GPU_GROUP
from labwright.gpu.dri import RENDER_GROUP

#: Debian/Ubuntu packages: Mesa's Vulkan ICDs (radv, anv, lavapipe) and vulkaninfo.
PACKAGES = ("mesa-vulkan-drivers", "vulkan-tools")


def render_groups(fact: dict[str, object]) -> tuple[list[str], tuple[str, int] | None]:
    """(the groups the service user joins, the (name, gid) of a group to make first, or None): ``video`` and the
    group owning the render nodes' gid; where no group owns it, ``render`` with that gid (``render<gid>`` when the
    image has a ``render`` group of another gid)."""
    nodes = fact.get("render_nodes") or {}
    groups = fact.get("groups") or {}
    assert isinstance(nodes, dict) and isinstance(groups, dict)
    joined, make = [GPU_GROUP], None
    for gid in sorted(set(nodes.values())):
        name = groups.get(gid)
        if name is None:
            name = f"{RENDER_GROUP}{gid}" if RENDER_GROUP in groups.values() else RENDER_GROUP
            make = make or (name, gid)
        if name not in joined:
            joined.append(name)
    return joined, make


def vulkan_guest(user: str) -> bool:
    """In a guest with /dev/dri render nodes: make the render group where missing, put ``user`` in video and the
    render nodes' group, install Mesa's Vulkan drivers and vulkaninfo. False (nothing done) without render nodes."""
    fact = host.get_fact(DriRenderNodes)
    if not fact["render_nodes"]:
        return False
    joined, make = render_groups(fact)
    if make is not None:
        server.group(name=f"Group {make[0]} (gid {make[1]}) for the GPU's render nodes", group=make[0], gid=make[1],
                     system=True)
    server.user(name=f"{user} in {', '.join(joined)} (the GPU's nodes)", user=user, groups=joined, append=True,
                system=True)
    install_missing(PACKAGES, "Mesa's Vulkan drivers and vulkaninfo", name="Install Mesa's Vulkan drivers")
    return True
