"""One benchmark run: every context length, ``trials`` streamed requests each, memory sampled when the server is local.

The methodology is field note 001's: a prompt of the requested context (in tokens), ``decode`` generated tokens, prefill
tok/s = prompt tokens / TTFT, decode tok/s = decode tokens / (total - TTFT), trial 1 reported apart as the cold run
and the median over the later trials as the cached one.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labwright.bench import memory, prompt, stats
from labwright.bench.openai import ENDPOINTS, Client, Endpoint, Trial, tls_context
from labwright.bench.sse import BadAnswer
from labwright.errors import BadInput
from labwright.textio import ascii_digits

if TYPE_CHECKING:
    from labwright.bench.answers import ModelEntry

SCHEMA = "labwright.bench.llm/1"
# Llama 4 Scout's 10M tokens is the longest context any open model claims; a prompt is ~4 characters a token, so this
# bounds one prompt at ~40 MB instead of building whatever a typo asks for.
MAX_CONTEXT = 10 * 1024 * 1024
MAX_DECODE = 1024 * 1024
MAX_TRIALS = 1000
MAX_TIMEOUT_S = 86400.0
CALIBRATION_TEXT = "Hello."


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str | None
    contexts: tuple[int, ...]
    decode: int = 512
    trials: int = 3
    endpoint: str = "chat"
    label: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    ca: str | None = None  # a PEM CA file TLS is verified against (the TLS gateway's root), else the system store

    def validate(self) -> None:
        """Every number in range before anything is built or sent (a terabyte prompt is never started)."""
        if not self.contexts:
            raise BadInput("--contexts is empty: pass token counts, e.g. --contexts 512,4096,16384")
        bad = [c for c in self.contexts if c < 16]
        if bad:
            raise BadInput(f"--contexts {bad[0]} is too small: each context must be at least 16 tokens")
        huge = [c for c in self.contexts if c > MAX_CONTEXT]
        if huge:
            raise BadInput(f"--contexts {huge[0]:,} is more than {MAX_CONTEXT:,} tokens, longer than any model's "
                           "context: pass the lengths to measure within the model's context, e.g. 512,4096,16k")
        if not 1 <= self.decode <= MAX_DECODE:
            raise BadInput(f"--decode {self.decode}: generate 1 to {MAX_DECODE:,} tokens per request (e.g. 512)")
        if not 1 <= self.trials <= MAX_TRIALS:
            raise BadInput(f"--trials {self.trials}: run 1 to {MAX_TRIALS} trials per context (3 gives a cold run "
                           "and a 2-trial median)")
        if not 0 < self.timeout <= MAX_TIMEOUT_S or self.timeout != self.timeout:
            raise BadInput(f"--timeout {self.timeout:g}: give the seconds to wait on the server per request, more "
                           f"than 0 and at most {MAX_TIMEOUT_S:,} (e.g. 600)")
        if self.endpoint not in ENDPOINTS:
            raise BadInput(f"--endpoint {self.endpoint!r} is not one of {', '.join(ENDPOINTS)}")
        Endpoint.parse(self.url, None, self.timeout)  # the URL's own one-line errors, before anything is sent
        if self.ca is not None:
            tls_context(self.ca)  # a CA file that is missing or no certificate: one line, before anything is sent


def parse_contexts(text: str) -> tuple[int, ...]:
    """``512,4096,16k`` -> (512, 4096, 16384); one clear line for anything else."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        scale = 1024 if part.endswith("k") else 1
        number = part.removesuffix("k")
        if not ascii_digits(number):
            raise BadInput(f"--contexts {text!r}: {part!r} is not a whole number of tokens (e.g. 512,4096,16k)")
        values.append(int(number) * scale)
    if not values:
        raise BadInput(f"--contexts {text!r} names no context: pass e.g. 512,4096,16384")
    return tuple(values)


@dataclass
class ContextResult:
    """One context's trials; or, when the server's answer to one of them was not a measurement (BadAnswer: a stream
    cut short, a negative count, a NaN speed), its ``error`` and no numbers at all: an error row."""

    context: int
    trials: list[Trial]
    peak_rss_bytes: int | None = None
    peak_gpu_bytes: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"context": self.context, "error": self.error, "cold": None, "warm": None,
                    "spread": dict.fromkeys(stats.SPREAD_KEYS), "peak_rss_bytes": None, "peak_gpu_bytes": None,
                    "trials": []}
        cold, warm = stats.cold_and_warm(self.trials)
        return {
            "context": self.context,
            "cold": cold.to_json() if cold else None,
            "warm": warm.to_json() if warm else None,
            # (max - min) / median of the warm trials per metric (None with fewer than two): labwright.bench.stats
            "spread": stats.spreads(self.trials),
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_gpu_bytes": self.peak_gpu_bytes,
            "trials": [t.to_json() for t in self.trials],
        }


@dataclass
class BenchRun:
    label: str
    url: str
    model: str
    endpoint: str
    decode: int
    trials: int
    started: str
    tokenizer: str  # "server" (/tokenize) or "estimate"
    template_tokens: int
    server_pid: int | None
    results: list[ContextResult] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        """"context N: what the server sent" for each error row."""
        return [f"context {r.context}: {r.error}" for r in self.results if r.error is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "label": self.label, "url": self.url, "model": self.model, "endpoint": self.endpoint,
            "decode": self.decode, "trials": self.trials, "started": self.started, "tokenizer": self.tokenizer,
            "template_tokens": self.template_tokens, "server_pid": self.server_pid,
            "results": [r.to_json() for r in self.results],
        }


