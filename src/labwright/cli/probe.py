"""`labwright probe`: Find the real context ceiling of a running engine."""

from __future__ import annotations

import base64
import json
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import typer
from rich.markup import escape

from labwright import guestlock
from labwright.cli import vocab
from labwright.errors import BadInput
from labwright.tuning import kv_modes
from labwright.tuning.kv import read_layout
from labwright.tuning.probe import (
    DEFAULT_PAGE,
    ENGINES,
    CeilingResult,
    Probe,
    Target,
    cache_spec,
    check_range,
    leftovers,
    llamacpp_target,
    probe_ceiling,
    recover,
    tabbyapi_target,
)
from labwright.tuning.probe_guest import LxdGuest
from labwright.tuning.units import MIB, parse_size
from labwright.ui import console, stdout, table

NAME = "probe"
HELP = "Find the real context ceiling of a running engine."

app = typer.Typer(no_args_is_help=True, help=HELP)
LockWaitOption = vocab.LockWaitOption

DEFAULT_SERVICE = {"llamacpp": "llama-server", "tabbyapi": "tabbyapi"}
MAX_TIMEOUT_S = 3600.0  # a real model load is minutes at worst; more is a typo
_UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")


def _unit(service: str) -> str:
    """The unit's name without .service, checked: it names a file in the guest (the probe's record)."""
    name = service.removesuffix(".service")
    if not name or not _UNIT.match(name) or name.startswith("."):
        raise BadInput(f"--service {service!r} is not a systemd service name; pass one like llama-server or "
                       "tabbyapi.service")
    return name


def _spec(engine: str, cache_mode: str | None, cache_type: str | None) -> kv_modes.CacheSpec:
    if engine not in ENGINES:
        raise BadInput(f"--engine {engine}: the probe knows {', '.join(ENGINES)}")
    if engine == "llamacpp" and cache_mode:
        raise BadInput(f"--cache-mode {cache_mode}: llama.cpp takes --cache-type (f16, q8_0, q4_0 ... or K,V such as "
                       "q8_0,q4_0), not tabbyAPI's --cache-mode")
    if engine == "tabbyapi" and cache_type:
        raise BadInput(f"--cache-type {cache_type}: tabbyAPI takes --cache-mode (FP16, Q8, Q6, Q4 or K,V bits such as "
                       "8,4), not --cache-type")
    return cache_spec(engine, cache_mode or cache_type)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.0f} MiB"


def _row(probe: Probe) -> list[str]:
    mark = {"ok": "[green]ok[/]", "oom": "[red]oom[/]", "timeout": "[yellow]timeout[/]"}.get(probe.outcome,
                                                                                            probe.outcome)
    return [f"{probe.candidate:,}", mark, _mib(probe.peak_rss_bytes), f"{probe.seconds:.1f}s", escape(probe.why)]


