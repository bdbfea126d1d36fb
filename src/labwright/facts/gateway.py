"""pyinfra facts for deploys/gateway.py that never return a key: the state of the client keys on the gateway."""

from __future__ import annotations

from pyinfra.api import FactBase


class ClientKeysState(FactBase):
    """``current``, ``stale`` or ``bad NAME`` (a client's key file that holds no usable key), from ``command``:
    labwright.gateway.config.client_keys_command(..., check=True)."""

    def command(self, command: str) -> str:
        return command

    def process(self, output: list[str]) -> str:
        return "".join(output).strip()
