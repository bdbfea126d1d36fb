"""pyinfra fact: which variables in a host's files are set to a known public default key (labwright.default_keys).

Only variable names and reasons come back to the control machine, never the values.

    found = host.get_fact(DefaultKeysIn, paths=["/etc/litellm/master.env", "/etc/litellm/config.yaml"])
    # [{"path": "/etc/litellm/master.env", "variable": "LITELLM_MASTER_KEY", "why": "LiteLLM's ..."}]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyinfra.api import FactBase

from labwright.agent import default_keys as default_keys_scan
from labwright.default_keys import KNOWN_DEFAULT_KEYS
from labwright.shell import quote
from labwright.textio import loads_json

# Runs on the host with its python3: the agent's default-keys scan (labwright.agent.default_keys, standard library
# only), sent as source. A fact runs before any operation, so it cannot count on the pushed agent being there yet.
_SCRIPT = Path(default_keys_scan.__file__).read_text()


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
        return [loads_json(line) for line in output if line.startswith("{")]
