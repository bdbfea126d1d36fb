"""pyinfra fact about a guest's AMD/Intel GPU: its DRM render nodes and the groups that open them (labwright.gpu.dri
passes render nodes and /dev/kfd with the guest's ``render`` gid, card nodes with ``video``'s).

**Example:**

.. code:: python

    dri = host.get_fact(DriRenderNodes)
    if dri["render_nodes"]:
        ...  # the service user joins dri["render_gid"]'s group
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from labwright.gpu.dri import RENDER_GROUP
from labwright.textio import ascii_digits


class DriRenderNodes(FactBase[Any]):
    """``{"render_nodes": {path: gid}, "groups": {gid: name}}``: the guest's /dev/dri/renderD* character nodes
    (``[ -c ]``: LXD bind-mounts each over a plain file) with their gid, and the ``render``/``video`` groups and the
    groups owning those gids as the guest's /etc/group names them."""

    def command(self) -> str:
        return ("for f in /dev/dri/renderD*; do [ -c \"$f\" ] && stat -c 'node %n %g' \"$f\"; done; "
                f"for g in {RENDER_GROUP} video $(for f in /dev/dri/renderD*; do [ -c \"$f\" ] && stat -c %g \"$f\"; "
                "done); do getent group \"$g\" | sed 's/^/group /'; done; true")

    def process(self, output: list[str]) -> dict[str, Any]:
        nodes: dict[str, int] = {}
        groups: dict[int, str] = {}
        for line in output:
            kind, _, rest = line.partition(" ")
            if kind == "node" and len(rest.split()) == 2 and ascii_digits(rest.split()[1]):
                path, gid = rest.split()
                nodes[path] = int(gid)
            elif kind == "group":
                fields = rest.split(":")
                if len(fields) > 2 and ascii_digits(fields[2]):
                    groups[int(fields[2])] = fields[0]
        return {"render_nodes": nodes, "groups": groups}
