"""The context-ceiling probe's pure parts: the search, the ExecStart flag edit, bad input before any guest is touched.

The search is exercised with a predicate that answers "fits" below a threshold (the monotonic property the real
engine has); the real engine is in tests/integration/test_probe_ceiling.py.
"""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.cli import main
from labwright.errors import BadInput, OperationFailed
from labwright.tuning.kv_config import layout_from_dict
from labwright.tuning.probe import (
    Target,
    cache_spec,
    check_range,
    get_flag,
    llamacpp_target,
    make_probe,
    probe_ceiling,
    search,
    set_flag,
)

PAGE = 256


def counting(ceiling: int) -> tuple[list[int], object]:
    tried: list[int] = []

    def fits(tokens: int) -> bool:
        tried.append(tokens)
        return tokens <= ceiling

    return tried, fits


@pytest.mark.parametrize("ceiling", [8192, 8448, 65536, 120064, 195072, 223744, 261888, 262144])
@pytest.mark.parametrize("predicted", [None, 100000, 195072, 300000])
def test_search_finds_the_exact_page_whatever_the_prediction(ceiling, predicted):
    tried, fits = counting(ceiling)
    assert search(fits, 8192, 262144, PAGE, predicted) == ceiling
    assert all(t % PAGE == 0 and 8192 <= t <= 262144 for t in tried)
    assert ceiling in tried and (ceiling == 262144 or ceiling + PAGE in tried)


def test_nothing_fits_is_none_and_hi_fitting_is_hi():
    assert search(counting(4000)[1], 8192, 262144, PAGE) is None
    assert search(counting(4000)[1], 8192, 262144, PAGE, predicted=150000) is None
    assert search(counting(10**9)[1], 8192, 262144, PAGE, predicted=150000) == 262144


def test_the_seed_range_blind_needs_ten_probes_seeded_needs_two():
    # Seed 001: 131,072..262,144 at 8,4, ceiling 195,072: its blind search made 10 probes.
    tried, fits = counting(195072)
    assert search(fits, 131072, 262144, PAGE) == 195072
    assert len(tried) == 11  # lo, hi, then 9 halvings of 512 pages (the seed re-confirmed instead of probing lo)
    tried, fits = counting(195072)
    assert search(fits, 131072, 262144, PAGE, predicted=195072) == 195072
    assert tried == [195072, 195328]


def test_a_refined_guess_is_probed_next_and_a_known_fit_is_not_probed_again():
    tried, fits = counting(120064)
    result = search(fits, 8192, 262144, PAGE, predicted=110336, known_fit=8192, refine=lambda ok: 120064)
    assert result == 120064 and tried == [110336, 120064, 120320]
    tried, fits = counting(120064)
    assert search(fits, 8192, 262144, PAGE, predicted=110336, known_fit=8192, refine=lambda ok: 120320) == 120064
    assert tried == [110336, 120320, 120064]
    assert 8192 not in tried


def test_exec_start_flags_are_replaced_in_place_or_added():
    line = '/usr/local/bin/llama-server --model /m.gguf --ctx-size 131072 -ctk q4_0 --port 8001 ' \
           '--chat-template-kwargs "{\\"enable_thinking\\":false}"'
    edited = set_flag(set_flag(line, ("--ctx-size", "-c"), "4096"), ("--cache-type-k", "-ctk"), "q8_0")
    assert edited == line.replace("131072", "4096").replace("-ctk q4_0", "-ctk q8_0")
    added = set_flag(edited, ("--cache-type-v", "-ctv"), "f16")
    assert added == edited + " --cache-type-v f16"
    assert set_flag("/bin/x --ctx-size=8 -c9", ("--ctx-size", "-c"), "1") == "/bin/x --ctx-size=1 -c9"
    assert get_flag(line, ("--port",)) == "8001" and get_flag(line, ("--host",)) is None


