"""What sshd really uses: ``sshd -T`` compared with the values the base deploy wants (labwright.base.deploy_data).

A drop-in can be outvoted by a file sshd reads earlier (sshd keeps the first value of each option: OpenSSH
servconf.c ``parse_multistate``), so the base deploy reads the effective configuration, not its own file.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyinfra.api import FactBase

from labwright.base.deploy_data import SSHD_DROPIN, sshd_effective_check


class SshdEffectiveProblems(FactBase):
    """One line per hardening option whose ``sshd -T`` value is not the expected one (``[]``: all in effect, or no
    sshd installed), each naming the file that sets it first."""

    def command(self, expected: Mapping[str, str], dropin: str = SSHD_DROPIN) -> str:
        return sshd_effective_check(dict(expected), dropin, report=True)

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip().startswith("labwright: ")]
