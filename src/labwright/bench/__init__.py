"""Benchmark OpenAI-compatible servers: prefill and decode speed by context length, as field notes 001 and 004
measured by hand.

- ``sse``: the server-sent-events parser for streamed completions.
- ``openai``: a streaming client that times one request (TTFT, total) and keeps what the server reports.
- ``prompt``: prompts built to a requested length in tokens.
- ``memory``: the local server's process found by its listening port, its RSS sampled in a thread.
- ``stats``: medians over the warm trials, the first (cold) trial apart.
- ``runner``: one benchmark run over contexts and trials.
- ``report``: table rows, JSON, CSV, and the PNG plot.
"""