@pytest.mark.parametrize(("lo", "hi", "page", "words"), [
    (9000, 8000, 256, "--lo 9000 is above --hi 8000"),
    (8200, 8400, 256, "no whole 256-token page"),
    (0, 8192, 256, "--lo 0"),
    (4096, 8192, 0, "--page 0"),
])
def test_bad_ranges(lo, hi, page, words):
    with pytest.raises(BadInput, match=words):
        check_range(lo, hi, page)


@pytest.mark.parametrize(("args", "words"), [
    (["--engine", "llamacpp", "--lo", "9000", "--hi", "8000"], "--lo 9000 is above --hi 8000"),
    (["--engine", "llamacpp", "--cache-mode", "8,4"], "llama.cpp takes --cache-type"),
    (["--engine", "tabbyapi", "--cache-type", "q8_0"], "tabbyAPI takes --cache-mode"),
    (["--engine", "tabbyapi", "--cache-mode", "9,4"], "cache mode '9,4' is not one tabbyAPI takes"),
    (["--engine", "llamacpp", "--cache-type", "q3_k"], "cache type 'q3_k' is not one llama.cpp supports"),
    (["--engine", "vllm"], "--engine vllm: the probe knows llamacpp, tabbyapi"),
    (["--engine", "llamacpp", "--budget", "2GiB"], "--budget needs --model-config"),
    # every number in range, every name checked, before the guest is reached (issue 16's sweep)
    (["--engine", "llamacpp", "--timeout", "0"], "--timeout 0: give the seconds a start may take, more than 0"),
    (["--engine", "llamacpp", "--timeout", "-1"], "--timeout -1: give the seconds a start may take"),
    (["--engine", "llamacpp", "--timeout", "nan"], "--timeout nan: give the seconds a start may take"),
    (["--engine", "llamacpp", "--timeout", "86400"], "at most 3,600"),
    (["--engine", "llamacpp", "--hi", "1000000000000"], "--hi 1,000,000,000,000 is more than 16,777,216 tokens"),
    (["--engine", "llamacpp", "--lo", "-5"], "--lo -5: give a context of 1 token or more"),
    (["--engine", "llamacpp", "--page", "-256"], "--page -256"),
    (["--engine", "llamacpp", "--service", "../../etc/passwd"], "--service '../../etc/passwd' is not a systemd "
                                                                 "service name"),
    (["--engine", "llamacpp", "--service", ""], "--service '': empty; give a value, or leave the option out"),
    (["--engine", "tabbyapi", "--config-path", "config.yml"], "--config-path config.yml: give the absolute path"),
])
def test_bad_input_is_one_line_exit_2_before_any_guest_is_reached(capsys, args, words):
    # The guest name is never looked up: these fail before the LXD daemon is asked anything.
    assert main(["probe", "ceiling", "--guest", "no-such-guest", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_a_refinement_is_asked_for_at_most_twice_then_it_is_steps():
    asked: list[int] = []

    def refine(fit: int) -> int:
        asked.append(fit)
        return fit + 2 * PAGE

    tried, fits = counting(120064)
    assert search(fits, 8192, 262144, PAGE, predicted=110336, known_fit=8192, refine=refine) == 120064
    assert asked == [110336, 110848]
    assert tried[:4] == [110336, 110848, 111360, 111616]  # two refined guesses, then +1 page, +1, +2, +4 ...


@pytest.mark.parametrize(("content", "words"), [
    (b"\x00\x01binary\xff" * 100, "is a binary file, not text (expected the model's Hugging Face config.json"),
    (b"\xff\xfe{}", "is not UTF-8 text (byte 0xff at offset 0"),
    (b'{"num_hidden_layers": 0, "num_attention_heads": 4, "hidden_size": 64}', "num_hidden_layers is 0"),
    (b'{"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 8, "hidden_size": 64}',
     "num_key_value_heads 8 is more than num_attention_heads 4"),
])
def test_a_model_config_that_cannot_be_planned_is_one_line_before_any_guest(capsys, tmp_path, content, words):
    config = tmp_path / "config.json"
    config.write_bytes(content)
    code = main(["probe", "ceiling", "--guest", "no-such-guest", "--engine", "llamacpp", "--model-config",
                 str(config)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and str(config) in err[0], err


def test_probe_restore_refuses_a_bad_service_name_before_any_guest(capsys):
    assert main(["probe", "restore", "--guest", "no-such-guest", "--service", "a/b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--service 'a/b' is not a systemd service name" in err[0], err


@settings(max_examples=300, deadline=None)
@given(first=st.integers(40, 900), over=st.integers(1, 400), ceiling_back=st.integers(0, 2000))
def test_an_overshot_refined_guess_costs_no_more_than_bisecting_its_bracket(first, over, ceiling_back):
    """After a start fit at ``first`` and the refined guess above it did not, the ceiling lies in that bracket: the
    search walks down one page (the usual reading noise), then bisects, so it never takes more starts than
    bisecting the bracket plus that one, wherever the real ceiling is (CI's loaded run: a gallop with doubling steps
    took as many starts as the blind search)."""
    first_page, guess_page = first, min(first + over, 262144 // PAGE)
    ceiling = max(first_page, guess_page - 1 - ceiling_back) * PAGE  # the guess itself does not fit
    tried, fits = counting(ceiling)
    result = search(fits, 8192, 262144, PAGE, predicted=first_page * PAGE, known_fit=8192,
                    refine=lambda ok: guess_page * PAGE)
    assert result == ceiling
    after = tried[2:]  # the first start and the refined guess
    assert len(after) <= 1 + max(1, (guess_page - first_page)).bit_length(), tried


def test_an_ok_without_the_servers_peak_memory_is_refused_not_counted():
    """The helper reads the server's memory before it answers "ok" (tests/unit/tuning/test_probe_deadline.py); an
    answer without it (a broken helper) stops the probe with what it got, never a fit with a silent None."""

    class Answering:
        name = "box"

        def __init__(self, answer: dict) -> None:
            self.answer = answer

        def waiter(self, request: dict, timeout: float) -> dict:
            assert request["mode"] == "probe"
            return self.answer

        def read_file(self, path: str) -> bytes | None:
            return None

    target = Target(engine="llamacpp", service="llama-server.service", spec=cache_spec("llamacpp", "f16"),
                    setting="--ctx-size", daemon_reload=True, success_lines=(), oom_lines=(), health_url=None,
                    was_active=True, restore_actions=[], render=lambda tokens, deadline=None: [])
    ok = {"outcome": "ok", "why": "health", "peak_rss_bytes": 300 * 2**20, "guest_memory": {"anon_bytes": 1}}
    assert make_probe(Answering(ok), target, 20.0, 15)(8192).peak_rss_bytes == 300 * 2**20
    with pytest.raises(OperationFailed, match=r"answered ok for --ctx-size 8,192 without the server's peak memory"):
        make_probe(Answering({**ok, "peak_rss_bytes": None}), target, 20.0, 15)(8192)
    # a start that failed carries no peak (its process is gone): that is its verdict, not an error
    assert make_probe(Answering({"outcome": "oom", "why": "SIGKILL"}), target, 20.0, 15)(8192).outcome == "oom"


MIB = 2**20
LIMIT = 512 * MIB
# The tiny GGUF of support.probe_box as the planner reads it (4 layers x 4 KV heads x 64: 4,096 B/token at f16).
TINY = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
        "hidden_size": 256, "max_position_embeddings": 1 << 19}


class EdgeGuest:
    """A 512 MiB guest whose anonymous memory grows linearly with the context (from ``base_mib`` at 8,192 tokens by
    ``per_token`` bytes) and where a start comes up while that memory stays at or under ``edge_mib``: the line and the
    edge benchmarks/probe_ceiling.py measured on the real llama-server (docs/probe.md)."""

    name = "box"

    def __init__(self, base_mib: float, per_token: float, edge_mib: float) -> None:
        self.base, self.per_token, self.edge = base_mib * MIB, per_token, edge_mib * MIB
        self.started: list[int] = []

    def anon(self, tokens: int) -> int:
        return int(self.base + self.per_token * (tokens - 8192))

    def waiter(self, request: dict, timeout: float) -> dict:
        if request["mode"] == "state":
            return {"systemctl": True, "leftover": None, "paths": {"/usr/bin/python3": True},
                    "props": {"LoadState": "loaded", "ActiveState": "active",
                              "FragmentPath": "/etc/systemd/system/llama-server.service"},
                    "exec_start": "/usr/local/bin/llama-server --model /srv/m.gguf --port 8001"}
        if request["mode"] == "restore":
            return {"outcome": "ok"}
        text = base64.b64decode(request["install"][0]["content_b64"]).decode()
        tokens = int(re.search(r"--ctx-size (\d+)", text).group(1))  # type: ignore[union-attr]
        self.started.append(tokens)
        anon = self.anon(tokens)
        if anon > self.edge:
            return {"outcome": "oom", "why": "SIGKILL: the OOM killer"}
        return {"outcome": "ok", "why": "health", "peak_rss_bytes": anon - 40 * MIB,
                "guest_memory": {"limit_bytes": LIMIT, "anon_bytes": anon, "usage_bytes": anon + 12 * MIB}}

    def read_file(self, path: str) -> bytes | None:
        return None


# benchmarks/probe_ceiling.py, 2026-11-28: the baseline's anonymous memory (MiB) and the bytes each token adds
# (between the baseline and the first guess), as the real llama-server showed them.
MEASURED = {"f16": (65.2, 4148.0), "q8_0": (50.3, 2228.7)}


@pytest.mark.parametrize("cache", ["f16", "q8_0"])
@pytest.mark.parametrize("edge_mib", [498.6, 498.85, 499.1])
def test_the_seeded_search_meets_its_target_on_the_measured_edge(cache, edge_mib):
    """docs/probe.md's target, on a guest shaped like the measured one: at most 5 starts (the blind search: 12),
    with the edge anywhere in the low part of the measured band (between 498.6 and 500.7 MiB the same start fit one
    time and failed another). The refined guess aims at 498.75 MiB, rounded down, so the search walks up a page
    from a fit rather than bisecting down from a thrash; the old 5 MiB reserve overshot by 6-7 pages and took the
    9-10 starts the real runs took."""
    base, per_token = MEASURED[cache]
    guest = EdgeGuest(base, per_token, edge_mib)
    target = llamacpp_target(guest, "llama-server", cache_spec("llamacpp", cache))
    result = probe_ceiling(guest, target, 8192, 262144, layout=layout_from_dict(TINY))
    ceiling = max(t for t in range(8192, 262145, PAGE) if guest.anon(t) <= guest.edge)
    assert result.ceiling == ceiling and result.strategy == "seeded"
    assert len(result.probes) <= 5, guest.started
    blind = EdgeGuest(base, per_token, edge_mib)
    assert probe_ceiling(blind, llamacpp_target(blind, "llama-server", cache_spec("llamacpp", cache)), 8192, 262144,
                         layout=layout_from_dict(TINY), blind=True).ceiling == ceiling
    assert len(blind.started) >= 9


class NoisyEdgeGuest(EdgeGuest):
    """EdgeGuest whose readings are off as a loaded machine's are: the baseline's by ``base_noise`` MiB (the
    transient memory of a start caught at its verdict), every later one by the next of ``noise`` (MiB, cycled).
    Whether a start fits is still decided by the real memory: only what the helper reads is noisy."""

    def __init__(self, base_mib: float, per_token: float, edge_mib: float, base_noise: float,
                 noise: list[float]) -> None:
        super().__init__(base_mib, per_token, edge_mib)
        self.base_noise, self.noise, self.reads = base_noise * MIB, [n * MIB for n in noise] or [0.0], 0

    def waiter(self, request: dict, timeout: float) -> dict:
        answer = super().waiter(request, timeout)
        if answer.get("guest_memory"):
            if self.started == [8192]:
                shift = self.base_noise
            else:
                shift, self.reads = self.noise[self.reads % len(self.noise)], self.reads + 1
            memory = answer["guest_memory"]
            answer = {**answer, "guest_memory": {**memory, "anon_bytes": int(memory["anon_bytes"] + shift)}}
        return answer


@settings(max_examples=200, deadline=None)
@given(cache=st.sampled_from(["f16", "q8_0"]), page=st.sampled_from([256, 1024, 4096]),
       edge=st.floats(497.5, 500.7), base_noise=st.floats(-2.0, 60.0),
       noise=st.lists(st.floats(-2.0, 2.0), min_size=1, max_size=4))
def test_a_seeded_search_beats_the_blind_one_whatever_the_readings_say(cache, page, edge, base_noise, noise):
    """The seeded search's promise (docs/probe.md) holds when the readings are off as under load: a baseline read
    high puts the planner's prediction pages under the real ceiling (CI's loaded run: predicted 208,896, ceiling
    212,992 with 4,096-token pages, i.e. a baseline read ~40 MiB high, and 9 starts where the blind search takes 8,
    because a refined guess past the prediction was dropped instead of being probed)."""
    base, per_token = MEASURED[cache]
    guest = NoisyEdgeGuest(base, per_token, edge, base_noise, noise)
    target = llamacpp_target(guest, "llama-server", cache_spec("llamacpp", cache))
    result = probe_ceiling(guest, target, 8192, 400000, page=page, layout=layout_from_dict(TINY))
    ceiling = max(t for t in range(page, 400001, page) if t >= 8192 and guest.anon(t) <= guest.edge)
    assert result.ceiling == ceiling
    blind = EdgeGuest(base, per_token, edge)
    assert probe_ceiling(blind, llamacpp_target(blind, "llama-server", cache_spec("llamacpp", cache)), 8192, 400000,
                         page=page, layout=layout_from_dict(TINY), blind=True).ceiling == ceiling
    assert len(result.probes) < len(blind.started), (guest.started, blind.started)


def test_every_request_of_a_run_carries_its_id_and_the_restore_starts_a_new_run():
    """The guest fences a restored run (labwright.agent.probe.enter): the probes and the restore of one run carry
    one id; after the restore the target's next probes are a new run, so a re-check after a search still runs."""
    from labwright.tuning.probe import restore

    seen: list[dict] = []

    class Recording:
        name = "box"

        def waiter(self, request: dict, timeout: float) -> dict:
            seen.append(request)
            return {"outcome": "ok", "why": "health", "peak_rss_bytes": 1, "guest_memory": {}}

    target = Target(engine="llamacpp", service="llama-server.service", spec=cache_spec("llamacpp", "f16"),
                    setting="--ctx-size", daemon_reload=True, success_lines=(), oom_lines=(), health_url=None,
                    was_active=True, restore_actions=[], render=lambda tokens, deadline=None: [])
    run = make_probe(Recording(), target, 20.0, 15)
    run(8192)
    run(16384)
    restore(Recording(), target, 20.0)  # type: ignore[arg-type]
    run(8192)
    ids = [request["run"] for request in seen]
    assert [request["mode"] for request in seen] == ["probe", "probe", "restore", "probe"]
    assert ids[0] == ids[1] == ids[2] != ids[3] and len(ids[0]) == 16
    assert seen[0]["record"]["run"] == ids[0]
    assert Target(**{**target.__dict__, "run": "x"}).run == "x" and target.run != Target(
        engine="e", service="s", spec=target.spec, setting="", daemon_reload=False, success_lines=(), oom_lines=(),
        health_url=None, was_active=False, restore_actions=[], render=target.render).run