@app.command()
def ceiling(
    engine: str = typer.Option(..., "--engine", help="tabbyapi or llamacpp."),
    guest: str = typer.Option(..., "--guest", help="LXD/Incus instance running the engine (NAME or REMOTE:NAME)."),
    cache_mode: str | None = typer.Option(None, "--cache-mode", help="tabbyAPI cache_mode: FP16, Q8, Q6, Q4 or K,V "
                                          "bits (8,4)."),
    cache_type: str | None = typer.Option(None, "--cache-type", help="llama.cpp KV cache type: f16, q8_0, q4_0 ... "
                                          "or K,V (q8_0,q4_0)."),
    lo: int = typer.Option(4096, "--lo", help="Smallest context to consider (tokens)."),
    hi: int = typer.Option(262144, "--hi", help="Largest context to consider (tokens)."),
    page: int = typer.Option(DEFAULT_PAGE, "--page", help="Granularity of the answer in tokens (the cache page)."),
    model_config: Path | None = typer.Option(None, "--model-config", help="The model's config.json: the planner's "
                                             "bytes/token seed the search (without it: blind binary search)."),
    budget: str | None = typer.Option(None, "--budget", help="KV memory budget for the planner's prediction (2.4GiB). "
                                      "Default: the guest's memory limit minus what a start at --lo uses."),
    service: str | None = typer.Option(None, "--service", help="systemd unit (default: llama-server / tabbyapi)."),
    config_path: str | None = typer.Option(None, "--config-path", help="tabbyAPI config.yml on the guest (default: "
                                           "--config of the unit, else WorkingDirectory/config.yml)."),
    timeout: float = typer.Option(20.0, "--timeout", help="Seconds a start may take before it counts as failed "
                                  "(then SIGKILL)."),
    blind: bool = typer.Option(False, "--blind", help="Ignore the planner: plain binary search (field note 001's "
                                                      "method)."),
    dry_run: bool = typer.Option(False, "--dry", help="Show what would be written for --lo; change nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print every probe and the ceiling as JSON."),
    lock_wait: float = LockWaitOption,
) -> None:
    """Restart the engine with candidate contexts until the largest one that starts is known, to the page.

    The original config and service state come back at the end, also on errors and Ctrl-C.

    Example: labwright probe ceiling --engine llamacpp --guest lw-llm1 --cache-type q8_0 --model-config config.json
    """
    spec = _spec(engine, cache_mode, cache_type)
    check_range(lo, hi, page)
    if not 0 < timeout <= MAX_TIMEOUT_S:  # also NaN
        raise BadInput(f"--timeout {timeout:g}: give the seconds a start may take, more than 0 and at most "
                       f"{MAX_TIMEOUT_S:,.0f} (e.g. 20)")
    unit = _unit(DEFAULT_SERVICE[engine] if service is None else service)
    if config_path is not None and not config_path.startswith("/"):
        raise BadInput(f"--config-path {config_path}: give the absolute path of config.yml on the guest "
                       "(e.g. /opt/tabbyapi/config.yml)")
    layout = read_layout(model_config) if model_config is not None else None
    budget_bytes = parse_size(budget, "--budget", positive=True) if budget is not None else None
    if budget_bytes is not None and layout is None:
        raise BadInput("--budget needs --model-config: the planner turns the budget into tokens with the model's "
                       "bytes/token")
    vocab.check_lock_wait(lock_wait)
    target_guest = LxdGuest(guest)
    # One run at a time per guest (labwright.guestlock): a deploy or stack switch on the same guest waits for the
    # probe and the probe for them; --dry changes nothing and takes no lock.
    with _run_lock(target_guest, f"labwright probe ceiling --service {unit}", dry_run, lock_wait):
        # A record left by a killed probe of this unit is run first (the original config back); --dry only says
        # so.
        recover = not dry_run
        target: Target = (llamacpp_target(target_guest, unit, spec, recover_leftover=recover) if engine == "llamacpp"
                          else tabbyapi_target(target_guest, unit, spec, config_path, recover_leftover=recover))
        for note in target.notes:
            console.print(f"note: {escape(note)}")
        if dry_run:
            first = target.render(-(-lo // page) * page)
            state = "running" if target.was_active else "stopped"
            if as_json:
                stdout.print_json(json.dumps({"engine": engine, "guest": guest, "service": target.service,
                                              "cache": spec.name, "service_state": state, "writes": [
                                                  {"path": f["path"], "content": base64.b64decode(f["content_b64"])
                                                   .decode(errors="replace")} for f in first]}))
                return
            console.print(f"would probe {target.service} on {guest} ({state}) at {target.setting} from {lo:,} to "
                          f"{hi:,} in {page}-token pages, cache {spec.name}; each start writes (shown for {lo:,}):")
            for item in first:
                console.print(f"[bold]{item['path']}[/]")
                text = base64.b64decode(item["content_b64"]).decode(errors="replace")
                stdout.print(escape(text), end="", soft_wrap=True)
            console.print("and afterwards puts the original back (nothing was changed now)")
            return

        def progress(probe: Probe) -> None:
            # On stderr, with --json too: a search takes minutes, and stdout keeps only the JSON.
            console.print(f"  {target.setting} {probe.candidate:>9,}: {probe.outcome:<7} ({probe.seconds:.1f}s, "
                              f"{escape(probe.why)})")

        if not as_json:
            console.print(f"probing {target.service} on {guest}, cache {spec.name}, {lo:,}..{hi:,} in {page}-token "
                          "pages")
        try:
            with _sigterm_interrupts():
                result = probe_ceiling(target_guest, target, lo, hi, page, layout=layout, budget=budget_bytes,
                                       timeout=timeout, blind=blind, progress=progress)
        except KeyboardInterrupt:
            # probe_ceiling's finally has restored by now (typer would otherwise turn Ctrl-C into a silent exit 130).
            console.print(f"labwright: interrupted; the original config of {target.service} was put back and the "
                          f"service left {'running' if target.was_active else 'stopped'} as it was")
            raise typer.Exit(130) from None
        _report(result, as_json)
        if result.ceiling is None:
            raise typer.Exit(1)



@contextmanager
def _run_lock(target_guest: LxdGuest, purpose: str, dry_run: bool, wait: float) -> Iterator[None]:
    if dry_run:
        yield
        return
    with guestlock.held(target_guest.host, purpose, wait=wait, say=lambda line: console.print(escape(line))):
        yield  # GuestBusy (another run holds the guest) is an OperationFailed: one line, exit 1


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (systemd, a timeout, kill) ends the probe as Ctrl-C does: the original is put back first."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command("restore")
def restore_command(
    guest: str = typer.Option(..., "--guest", help="LXD/Incus instance (NAME or REMOTE:NAME)."),
    service: str | None = typer.Option(None, "--service", help="Only this unit (default: every unit an interrupted "
                                       "probe left on the guest)."),
    lock_wait: float = LockWaitOption,
    dry: bool = typer.Option(False, "--dry", help="Say what would be restored; change nothing (takes no lock)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was (or would be) restored as JSON."),
) -> None:
    """Put back what a probe that was killed (SIGKILL, lost connection, reboot) left on a guest.

    Before its first change a probe saves, in the guest, what restores the original (/var/lib/labwright/probe/
    UNIT.json); this runs it: the original config back, the unit started again if it ran, and waited for until
    healthy. `labwright probe ceiling` does the same by itself before it probes a unit. Exit 0: restored, or nothing
    to restore; 1: the unit did not come back (the message says what is down).

    Example: labwright probe restore --guest lw-llm1
    """
    unit = f"{_unit(service)}.service" if service is not None else None
    vocab.check_lock_wait(lock_wait)
    target_guest = LxdGuest(guest)
    with _run_lock(target_guest, "labwright probe restore", dry, lock_wait):
        records = leftovers(target_guest)
        if unit is not None:
            records = {name: record for name, record in records.items() if name == unit}
        if not records:
            which = f"of {service} " if service else ""
            if as_json:
                typer.echo(json.dumps({"guest": guest, "dry": dry, "restored": []}))
            else:
                stdout.print(f"nothing to restore: no interrupted probe {which}on {escape(guest)}")
            return
        done = []
        for unit, record in records.items():
            line = f"would restore {unit} from its record" if dry else recover(target_guest, unit, record or {})
            done.append({"unit": unit, "message": line})
            if not as_json:
                stdout.print(escape(line))
        if as_json:
            typer.echo(json.dumps({"guest": guest, "dry": dry, "restored": done}))


def _report(result: CeilingResult, as_json: bool) -> None:
    if as_json:
        stdout.print_json(json.dumps(result.to_json()))
        return
    stdout.print(table(f"{result.service} on {result.guest}, cache {result.cache} ({result.strategy})",
                       ["candidate", "outcome", "peak RSS", "time", "why"], [_row(p) for p in result.probes]))
    if result.predicted is not None:
        stdout.print(f"planner predicted {result.predicted:,} ({escape(result.prediction)})")
    if result.ceiling is None:
        stdout.print(f"no context in {result.lo:,}..{result.hi:,} starts")
    else:
        stdout.print(f"ceiling: [bold]{result.ceiling:,}[/] tokens ({result.ceiling // result.page:,} pages of "
                     f"{result.page}) after {len(result.probes)} probes")
    for note in result.notes:
        stdout.print(f"note: {escape(note)}")
    stdout.print(escape(result.restored))
