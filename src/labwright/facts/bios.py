"""pyinfra facts for flashrom BIOS backups."""

from __future__ import annotations

from pyinfra.api import FactBase
from typing_extensions import override


class FlashromPath(FactBase[str | None]):
    """Where ``flashrom`` is (Debian puts it in /usr/sbin, which a non-login PATH may lack), or None."""

    @override
    def command(self) -> str:
        return 'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v flashrom || true'

    @override
    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output and output[0].strip() else None
