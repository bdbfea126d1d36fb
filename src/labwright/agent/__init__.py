"""labwright's agent: the code labwright runs ON a host, in one standard-library-only package.

A host (a guest container, a Proxmox CT, a machine over SSH) has ``python3`` and systemd, nothing else: everything
here imports only the standard library and ``labwright.errors`` (``tests/unit/agent`` scans for it). It is built
into one zipapp (:mod:`labwright.agent.zipapp`: the same sources give the same bytes, so the same sha256), pushed
once per host to a root-owned path (``/usr/local/lib/labwright/agent-<sha12>.pyz``, skipped when a file with that
sha256 is already there) and run as ``python3 AGENT SUBCOMMAND ...`` (see ``labwright.agent.__main__``).
"""
