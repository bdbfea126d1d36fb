"""pyinfra facts about engine keys that never return a key: whether a keys file on the host is current."""

from __future__ import annotations

from pyinfra.api import FactBase

from labwright.shell import quote


class KeysFileCurrent(FactBase):
    """True when a keys file already holds what its writing script would write; ``script`` (a check-mode script,
    e.g. labwright.litellm.config.local_keys_script(check=True)) prints only ``current`` or ``stale``."""

    def command(self, script: str) -> str:
        return f"sh -c {quote(script)}"

    def process(self, output: list[str]) -> bool:
        return "".join(output).strip() == "current"
