"""pyinfra operation: back up the host's flash chip with flashrom (read twice, compare, copy off, verify).

The reads happen when the operation executes (never while pyinfra only plans or diffs), so a run of an unchanged
chip reports the operation as "No Change": it read the chip twice, found the same image already on the controller,
and wrote nothing. A failed check (reads differ, the copy's hash, no flashrom, no /dev/mem) fails the operation with
one line and keeps nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import OperationError

from labwright.bios import backup as backup_module
from labwright.bios.flashrom import check_programmer
from labwright.bios.target import Target
from labwright.errors import LabwrightError
from labwright.ui import Reporter


def _report(state: Any, host: Any, lines: list[str]) -> bool:  # pyinfra passes state and host by name
    for line in lines:
        host.log(line)
    return True


def _fail(state: Any, host: Any, message: str) -> bool:
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


@operation()
def backup(programmer: str = "internal", out: str = "backups/bios"):
    """
    Read the whole chip twice with flashrom, compare sha256, copy the image and a JSON manifest to ``out`` on the
    controller and check the copy's sha256; decode the Intel Flash Descriptor into the manifest.

    + programmer: flashrom's ``-p`` (``internal`` on the board itself, an external programmer, or ``dummy:...``)
    + out: directory on the controller (relative to where pyinfra runs)

    Needs flashrom on the host (deploys/bios_backup.py installs it first).

    **Example:**

    .. code:: python

        from labwright.operations import bios
        bios.backup(name="BIOS backup", programmer="internal", out="/srv/backups/bios")
    """
    try:
        check_programmer(programmer)
    except LabwrightError as exc:
        raise OperationError(str(exc)) from None
    directory = Path(out).resolve()
    if not state.is_executing:
        # Planning or diffing: say what will happen; reading the chip is work for the execution phase.
        yield FunctionCommand(_report, ([f"read the chip twice with flashrom -p {programmer}, copy to {directory}"],),
                              {})
        return
    try:
        result = backup_module.backup(Target.from_host(host), programmer, directory, Reporter())
    except LabwrightError as exc:
        yield FunctionCommand(_fail, (str(exc),), {})
        return
    warnings = [f"warning: {w}" for w in result.manifest.get("warnings", [])]
    if not result.new:
        for line in [*result.notes, *warnings]:
            host.log(line)
        host.noop(result.notes[0] if result.notes else "unchanged")
        return
    yield FunctionCommand(_report, ([*warnings, f"backup written: {result.image} (sha256 "
                                     f"{result.manifest['sha256']}) and {result.manifest_file}"],), {})
