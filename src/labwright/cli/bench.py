"""`labwright bench`: Benchmark an OpenAI-compatible endpoint (prefill, decode, TTS)."""

import typer

NAME = "bench"
HELP = "Benchmark an OpenAI-compatible endpoint (prefill, decode, TTS)."

app = typer.Typer(no_args_is_help=True, help=HELP)
