"""Demangle C++ symbol names with binutils' c++filt, in one batch; without c++filt, names stay mangled."""

from __future__ import annotations

import shutil
import subprocess


def demangle(symbols: list[str]) -> dict[str, str]:
    """Map each mangled name to its demangled form (itself when c++filt is missing, fails, or can't demangle it)."""
    result = {name: name for name in symbols}
    cxxfilt = shutil.which("c++filt")
    if not symbols or cxxfilt is None:
        return result
    try:
        proc = subprocess.run([cxxfilt], input="\n".join(symbols) + "\n", capture_output=True, text=True,
                              timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return result  # a report with mangled names beats no report
    lines = proc.stdout.splitlines()
    # c++filt prints exactly one line per input line; anything else means we can't pair them up safely.
    if len(lines) == len(symbols):
        result.update(zip(symbols, lines, strict=True))
    return result
