"""pyinfra facts for deploys/monitoring.py and deploys/gateway.py: whether HTTP endpoints answer, asked from the host.

Asked without any key (a key never goes on a command line): a keyed endpoint answers 401, which proves it is there.
"""

from __future__ import annotations

from pyinfra.api import FactBase

from labwright.shell import quote
from labwright.textio import ascii_digits

# Run on the host: one line per URL in argv: "<status>" or "error <reason>".
ANSWER_SCRIPT = r"""
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            print(answer.status)
    except urllib.error.HTTPError as error:
        print(error.code)
    except Exception as error:
        reason = getattr(error, "reason", None) or error
        print("error", " ".join(str(reason).split())[:120] or type(error).__name__)
"""


class HttpAnswers(FactBase):
    """One line per URL, asked from the host: its status, or ``error <reason>`` (read with :func:`answers`)."""

    def command(self, urls: tuple[str, ...]) -> str:
        return "python3 -c " + quote(ANSWER_SCRIPT) + "".join(f" {quote(url)}" for url in urls)

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output]


def answers(urls: tuple[str, ...], lines: list[str]) -> dict[str, int | str]:
    """The fact's lines matched to its URLs (a missing line: no answer at all)."""
    result: dict[str, int | str] = {}
    for index, url in enumerate(urls):
        line = lines[index].strip() if index < len(lines) else "error no answer"
        result[url] = int(line) if ascii_digits(line) else line.removeprefix("error ").strip()
    return result
