"""The target-side command line, run from the labwright bundle: ``python3 labwright-stack.pyz COMMAND ...``.

argparse, not typer: the bundle carries only the standard library, the verifier and pip. The pyinfra operation
runs ``switch``/``rollback`` through it; people can run ``show``/``rollback`` with it inside a guest::

    python3 /opt/labwright/lib/labwright-stack.pyz show --venv /opt/tabbyapi/.venv
    python3 /opt/labwright/lib/labwright-stack.pyz rollback --venv /opt/tabbyapi/.venv --service tabbyapi
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from labwright.errors import BadInput, LabwrightError
from labwright.guestlock import DEFAULT_WAIT, LOCK_PATH, hold_local
from labwright.stacks import show as show_module
from labwright.stacks.plan import DEFAULT_ROOT, check_root, check_venv_path, plan_from_json
from labwright.stacks.service import HealthCheck
from labwright.stacks.switch import Options, build_only, rollback, switch
from labwright.textio import loads_json


def log(line: str) -> None:
    print(f"labwright: {line}", flush=True)


def _common(parser: argparse.ArgumentParser, with_service: bool = True) -> None:
    if with_service:
        parser.add_argument("--service", help="systemd unit to restart after the swap")
        parser.add_argument("--health", dest="health_url", help="HTTP URL that must answer 2xx/3xx after a restart")
        parser.add_argument("--health-cmd", help="shell command that must exit 0 after a restart")
        parser.add_argument("--health-timeout", type=float, default=60.0, help="seconds to wait for health")
        parser.add_argument("--lock-wait", type=float, default=DEFAULT_WAIT,
                            help=f"seconds to wait for another labwright run on this machine ({LOCK_PATH})")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="labwright-stack", description="labwright stack switch, target side")
    sub = root.add_subparsers(dest="command", required=True)
    sw = sub.add_parser("switch", help="build, verify, swap, restart, health-check a planned stack")
    sw.add_argument("--plan", required=True, help="plan JSON file (written by labwright), or - for stdin")
    sw.add_argument("--keep", type=int, default=2, help="environments to keep per path (current included)")
    sw.add_argument("--base-python", help="interpreter to create the venv with (default: python<version>)")
    sw.add_argument("--installer", default="auto", choices=("auto", "uv", "pip"))
    sw.add_argument("--create", action="store_true", help="allow a --venv path that does not exist yet")
    sw.add_argument("--build-only", action="store_true",
                    help="build and verify beside the running stack, swap nothing (a switch with the same plan next "
                         "reuses it)")
    _common(sw)
    rb = sub.add_parser("rollback", help="swap back to the previous environment")
    rb.add_argument("--venv", required=True)
    rb.add_argument("--root", default=DEFAULT_ROOT)
    _common(rb)
    sh = sub.add_parser("show", help="current and previous stacks, from the ABI verifier")
    sh.add_argument("--venv", required=True)
    sh.add_argument("--root", default=DEFAULT_ROOT)
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--no-import", action="store_true")
    return root


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["pip"]:
        return _pip(args_list[1:])
    args = parser().parse_args(args_list)
    try:
        return _dispatch(args)
    except LabwrightError as exc:
        print(f"labwright: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("labwright: interrupted", file=sys.stderr)
        return 130


def _options(args: argparse.Namespace) -> Options:
    health = HealthCheck(url=args.health_url, command=args.health_cmd, timeout_s=args.health_timeout)
    return Options(service=args.service, health=health, keep=getattr(args, "keep", 2),
                   base_python=getattr(args, "base_python", None), installer=getattr(args, "installer", "auto"),
                   create=getattr(args, "create", False))


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "switch":
        text = _decode(sys.stdin.buffer.read(), "-") if args.plan == "-" else _read(args.plan)
        try:
            data = loads_json(text)
        except ValueError as exc:
            raise BadInput(f"--plan {args.plan}: not JSON ({exc})") from None
        plan = plan_from_json(data, args.plan)
        if args.build_only:  # the plan file stays: the switch that follows reads it
            with hold_local(f"stack build of {plan.stack} beside {plan.venv}", wait=_lock_wait(args)):
                outcome = build_only(plan, _options(args), log)
            log(outcome.message)
            return 0
        try:
            with hold_local(f"stack switch of {plan.venv} to {plan.stack}", wait=_lock_wait(args)):
                outcome = switch(plan, _options(args), log)
        finally:
            # The operation's copy of the plan: the environment's manifest records what was built.
            if args.plan != "-" and Path(args.plan).parent == Path(plan.root) / "plans":
                Path(args.plan).unlink(missing_ok=True)
        log(outcome.message)
        return 0
    if args.command == "rollback":
        venv = check_venv_path(args.venv)
        with hold_local(f"stack rollback of {venv}", wait=_lock_wait(args)):
            outcome = rollback(check_root(args.root), venv, _options(args), log)
        log(outcome.message)
        return 0
    data = show_module.show(check_root(args.root), check_venv_path(args.venv), do_import=not args.no_import)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(show_module.render(data)))
    return 0 if all(env["ok"] for env in data["environments"][:1]) else 1


def _lock_wait(args: argparse.Namespace) -> float:
    wait = float(args.lock_wait)
    if not math.isfinite(wait) or not 0 <= wait <= 86400:
        raise BadInput(f"--lock-wait {wait:g} must be a number of seconds from 0 to 86400; pass one like 300")
    return wait


def _read(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"--plan {path}: cannot read it ({exc.strerror}); pass the plan JSON labwright wrote") from None
    return _decode(data, path)


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise BadInput(f"--plan {path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}), not a "
                       "plan JSON; pass the plan file labwright wrote") from None


def _pip(args: list[str]) -> int:
    """Run the bundled pip in this interpreter (the new venv's), so it installs into that venv."""
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    from pip._internal.cli.main import main as pip_main

    return int(pip_main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
