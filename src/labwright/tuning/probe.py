"""The context-ceiling probe: the largest context an engine really starts with, found by restarting it.

Field note 001 did this by hand: write tabbyAPI's config.yml with a candidate cache_size, restart, read the journal for
"Application startup complete" or "Insufficient VRAM in split for model and cache", binary-search, 10 restarts from
131,072..262,144. Here:

- one candidate = one call of the in-guest waiter (the agent's ``probe``, :mod:`labwright.agent.probe`): stop the
  unit for good, install the candidate's config, start, and read only the journal entries of the invocation systemd
  gave that start, so an automatic restart with an older config (field note 001's stale-restart race) is never read as
  the result;
- the search is seeded by the KV planner (:mod:`labwright.tuning.kv`): bytes/token from the model's config.json and
  a memory budget give a predicted ceiling, and the search probes a page either side of it first, widening by
  doubling only when the prediction was off, then bisects to the page;
- the original configuration is put back at the end whatever happens (errors, Ctrl-C, SIGTERM), and the unit is
  left as it was: running (and healthy again) if it ran, stopped if it was stopped;
- a probe that is killed outright (SIGKILL, a lost connection) cannot put anything back, so before its first change
  the waiter saves, in the guest, what does (``/var/lib/labwright/probe/UNIT.json``, written atomically); the next
  probe of that unit, or ``labwright probe restore``, finds that record and runs it first (:func:`recover`).

Engines: llama.cpp ``llama-server`` (candidate = ``--ctx-size`` in a systemd drop-in that replaces ExecStart, so
the unit file deploys/llamacpp.py wrote is never edited) and tabbyAPI (candidate = ``model.cache_size`` and
``max_seq_len`` in config.yml, restored byte for byte).
"""

from __future__ import annotations

import base64
import math
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

from labwright.errors import BadInput, OperationFailed
from labwright.textio import YamlExpansionError, yaml_load
from labwright.tuning.kv import KvLayout, bytes_per_token, kv_bytes, tokens_in_budget
from labwright.tuning.kv_modes import CacheSpec, ggml_type, tabby_mode
from labwright.tuning.probe_guest import Guest

ENGINES = ("llamacpp", "tabbyapi")
DEFAULT_PAGE = 256
MAX_CONTEXT = 16 * 1024 * 1024  # past every model's context window (the longest, Llama 4 Scout, is 10M)
DROPIN_NAME = "90-labwright-probe.conf"
RECORD_DIR = "/var/lib/labwright/probe"
# The first line of every candidate file the probe writes: a file to put back that holds neither the original nor
# this is someone else's change, and is kept.
MARK = "# Written by `labwright probe ceiling`"
# tabbyAPI's own log lines (the stand-in in support.tabbyapi_standin prints the same).
TABBY_OK = "Application startup complete"
TABBY_OOM = ("Insufficient VRAM in split for model and cache", "CUDA out of memory", "OutOfMemoryError")
# llama.cpp: under a cgroup limit the OOM killer's SIGKILL says it (no line); under an address-space limit or a
# failed allocation the server logs one of these.
LLAMA_OOM = ("failed to allocate", "unable to allocate", "std::bad_alloc", "out of memory")
OUTCOMES = ("ok", "oom", "timeout", "error")
# Each llama-server candidate starts under its own deadline, kept by the kernel: the wrapper arms a real-time timer
# and execs the server, and the timer outlives the exec ("Interval timers are preserved across an execve(2)",
# setitimer(2); SIGALRM's default action terminates the process, signal(7)). A start that thrashes the guest at its
# memory limit starves every process there, the probe's own watchdog and systemd included (CI: a 20 s deadline acted
# on at 53 s); the kernel's timer needs none of them. Python restores SIGXFSZ to its default first (it ignores it;
# SIGPIPE stays ignored, as systemd's IgnoreSIGPIPE= leaves every service). The agent reads the SIGALRM exit as
# "timeout" (labwright.agent.probe.watch).
DEADLINE_PYTHON = "/usr/bin/python3"  # where the guest has none, the agent's watchdog alone keeps the deadline
DEADLINE_WRAPPER = (f'{DEADLINE_PYTHON} -I -S -c "import os,signal,sys;signal.signal(signal.SIGXFSZ,signal.SIG_DFL);'
                    'signal.setitimer(signal.ITIMER_REAL,float(sys.argv[1]));os.execvp(sys.argv[2],sys.argv[2:])"')


