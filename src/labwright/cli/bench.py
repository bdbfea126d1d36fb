"""`labwright bench`: Benchmark an OpenAI-compatible endpoint (prefill, decode, TTS).

Subcommands (``llm``, ``compare``; other engineers' groups such as ``tts`` register themselves at the end of this
file); plain ``labwright bench --url ...`` is ``labwright bench llm --url ...``, as issue 6 writes it.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from labwright.bench import report, stats
from labwright.bench.runner import BenchConfig, parse_contexts, run
from labwright.cli import vocab
from labwright.errors import BadInput, OperationFailed
from labwright.ui import console, stdout

NAME = "bench"
HELP = "Benchmark an OpenAI-compatible endpoint (prefill, decode, TTS)."

app = typer.Typer(no_args_is_help=True, help=HELP)
F = TypeVar("F", bound=Callable[..., Any])

UrlOption = typer.Option(None, "--url", callback=vocab.url_option("--url"),
                         help="The API base, e.g. http://127.0.0.1:8080/v1.")
ModelOption = typer.Option(None, "--model", help="Model name as the server lists it (default: its only model).")
ContextsOption = typer.Option("512,4096,16384", "--contexts", help="Prompt lengths in tokens: 512,4096,16k.")
DecodeOption = typer.Option(512, "--decode", help="Tokens to generate per request.")
TrialsOption = typer.Option(3, "--trials", help="Requests per context; trial 1 is reported apart as cold.")
EndpointOption = typer.Option("chat", "--endpoint", help="chat (/v1/chat/completions) or completions "
                              "(/v1/completions).")
LabelOption = typer.Option(None, "--label", help="Name of this configuration in tables, CSV and plots "
                           "(default: the model).")
KeyOption = typer.Option(None, "--api-key-env", help="Environment variable holding the API key (sent as Bearer).")
CaOption = typer.Option(None, "--ca", help="A CA certificate (PEM) to verify https:// against instead of the system's "
                        "store: the TLS gateway's root, ~/.local/share/labwright/gateway/HOST/root.crt.")
TimeoutOption = typer.Option(600.0, "--timeout", help="Seconds to wait on the server before giving up a request.")
JsonOption = typer.Option(False, "--json", help="Print the full result as JSON (input for bench compare).")
CsvOption = typer.Option(False, "--csv", help="Print one CSV row per context.")
PlotOption = typer.Option(None, "--plot", help="Write a PNG: tok/s vs context (needs matplotlib: the 'plot' extra).")
MaxSpreadOption = typer.Option(stats.DEFAULT_MAX_SPREAD * 100, "--max-spread", metavar="PERCENT",
                               help="How far the cached trials may disagree ((max - min) / median of decode tok/s and "
                               "TTFT) before a warning says so; in compare, a change the runs' spreads cover is "
                               "\"within spread\", not a win or loss.")


def _api_key(variable: str | None) -> str | None:
    if variable is None:
        return None
    from labwright.schema.env import read

    value = read(variable, kind="secret")  # a line break would reach the Authorization header
    if not value:
        raise BadInput(f"--api-key-env {variable}: the variable is not set or empty: export {variable}=KEY first")
    return value


def _limit(percent: float) -> float:
    """--max-spread PERCENT as a fraction: more than 0, at most 1000%."""
    if not 0 < percent <= 1000:  # also nan
        raise BadInput(f"--max-spread {percent:g}: give the percent the cached trials may disagree by, more than 0 "
                       f"and at most 1000 (default {stats.DEFAULT_MAX_SPREAD * 100:g})")
    return percent / 100


def _emit(docs: list[dict[str, Any]], as_json: bool, as_csv: bool, plot: Path | None, compare: bool,
          limit: float = stats.DEFAULT_MAX_SPREAD) -> None:
    for doc in docs:
        doc["max_spread"] = limit
    if compare:
        for doc, rows in zip(docs[1:], report.changes(docs), strict=True):
            doc["versus_first"] = rows
    warning = report.spread_warning(docs, limit)
    if warning:
        print(f"labwright: warning: {' '.join(warning.split())}", file=sys.stderr, flush=True)
    if as_json:
        typer.echo(json.dumps(docs[0] if len(docs) == 1 and not compare else docs, indent=2))
    elif as_csv:
        typer.echo(report.csv_text(docs), nl=False)
    else:
        # Wide tables: a pipe or CI log gets the whole table instead of rich's default 80 columns.
        out = stdout if stdout.is_terminal else Console(highlight=False, width=200)
        out.print(report.compare_table(docs) if compare else report.results_table(docs, limit))
    if plot is not None:
        report.plot(docs, plot)
        console.print(f"plot written: {escape(str(plot))}")


def _outputs(as_json: bool, as_csv: bool, plot: Path | None) -> None:
    if as_json and as_csv:
        raise BadInput("--json and --csv both given: pick one output format")
    if plot is not None:
        # The path first: importing matplotlib writes its config directory, and a refusal writes nothing.
        if not plot.parent.is_dir():
            raise BadInput(f"--plot {plot}: directory {plot.parent} does not exist: create it or pick another path")
        if plot.is_dir():
            raise BadInput(f"--plot {plot} is a directory: give the PNG file's path, e.g. {plot / 'bench.png'}")
        report.require_matplotlib()


def _llm(url: str | None, model: str | None, contexts: str, decode: int, trials: int, endpoint: str,
         label: str | None, api_key_env: str | None, timeout: float, as_json: bool, as_csv: bool,
         plot: Path | None, max_spread: float = stats.DEFAULT_MAX_SPREAD * 100, ca: Path | None = None) -> None:
    if url is None:
        raise BadInput("--url is required: pass the API base, e.g. --url http://127.0.0.1:8080/v1")
    limit = _limit(max_spread)
    _outputs(as_json, as_csv, plot)
    config = BenchConfig(url=url, model=model, contexts=parse_contexts(contexts), decode=decode, trials=trials,
                         endpoint=endpoint, label=label, api_key=_api_key(api_key_env), timeout=timeout,
                         ca=str(ca) if ca is not None else None)
    config.validate()  # before anything is said or sent
    console.print(f"… benchmarking {escape(url)}: contexts {', '.join(map(str, config.contexts))}, "
                  f"{decode} decode tokens, {trials} trials each")
    result = run(config, progress=lambda line: console.print(f"  {escape(line)}"))
    _emit([result.to_json()], as_json, as_csv, plot, compare=False, limit=limit)
    if result.errors:  # the rows are shown (and saved with --json); the exit says some are not measurements
        raise OperationFailed(f"{len(result.errors)} of {len(result.results)} context(s) not measured, first: "
                              f"{result.errors[0]}")


@app.command()
def llm(
    url: str | None = UrlOption,
    model: str | None = ModelOption,
    contexts: str = ContextsOption,
    decode: int = DecodeOption,
    trials: int = TrialsOption,
    endpoint: str = EndpointOption,
    label: str | None = LabelOption,
    api_key_env: str | None = KeyOption,
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    as_csv: bool = CsvOption,
    plot: Path | None = PlotOption,
    max_spread: float = MaxSpreadOption,
    ca: Path | None = CaOption,
) -> None:
    """Prefill and decode speed by context length of an OpenAI-compatible server (streamed requests).

    A context whose cached trials disagree by more than --max-spread (a busy machine, a cold cache) is named in one
    warning line on stderr.

    Example: labwright bench llm --url http://127.0.0.1:8080/v1 --contexts 512,4096,16384 --decode 512 --trials 3
    """
    _llm(url, model, contexts, decode, trials, endpoint, label, api_key_env, timeout, as_json, as_csv, plot,
         max_spread, ca)


def _with_options_of(command: Callable[..., Any]) -> Callable[[F], F]:
    """The decorated function (``ctx`` and ``**options``) takes ``command``'s parameters after its own: Typer reads
    the options from its signature, so they are declared once, on ``command``."""

    def decorate(function: F) -> F:
        own = [p for p in inspect.signature(function, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD]
        theirs = list(inspect.signature(command, eval_str=True).parameters.values())
        function.__signature__ = inspect.Signature([*own, *theirs], return_annotation=None)  # type: ignore[attr-defined]
        function.__annotations__ = {p.name: p.annotation for p in (*own, *theirs)} | {"return": None}
        return function

    return decorate


@app.callback(invoke_without_command=True)
@_with_options_of(llm)
def _bench(ctx: typer.Context, **options: Any) -> None:
    """Benchmark a server; without a subcommand, the options are those of `labwright bench llm`."""
    if ctx.invoked_subcommand is not None:
        if options["url"] is not None:
            raise BadInput(f"--url before '{ctx.invoked_subcommand}': put the options after the subcommand")
        return
    _llm(**options)


@app.command()
def compare(
    files: list[Path] = typer.Argument(..., help="Results saved with `labwright bench llm --json > FILE`."),
    as_json: bool = JsonOption,
    as_csv: bool = CsvOption,
    plot: Path | None = PlotOption,
    max_spread: float = MaxSpreadOption,
) -> None:
    """Two (or more) saved runs side by side: prefill and decode per context, change against the first.

    A change that the two runs' spreads cover (their cached trials disagree by as much) is shown "within spread":
    not a win, not a loss. Runs whose trials disagree by more than --max-spread are named in one warning line.

    Example: labwright bench compare stack-a.json stack-c.json --plot compare.png
    """
    limit = _limit(max_spread)
    _outputs(as_json, as_csv, plot)
    docs = [report.load(path) for path in files]
    _emit(docs, as_json, as_csv, plot, compare=True, limit=limit)


from labwright.cli import bench_tts  # noqa: E402

bench_tts.register(app)
