"""pyinfra fact: which variables in a host's files are set to a known public default key (labwright.default_keys).

Only variable names and reasons come back to the control machine, never the values.

    found = host.get_fact(DefaultKeysIn, paths=["/etc/litellm/master.env", "/etc/litellm/config.yaml"])
    # [{"path": "/etc/litellm/master.env", "variable": "LITELLM_MASTER_KEY", "why": "LiteLLM's ..."}]
"""

from __future__ import annotations

import json
from typing import Any

from pyinfra.api import FactBase

from labwright.default_keys import KNOWN_DEFAULT_KEYS
from labwright.shell import quote

# Runs on the host with its python3 (Debian's), so it only uses the standard library.
_SCRIPT = r"""
import json, re, sys
known = json.loads(sys.argv[1])
pattern = re.compile(r'''^\s*(?:export\s+|Environment=)?["']?([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[=:]\s*(.*?)\s*$''')
for path in sys.argv[2:]:
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        continue
    for line in text.splitlines():
        match = pattern.match(line)
        if not match or line.lstrip().startswith("#"):
            continue
        value = match.group(2).split(" #")[0].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if value.strip() in known:
            print(json.dumps({"path": path, "variable": match.group(1), "why": known[value.strip()]}))
"""


class DefaultKeysIn(FactBase):
    """Known default keys configured in ``paths`` (missing files are skipped)."""

    def command(self, paths: list[str]) -> str:
        words = ["python3", "-c", _SCRIPT, json.dumps(KNOWN_DEFAULT_KEYS), *paths]
        return " ".join(quote(word) for word in words)

    def requires_command(self, paths: list[str]) -> str:
        return "python3"

    @staticmethod
    def default() -> list[dict[str, Any]]:
        return []

    def process(self, output: list[str]) -> list[dict[str, Any]]:
        return [json.loads(line) for line in output if line.startswith("{")]