@dataclass
class Probe:
    """One candidate: started or not, how it ended, what it used."""

    candidate: int
    outcome: str
    why: str
    seconds: float
    peak_rss_bytes: int | None = None
    cgroup_peak_bytes: int | None = None
    guest_memory: dict[str, Any] | None = None
    invocation: str = ""
    restarts_seen: int = 0
    exit: str | None = None
    lines: list[str] = field(default_factory=list)
    #: Seconds from the helper's start to each of its steps on the guest (halted, started, verdict, done, and
    #: "killed" when the deadline's watchdog fired): where a slow start spent its time.
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.outcome == "ok"


@dataclass
class CeilingResult:
    engine: str
    guest: str
    service: str
    cache: str
    page: int
    lo: int
    hi: int
    strategy: str
    predicted: int | None
    prediction: str
    ceiling: int | None
    hi_fits: bool
    probes: list[Probe]
    restored: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["probe_count"] = len(self.probes)
        return data


# --- search -------------------------------------------------------------------------------------------------------

class NeverHealthy(OperationFailed):
    """The server did not come up at all, not even at --lo."""


def _pages(lo: int, hi: int, page: int) -> tuple[int, int]:
    low, high = math.ceil(lo / page), hi // page
    if low > high:
        raise BadInput(f"--lo {lo} / --hi {hi}: no whole {page}-token page lies between them; widen the range")
    return low, high


def check_range(lo: int, hi: int, page: int) -> None:
    if page < 1:
        raise BadInput(f"--page {page}: give the allocation unit in tokens, 1 or more (tabbyAPI and llama.cpp: 256)")
    if lo < 1:
        raise BadInput(f"--lo {lo}: give a context of 1 token or more")
    if lo > hi:
        raise BadInput(f"--lo {lo} is above --hi {hi}: give the smaller context first (e.g. --lo {hi} --hi {lo})")
    if hi > MAX_CONTEXT:
        raise BadInput(f"--hi {hi:,} is more than {MAX_CONTEXT:,} tokens, longer than any model's context: give the "
                       "largest context to consider (e.g. --hi 262144)")
    _pages(lo, hi, page)


MAX_REFINEMENTS = 2
#: After a refined guess did not fit: pages walked down, one at a time, before bisecting down to the last fit.
REFINED_OVERSHOOT_PAGES = 1


def _steps() -> Iterator[int]:
    yield 1
    step = 1
    while True:
        yield step
        step *= 2


