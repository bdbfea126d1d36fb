"""The agent's ``default-keys`` subcommand: which variables in a host's files hold a known public default key.

``python3 AGENT default-keys KNOWN_JSON PATH...`` with ``KNOWN_JSON`` labwright's table (value -> where it is
published, ``labwright.default_keys.KNOWN_DEFAULT_KEYS``): one JSON line ``{"path", "variable", "why"}`` per hit.
Missing files are skipped; only variable names and reasons are printed, never the values. The module runs on its
own too (``python3 default_keys.py KNOWN_JSON PATH...``): the pyinfra fact ``labwright.facts.default_keys`` sends its
source, since a fact runs before any operation could push the agent.
"""

from __future__ import annotations

import json
import re
import sys

# KEY=VALUE (env files, systemd Environment=) and key: value (YAML) lines.
PATTERN = re.compile(r'''^\s*(?:export\s+|Environment=)?["']?([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[=:]\s*(.*?)\s*$''')


def scan(known: dict[str, str], paths: list[str]) -> list[dict[str, str]]:
    found = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        for line in text.splitlines():
            match = PATTERN.match(line)
            if not match or line.lstrip().startswith("#"):
                continue
            value = match.group(2).split(" #")[0].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            if value.strip() in known:
                found.append({"path": path, "variable": match.group(1), "why": known[value.strip()]})
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print("labwright: usage: default-keys KNOWN_JSON PATH...", file=sys.stderr)
        return 2
    for hit in scan(json.loads(argv[0]), argv[1:]):
        print(json.dumps(hit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
