"""``python3 AGENT SUBCOMMAND ...``: the agent's subcommands, each the one implementation of its job on a host.

- ``health CHECK_JSON``: a deploy's health check (restart first when asked), :mod:`labwright.agent.health`;
- ``restart UNIT``: restart a systemd unit past its start limit (:func:`labwright.agent.service.restart_unit`);
  on failure its journal tail and one ``labwright:`` line (:func:`labwright.agent.service.not_started`);
- ``default-keys KNOWN_JSON PATH...``: which variables in PATHs hold a known default key,
  :mod:`labwright.agent.default_keys`;
- ``probe REQUEST_JSON``: the context-ceiling probe's steps in the guest, :mod:`labwright.agent.probe`;
- ``lock take|release|read ARGUMENT_JSON``: the guest's run lock, :mod:`labwright.guestlock` (its guest half).

Exit status and output are each subcommand's own; an unknown subcommand is one ``labwright:`` line, exit 2.
"""

from __future__ import annotations

import sys

from labwright.errors import BadInput, LabwrightError


def _restart(argv: list[str]) -> int:
    from labwright.agent import service

    if len(argv) != 1:
        print("labwright: usage: restart UNIT", file=sys.stderr)
        return 2
    try:
        attempts = service.restart_unit(argv[0], backoff_s=service.BACKOFF_S)
    except BadInput as exc:
        print(f"labwright: {exc}", file=sys.stderr)
        return exc.exit_code
    except LabwrightError as exc:
        # systemd's reason, the unit's journal tail, then one line: why it is not running and how to start it
        print(str(exc), file=sys.stderr)
        print(service.not_started(service.check_unit(argv[0])), file=sys.stderr)
        return exc.exit_code
    print(f"restarted {argv[0]}" + (f" (attempt {attempts}: systemd's start limit refused before)"
                                    if attempts > 1 else ""))
    return 0


def _health(argv: list[str]) -> int:
    from labwright.agent import health

    return health.main(argv)


def _default_keys(argv: list[str]) -> int:
    from labwright.agent import default_keys

    return default_keys.main(argv)


def _probe(argv: list[str]) -> int:
    from labwright.agent import probe

    return probe.main(argv)


def _lock(argv: list[str]) -> int:
    from labwright import guestlock

    return guestlock._main(argv)


SUBCOMMANDS = {"health": _health, "restart": _restart, "default-keys": _default_keys, "probe": _probe,
               "lock": _lock}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SUBCOMMANDS:
        print(f"labwright: agent: subcommand {argv[0] if argv else '(none)'!r} unknown; one of "
              f"{', '.join(sorted(SUBCOMMANDS))}", file=sys.stderr)
        return 2
    return SUBCOMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