def search(try_fit: Callable[[int], bool], lo: int, hi: int, page: int, predicted: int | None = None,
           known_fit: int | None = None, refine: Callable[[int], int | None] | None = None) -> int | None:
    """The largest multiple of ``page`` in [lo, hi] for which ``try_fit`` holds (None: not even lo's page).

    Assumes fitting is monotonic. ``predicted``: probe there first; ``refine(fit)``, after a candidate fits, may
    name a better guess (from what that start measured), probed next. Then the page above (or below), widening by
    doubling until the ceiling is bracketed, then bisect. ``predicted=None``: a blind binary search (lo, hi, then
    halves), field note 001's method. ``known_fit``: a candidate already seen to fit (a baseline probe).
    """
    low, high = _pages(lo, hi, page)
    good: int | None = None if known_fit is None else known_fit // page
    bad: int | None = None

    def probe(index: int) -> bool:
        nonlocal good, bad
        if try_fit(index * page):
            good = index if good is None else max(good, index)
            return True
        bad = index if bad is None else min(bad, index)
        return False

    # Steps of 1, 1, 2, 4 ... pages: a good guess is usually within a page or two, a bad one is bracketed fast.
    def gallop_up() -> None:
        steps = _steps()
        refinements = 0
        while bad is None and good is not None and good < high:
            # The first two starts that fit may refine the guess (what they measured); later readings near the
            # limit are noisier than a page, so from then on it is steps.
            guess = refine(good * page) if refine and refinements < MAX_REFINEMENTS else None
            refinements += 1
            if guess is not None and guess // page > good + 1:
                probe(min(guess // page, high))
            else:
                probe(min(good + next(steps), high))

    def gallop_down(most: int | None = None) -> None:
        steps = _steps()
        tried = 0
        while bad is not None and (most is None or tried < most):  # never down to a page already known to fit
            floor = low if good is None else good + 1
            tried += 1
            if bad <= floor or probe(max(bad - next(steps), floor)):
                return

    if good is not None and good >= high:
        return high * page
    if predicted is None:
        if good is None and not probe(low):
            return None
        if probe(high):
            return high * page
    else:
        first = min(max(predicted // page, low), high)
        if good is not None and first <= good:
            first = good + 1
        if probe(first):
            gallop_up()
            if bad is not None and good is not None and bad > good + 1 and refine:
                # A refined guess overshot: a page down is the usual reading noise on an idle machine. Past that the
                # readings were wrong (a loaded guest thrashes 8-16 pages short of the limit: both single-page steps
                # failed in 4 of 4 loaded runs), and with a start that fit below, bisecting is never slower than
                # walking further with doubling steps.
                gallop_down(most=REFINED_OVERSHOOT_PAGES)
        else:
            gallop_down()
    if good is None:
        return None
    if bad is None:
        return good * page  # hi itself fits
    while bad - good > 1:
        probe((good + bad) // 2)
    return good * page


# --- engines ------------------------------------------------------------------------------------------------------

@dataclass
class Target:
    """One engine's service on one guest: how a candidate is written and how its verdict is read."""

    engine: str
    service: str
    spec: CacheSpec
    setting: str
    daemon_reload: bool
    success_lines: tuple[str, ...]
    oom_lines: tuple[str, ...]
    health_url: str | None
    was_active: bool
    restore_actions: list[dict[str, Any]]
    #: The files of one candidate: ``render(tokens)``, or ``render(tokens, deadline)`` for a start that the engine's
    #: own process ends after ``deadline`` seconds where the engine allows it (llama.cpp: DEADLINE_WRAPPER).
    render: Callable[..., list[dict[str, Any]]]
    notes: list[str] = field(default_factory=list)
    #: This probe run's id: every helper request carries it, and the restore fences it in the guest, so that a
    #: candidate's helper that reaches the guest after the restore (Ctrl-C) leaves the unit alone
    #: (labwright.agent.probe.enter).
    run: str = field(default_factory=lambda: secrets.token_hex(8))

    def restore_request(self, timeout: float) -> dict[str, Any]:
        """The waiter's ``restore`` request that puts the original back: also the record saved before any change."""
        return {"mode": "restore", "service": self.service, "engine": self.engine, "install": self.restore_actions,
                "daemon_reload": self.daemon_reload, "start": self.was_active,
                "success_lines": list(self.success_lines), "oom_lines": list(self.oom_lines),
                "health_url": self.health_url, "timeout": timeout, "run": self.run}


def _file(path: str, content: bytes) -> dict[str, Any]:
    return {"path": path, "content_b64": base64.b64encode(content).decode()}


def _state(guest: Guest, service: str, notes: list[str], recover_leftover: bool = True) -> dict[str, Any]:
    state = guest.waiter({"mode": "state", "service": service, "paths": [DEADLINE_PYTHON]}, timeout=30)
    if not state.get("systemctl"):
        raise BadInput(f"--guest {guest.name}: no systemctl there; the probe restarts a systemd service")
    props = state["props"]
    if props.get("LoadState") != "loaded" or not props.get("FragmentPath"):
        raise BadInput(f"--service {service.removesuffix('.service')}: no such systemd unit on {guest.name} (LoadState "
                       f"{props.get('LoadState') or 'unknown'}); deploy it first or name the right unit")
    leftover = state.get("leftover")
    if leftover:
        if not recover_leftover:
            notes.append(f"an interrupted probe left {RECORD_DIR}/{service}.json on {guest.name}: the real run puts "
                         "its original config back first")
            return state
        notes.append(recover(guest, service, leftover))
        state = guest.waiter({"mode": "state", "service": service, "paths": [DEADLINE_PYTHON]}, timeout=30)
    return state


def recover(guest: Guest, service: str, record: dict[str, Any]) -> str:
    """Run the record an interrupted probe left: the original config back, the unit as it was. Returns what was done.

    Raises OperationFailed, naming what is down and the command that retries, when the unit does not come back.
    """
    if "unreadable" in record or record.get("mode") != "restore" or record.get("service") != service:
        raise OperationFailed(f"{guest.name}: the record of an interrupted probe of {service} cannot be read "
                              f"({record.get('unreadable', 'not a restore record')}); put the original config of "
                              f"{service} back by hand, then remove {RECORD_DIR}/{service}.json")
    began = time.monotonic()
    answer = guest.waiter(record, timeout=float(record.get("timeout") or 20) + 60)
    what = _restored(answer, guest, service)
    return (f"an interrupted probe had left {service} on a candidate config; {what} "
            f"({time.monotonic() - began:.1f}s)")


def leftovers(guest: Guest) -> dict[str, dict[str, Any]]:
    """The records of interrupted probes on ``guest``, by unit."""
    answer = guest.waiter({"mode": "leftovers"}, timeout=30)
    records = answer.get("leftovers")
    if not isinstance(records, dict):
        raise OperationFailed(f"probe helper on {guest.name} answered {answer!r}")
    return records


def _active(props: dict[str, str]) -> bool:
    return props.get("ActiveState") in ("active", "activating", "reloading")


_WORD = r"(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|\S+)"


def set_flag(line: str, names: tuple[str, ...], value: str) -> str:
    """``line`` (an ExecStart command) with flag ``names[0]`` set to ``value``: replaced where present, else added."""
    alternatives = "|".join(re.escape(name) for name in names)
    pattern = re.compile(rf"(?<=\s)({alternatives})(=|\s+){_WORD}")
    if pattern.search(line):
        return pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{value}", line, count=1)
    return f"{line} {names[0]} {value}"


def get_flag(line: str, names: tuple[str, ...]) -> str | None:
    alternatives = "|".join(re.escape(name) for name in names)
    match = re.search(rf"(?<=\s)(?:{alternatives})(?:=|\s+)({_WORD})", line)
    return match.group(1).strip("\"'") if match else None


def llamacpp_target(guest: Guest, service: str, spec: CacheSpec, recover_leftover: bool = True) -> Target:
    """llama-server under systemd as deploys/llamacpp.py lays it out: flags on the unit's ExecStart line.

    A record left by an interrupted probe of the unit is run first (``recover_leftover=False``: only noted).
    """
    unit = f"{service}.service"
    notes: list[str] = []
    state = _state(guest, unit, notes, recover_leftover)
    props, line = state["props"], state.get("exec_start")
    wrap = bool((state.get("paths") or {}).get(DEADLINE_PYTHON))
    if not line:
        raise BadInput(f"--service {service}: its unit has no ExecStart= line to take --ctx-size from")
    dropin_dir = f"/etc/systemd/system/{unit}.d"
    dropin = f"{dropin_dir}/{DROPIN_NAME}"
    if dropin in (props.get("DropInPaths") or "").split():
        notes.append(f"removed {dropin} left by an interrupted probe; the unit's own ExecStart is the original")
    # The drop-in replaces ExecStart; the fragment's line is the original (our leftover drop-in is not in it).
    k_name, _, v_name = spec.name.partition(",")
    v_name = v_name or k_name
    flash = (get_flag(line, ("--flash-attn", "-fa")) or "auto").lower()
    if v_name not in ("f16", "f32", "bf16") and flash in ("off", "false", "0"):
        raise BadInput(f"--cache-type {spec.name}: a quantized V cache needs flash attention, and {service} runs "
                       "with --flash-attn off; use --cache-type f16 or q8_0,f16, or deploy with llamacpp_flash_attn=on")
    port = get_flag(line, ("--port",)) or "8080"
    host = get_flag(line, ("--host",)) or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in host:
        host = f"[{host}]"

    def render(tokens: int, deadline: float | None = None) -> list[dict[str, Any]]:
        command = set_flag(line, ("--ctx-size", "-c"), str(tokens))
        command = set_flag(command, ("--cache-type-k", "-ctk"), k_name)
        command = set_flag(command, ("--cache-type-v", "-ctv"), v_name)
        if deadline is not None and wrap and command.startswith("/"):  # no systemd prefix (-, @, +, !, :) to keep
            command = f"{DEADLINE_WRAPPER} {deadline:g} {command}"
        # OOMScoreAdjust: under a memory limit the kernel must pick the server, not the probe's helper.
        text = (f"{MARK} while it probes; removed when it ends.\n"
                f"[Service]\nExecStart=\nExecStart={command}\nOOMScoreAdjust=1000\n")
        return [_file(dropin, text.encode())]

    return Target(engine="llamacpp", service=unit, spec=spec, setting="--ctx-size", daemon_reload=True,
                  success_lines=(), oom_lines=LLAMA_OOM, health_url=f"http://{host}:{port}/health",
                  was_active=_active(props), restore_actions=[{"path": dropin, "remove": True}], render=render,
                  notes=notes)


def tabbyapi_target(guest: Guest, service: str, spec: CacheSpec, config_path: str | None = None,
                    recover_leftover: bool = True) -> Target:
    """tabbyAPI under systemd: model.cache_size / max_seq_len / cache_mode in its config.yml.

    A record left by an interrupted probe of the unit is run first (``recover_leftover=False``: only noted), so the
    config read here as the original is the user's, never a candidate a killed probe left.
    """
    unit = f"{service}.service"
    notes: list[str] = []
    state = _state(guest, unit, notes, recover_leftover)
    props, line = state["props"], state.get("exec_start") or ""
    if config_path is None:
        given = get_flag(" " + line, ("--config",))
        workdir = props.get("WorkingDirectory") or "/opt/tabbyapi"
        config_path = given if given and given.startswith("/") else str(PurePosixPath(workdir) / (given or
                                                                                                 "config.yml"))
    original = guest.read_file(config_path)
    if original is None:
        raise BadInput(f"--config-path {config_path}: no such file on {guest.name}; pass tabbyAPI's config.yml")
    try:
        data = yaml_load(original.decode()) or {}
    except YamlExpansionError as exc:
        raise BadInput(f"{config_path} on {guest.name} {exc}; fix the YAML") from None
    except RecursionError:
        raise BadInput(f"{config_path} on {guest.name} is nested too deeply; fix the YAML") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadInput(f"{config_path} on {guest.name} is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model") or {}, dict):
        raise BadInput(f"{config_path} on {guest.name}: `model:` is not a mapping")

    def render(tokens: int, deadline: float | None = None) -> list[dict[str, Any]]:
        # No deadline wrapper: the unit's ExecStart is not the probe's to edit here, and on a GPU CUDA refuses an
        # allocation at once; the agent's watchdog keeps the deadline.
        candidate = {**data, "model": {**(data.get("model") or {}), "cache_size": tokens, "max_seq_len": tokens,
                                       "cache_mode": spec.name}}
        text = f"{MARK} while it probes; the original comes back when it ends.\n"
        return [_file(config_path, (text + yaml.safe_dump(candidate, sort_keys=False)).encode())]

    return Target(engine="tabbyapi", service=unit, spec=spec, setting="cache_size", daemon_reload=False,
                  success_lines=(TABBY_OK,), oom_lines=TABBY_OOM, health_url=None, was_active=_active(props),
                  restore_actions=[{**_file(config_path, original), "ours": MARK}], render=render, notes=notes)


def cache_spec(engine: str, cache: str | None) -> CacheSpec:
    """The cache setting the probe writes, checked as the engine checks it."""
    if engine not in ENGINES:
        raise BadInput(f"--engine {engine}: the probe knows {', '.join(ENGINES)}")
    if engine == "tabbyapi":
        return tabby_mode(cache or "FP16")
    return ggml_type(cache or "f16", "llamacpp")


# --- the probe ----------------------------------------------------------------------------------------------------

@dataclass
class Prediction:
    """Where the planner says the ceiling is, and how it got there."""

    tokens: int | None
    how: str


def predict_from_budget(layout: KvLayout, spec: CacheSpec, budget: int, page: int) -> Prediction:
    tokens = tokens_in_budget(layout, spec, budget, page)
    return Prediction(tokens, f"planner: {bytes_per_token(layout, spec):,} B/token, KV budget {budget:,} B")


def predict_from_baseline(layout: KvLayout, spec: CacheSpec, baseline: Probe, page: int) -> Prediction:
    """The guest's memory limit minus what it used at the baseline candidate is left for more KV.

    Used memory = the guest's anonymous memory with the server up at the baseline (its KV, weights and buffers;
    page cache is left out: the kernel reclaims it before it kills). What is left, plus the baseline's own KV,
    is the KV budget; the planner turns it into tokens.
    """
    memory = baseline.guest_memory or {}
    limit, anon = memory.get("limit_bytes"), memory.get("anon_bytes")
    if not limit or anon is None:
        return Prediction(None, "no memory limit on the guest to predict from: pass --budget")
    budget = limit - anon + kv_bytes(layout, spec, baseline.candidate)
    tokens = tokens_in_budget(layout, spec, max(budget, 0), page)
    return Prediction(tokens, f"planner: {bytes_per_token(layout, spec):,} B/token; guest limit {limit:,} B - "
                              f"{anon:,} B anonymous memory at {baseline.candidate:,} tokens = "
                              f"{budget:,} B KV budget")


# What the refined guess leaves under the guest's limit: the page cache and kernel memory a start needs besides its
# anonymous memory (binaries, libraries, the journal's mapped files, slab) so as not to thrash. Measured under a 512
# MiB LXD limit, the guest's anonymous memory as the helper read it at each verdict (benchmarks/probe_ceiling.py,
# 2026-11-28, 12 searches at load 9-13 on 2 cores): the highest start that came up held 497.5-500.7 MiB (in 10 of
# them; two met an OOM kill at ~489 and ~493 MiB), the lowest that thrashed or was killed 498.6-500.0 MiB (the
# host's own sampling, both cores busy: 489-498 fit, 499-505 thrash; labwright.agent.probe.THRASH_MARGIN). Between
# 498.6 and 500.7 MiB the same start fit one time and failed another. 13.25 MiB aims the guess at 498.75, the low end
# of that band, and the page it lands on is rounded down: a guess a page low costs one start more, one two or more
# pages into the band a bisection down from the first guess. The old 5 MiB (measured when the edge sat 5.5 MiB
# under the limit) overshot by 6-7 pages and cost 9-10 starts; 13.5 MiB (498.5) cost 7 for q8_0, whose 256-token
# page is only 0.54 MiB here.
RESERVE = int(13.25 * 1024**2)
# The first probe is this share of the way from the baseline short of the planner's prediction.
UNDERSHOOT = 0.10


def _refiner(base: Probe, probes: list[Probe], per_token_kv: int, cap: int) -> Callable[[int], int | None]:
    """After a start fits: the ceiling its measured memory per token implies (secant from the baseline).

    A token never costs less than its KV (the planner's bytes/token). A guess past the planner's own prediction
    (the budget with only KV in it) is that prediction: the prediction is read from one start's memory too, and
    under load that reading sits a page or two above the steady one, so the real ceiling can lie past it (CI's
    loaded run: predicted 208,896, ceiling 212,992). Dropping such a guess (the old rule) left the search walking
    single pages up from the first start, 9 starts where the blind search takes 8. Once the prediction itself has
    fit it bounds nothing: the guess is what the fit's own memory says is left (never less than KV per token, so
    never further than the memory left would hold).
    """
    def refine(tokens: int) -> int | None:
        fit = next((p for p in reversed(probes) if p.candidate == tokens and p.fits), None)
        if fit is None or not fit.guest_memory or not base.guest_memory or tokens <= base.candidate:
            return None
        limit, used = fit.guest_memory.get("limit_bytes"), fit.guest_memory.get("anon_bytes")
        used_base = base.guest_memory.get("anon_bytes")
        if not limit or used is None or used_base is None or used <= used_base:
            return None
        per_token = max((used - used_base) / (tokens - base.candidate), per_token_kv)
        guess = tokens + int((limit - RESERVE - used) / per_token)
        return guess if tokens >= cap else min(guess, cap)
    return refine


Progress = Callable[[Probe], None]


def make_probe(guest: Guest, target: Target, timeout: float, tail: int) -> Callable[[int], Probe]:
    def run(tokens: int) -> Probe:
        request = {"mode": "probe", "service": target.service, "install": target.render(tokens, timeout),
                   "daemon_reload": target.daemon_reload, "success_lines": list(target.success_lines),
                   "oom_lines": list(target.oom_lines), "health_url": target.health_url, "timeout": timeout,
                   "tail": tail, "record": {**target.restore_request(timeout), "began": time.time()},
                   "run": target.run}
        began = time.monotonic()
        answer = guest.waiter(request, timeout=timeout + 60)
        outcome = str(answer.get("outcome"))
        if outcome not in OUTCOMES:
            raise OperationFailed(f"probe helper on {guest.name} answered {answer!r}")
        if outcome == "ok" and not answer.get("peak_rss_bytes"):
            # The helper reads the server's memory before it says "ok" (labwright.agent.probe.measured): an "ok"
            # without it is a broken helper, never a start to count (the refined guess reads that memory).
            raise OperationFailed(f"probe helper on {guest.name} answered ok for {target.setting} {tokens:,} without "
                                  f"the server's peak memory (VmHWM): {answer.get('why')!r}")
        return Probe(candidate=tokens, outcome=outcome, why=str(answer.get("why", "")),
                     seconds=round(time.monotonic() - began, 2), peak_rss_bytes=answer.get("peak_rss_bytes"),
                     cgroup_peak_bytes=answer.get("cgroup_peak_bytes"), guest_memory=answer.get("guest_memory"),
                     invocation=str(answer.get("invocation", "")), restarts_seen=int(answer.get("restarts_seen") or 0),
                     exit=answer.get("exit"), lines=list(answer.get("lines") or [])[-tail:],
                     steps={str(k): float(v) for k, v in (answer.get("steps") or {}).items()
                            if isinstance(v, (int, float))})
    return run


def _tail(probe: Probe, count: int = 5) -> str:
    lines = [line.strip() for line in probe.lines if line.strip()][-count:]
    return " | ".join(lines) if lines else "(no log lines)"


def restore(guest: Guest, target: Target, timeout: float) -> str:
    """Put the original config back and leave the unit as it was; returns what happened, in words.

    Raises :class:`ServiceDown` when the unit ran before and does not come back: the message names what is down and
    the command that tries again (the guest keeps the record until it is back).
    """
    answer = guest.waiter(target.restore_request(timeout), timeout=timeout + 60)
    # The restore fenced this run in the guest (a late helper of it leaves the unit alone): the target's later
    # probes (a re-check after the search) are a run of their own.
    target.run = secrets.token_hex(8)
    return _restored(answer, guest, target.service)


class ServiceDown(OperationFailed):
    """The original config is back but the unit that ran before the probe is not running."""


def _restored(answer: dict[str, Any], guest: Guest, service: str) -> str:
    outcome = answer.get("outcome")
    kept = answer.get("kept") or []
    extra = (f"; kept {', '.join(kept)}: it was changed by someone else during the probe" if kept else "")
    if outcome == "stopped":
        return f"original config restored; the service was stopped and is left stopped{extra}"
    if outcome == "ok":
        return f"original config restored; the service is running and healthy again{extra}"
    if outcome == "started":
        return f"original config restored; the service is running again (not yet healthy){extra}"
    name = service.removesuffix(".service")
    tail = " | ".join(str(line).strip() for line in (answer.get("lines") or [])[-3:] if str(line).strip())
    raise ServiceDown(f"{service} on {guest.name} is DOWN: its original config is back but it did not start "
                      f"({answer.get('why') or outcome}{'; last log: ' + tail if tail else ''}){extra}; see "
                      f"`{getattr(guest, 'tool', 'lxc')} exec {guest.name} -- journalctl -u {name} -n 50`, then run "
                      f"`labwright probe restore --guest {guest.name} --service {name}`")


def probe_ceiling(guest: Guest, target: Target, lo: int, hi: int, page: int = DEFAULT_PAGE,
                  layout: KvLayout | None = None, budget: int | None = None, timeout: float = 20.0,
                  blind: bool = False, progress: Progress | None = None, tail: int = 15) -> CeilingResult:
    """Find the ceiling; always restores the original config and service state (also on errors and Ctrl-C)."""
    check_range(lo, hi, page)
    probes: list[Probe] = []
    run = make_probe(guest, target, timeout, tail)
    prediction = Prediction(None, "blind binary search" if blind else "no model config: blind binary search")

    def attempt(tokens: int) -> Probe:
        probe = run(tokens)
        probes.append(probe)
        if progress:
            progress(probe)
        if probe.outcome == "error":
            raise OperationFailed(f"{target.service} failed at {target.setting} {tokens:,} for a reason other than "
                                  f"memory ({probe.why}); last log: {_tail(probe)}")
        return probe

    def try_fit(tokens: int) -> bool:
        probe = attempt(tokens)
        if probe.outcome == "timeout" and not any(p.fits for p in probes) and tokens > lo:
            # No start has worked yet: a server that never comes up is told apart from a thrashing one at lo.
            floor = attempt(math.ceil(lo / page) * page)
            if floor.outcome == "timeout":
                raise NeverHealthy(f"{target.service} never became healthy (not within {timeout:g}s even at "
                                   f"{target.setting} {floor.candidate:,}); last log: {_tail(floor)}")
        return probe.fits

    ceiling: int | None = None
    try:
        known: int | None = None
        first: int | None = None
        refine: Callable[[int], int | None] | None = None
        if not blind and layout is not None:
            if budget is not None:
                prediction = predict_from_budget(layout, target.spec, budget, page)
                first = prediction.tokens
            else:
                base = attempt(math.ceil(lo / page) * page)
                if base.outcome == "timeout":
                    raise NeverHealthy(f"{target.service} never became healthy (not within {timeout:g}s at "
                                       f"{target.setting} {base.candidate:,}); last log: {_tail(base)}")
                if base.fits:
                    known = base.candidate
                    prediction = predict_from_baseline(layout, target.spec, base, page)
                    if prediction.tokens is not None:
                        # A little under the prediction, so the first start most likely fits and measures the
                        # real cost per token; refine() then jumps to the ceiling that cost implies.
                        first = known + int((prediction.tokens - known) * (1 - UNDERSHOOT))
                        refine = _refiner(base, probes, bytes_per_token(layout, target.spec), prediction.tokens)
        if known is None and probes:
            ceiling = None  # the baseline at lo did not fit
        else:
            ceiling = search(try_fit, lo, hi, page, first, known_fit=known, refine=refine)
        if ceiling is None and probes and all(p.outcome == "timeout" for p in probes):
            raise NeverHealthy(f"{target.service} never became healthy within {timeout:g}s; last log: "
                               f"{_tail(probes[-1])}")
    finally:
        restored = restore(guest, target, timeout)
    highest_page = (hi // page) * page
    notes = list(target.notes)
    hi_fits = ceiling is not None and ceiling == highest_page
    if hi_fits:
        notes.append(f"--hi {hi} itself fits: the real ceiling may be higher; raise --hi")
    if ceiling is None:
        notes.append(f"not even --lo {lo} fits")
    races = sum(p.restarts_seen for p in probes)
    if races:
        notes.append(f"systemd restarted the unit by itself {races} time(s) during the probe; only each start's "
                     "own invocation was read")
    return CeilingResult(engine=target.engine, guest=guest.name, service=target.service, cache=target.spec.name,
                         page=page, lo=lo, hi=hi, strategy="blind" if blind or prediction.tokens is None else "seeded",
                         predicted=prediction.tokens, prediction=prediction.how, ceiling=ceiling, hi_fits=hi_fits,
                         probes=probes, restored=restored, notes=notes)
