"""Guests: declarative LXC containers on Proxmox VE and LXD/Incus, one model behind two backends.

- ``model``: ``GuestSpec`` parsed from an inventory's ``guest`` data, ``Change`` and ``Plan``.
- ``base``: the backend interface (plan, apply, show, start, stop, destroy) and ``backend_for``.
- ``gpu``: host NVIDIA facts (device nodes, majors, driver version) and the driver-match rule.
- ``lxd`` / ``proxmox``: the two backends.
"""