def resolve_model(client: Client, model: str | None, contexts: tuple[int, ...], decode: int) -> str:
    """The model to ask for, checked against ``/v1/models`` (and the server's context size when it reports one)."""
    served = client.models()
    if served is None:
        if model is None:
            raise BadInput(f"{client.endpoint.base} lists no models (no /models): pass --model NAME")
        return model
    names: dict[str, ModelEntry] = {}
    for entry in served:
        for name in [entry.id, *(entry.aliases or [])]:
            names.setdefault(name, entry)
    ids = [e.id for e in served]
    if model is None:
        if len(ids) != 1:
            raise BadInput(f"{client.endpoint.base} serves {len(ids)} models ({', '.join(ids) or 'none'}): "
                           "pick one with --model NAME")
        model = ids[0]
    if model not in names:
        raise BadInput(f"model {model!r} is not served at {client.endpoint.base} (it serves: "
                       f"{', '.join(ids) or 'nothing'}): pass one of those with --model")
    n_ctx = names[model].context
    if n_ctx and max(contexts) + decode > n_ctx:
        raise BadInput(f"--contexts {max(contexts)} + --decode {decode} exceeds the server's context of {n_ctx} "
                       f"tokens: restart it with a context of at least {max(contexts) + decode} or drop that length")
    return model


def calibrate(client: Client) -> tuple[float, int, str]:
    """Characters per token, the tokens the chat template adds around a message, and which tokenizer was used."""
    short = client.stream(CALIBRATION_TEXT, 1)
    counted = client.count_tokens(CALIBRATION_TEXT)
    sample = prompt.filler(4000, 1)
    if counted is not None:
        sample_tokens = client.count_tokens(sample) or 1
        return len(sample) / sample_tokens, max(0, short.prompt_tokens - counted), "server"
    if short.prompt_tokens_source == "estimate":
        return 4.0, 0, "estimate"
    long = client.stream(sample, 1)
    if long.prompt_tokens <= short.prompt_tokens:  # the server's usage does not follow the prompt: guess
        return 4.0, 0, "estimate"
    ratio = (len(sample) - len(CALIBRATION_TEXT)) / (long.prompt_tokens - short.prompt_tokens)
    return ratio, max(0, round(short.prompt_tokens - len(CALIBRATION_TEXT) / ratio)), "estimate"


def run(config: BenchConfig, progress: Callable[[str], None] = lambda _: None) -> BenchRun:
    config.validate()
    endpoint = Endpoint.parse(config.url, config.api_key, config.timeout, config.ca)
    client = Client(endpoint, config.model or "", config.endpoint)
    client.model = resolve_model(client, config.model, config.contexts, config.decode)
    ratio, template_tokens, tokenizer = calibrate(client)
    local = memory.is_local(endpoint.host)
    pid = memory.listening_pid(endpoint.port) if local else None
    smi = memory.GpuSampler.command() if local else None
    bench = BenchRun(
        label=config.label or client.model, url=endpoint.base, model=client.model, endpoint=config.endpoint,
        decode=config.decode, trials=config.trials, started=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tokenizer=tokenizer, template_tokens=template_tokens, server_pid=pid)
    # A fresh salt per run: llama.cpp keeps earlier prompts in a host-memory cache, so a prompt repeated from an
    # earlier run (or trial) would be served from that cache and its "prefill" would measure nothing.
    salt = secrets.randbits(40)
    for context in config.contexts:
        result = ContextResult(context, [])
        samplers: list[memory.PeakSampler] = []
        if pid is not None:
            samplers.append(memory.RssSampler(pid))
        if smi is not None:
            samplers.append(memory.GpuSampler(smi))
        for sampler in samplers:
            sampler.__enter__()
        try:
            for trial in range(1, config.trials + 1):
                text = prompt.build(max(1, context - template_tokens), seed=salt + context * 1000 + trial,
                                    chars_per_token=ratio, count=client.count_tokens)
                try:
                    measured = client.stream(text.text, config.decode)
                except BadAnswer as exc:
                    # Not a measurement: this context is an error row, and the next context is tried.
                    result.error = str(exc)
                    progress(f"context {context}: trial {trial}/{config.trials}: not measured: {exc}")
                    break
                result.trials.append(measured)
                kind = "cold" if trial == 1 else "cached"
                decode_tps = f"{measured.decode_tps:,.0f}" if measured.decode_tps else "-"
                progress(f"context {context}: trial {trial}/{config.trials} ({kind}): {measured.prompt_tokens} prompt "
                         f"tokens, TTFT {measured.ttft_s * 1000:.1f} ms, prefill {measured.prefill_tps:,.0f} tok/s, "
                         f"decode {decode_tps} tok/s")
        finally:
            for sampler in samplers:
                sampler.__exit__(None, None, None)
                if isinstance(sampler, memory.RssSampler):
                    result.peak_rss_bytes = sampler.peak
                else:
                    result.peak_gpu_bytes = sampler.peak
        bench.results.append(result)
    return bench
