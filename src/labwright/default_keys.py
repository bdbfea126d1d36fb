"""Known public default API keys, refused for every service labwright deploys.

Field note 002 left Open WebUI pipelines on its published default key (``0p3n-w3bu!``) and LiteLLM's docs show
``sk-1234`` as the master key: anyone who has read those docs holds them. A deploy that finds one configured, or is
asked to configure one, stops with one line naming the file and the variable, never the value.

    from labwright.default_keys import check_not_default, find_default_keys
    check_not_default(value, "litellm_master_key")                  # raises SafetyCheckFailed
    find_default_keys(Path("/etc/litellm/master.env").read_text())   # [("LITELLM_MASTER_KEY", "LiteLLM's ...")]
"""

from __future__ import annotations

from labwright.agent.default_keys import PATTERN
from labwright.errors import SafetyCheckFailed

# value -> where it is published. Compared exactly (keys are case-sensitive), after stripping quotes and spaces.
KNOWN_DEFAULT_KEYS: dict[str, str] = {
    "sk-1234": "LiteLLM's documented example master key",
    "sk-12345": "LiteLLM's documented example key",
    "0p3n-w3bu!": "Open WebUI pipelines' default API key",
    "no-key-needed": "field note 002's placeholder key (no authentication)",
    "changeme": "a placeholder default",
    "your-secret-key": "a placeholder default",
    "t0p-s3cr3t": "Open WebUI's example WEBUI_SECRET_KEY",
}

# KEY=VALUE (env files, systemd Environment=) and key: value (YAML) lines: the agent's own pattern, one for both.
_ASSIGNMENT = PATTERN


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value.strip()


def is_default_key(value: str) -> str | None:
    """Where ``value`` is published as a default, or None."""
    return KNOWN_DEFAULT_KEYS.get(_unquote(value))


def find_default_keys(text: str) -> list[tuple[str, str]]:
    """(variable, why) for each ``KEY=VALUE`` / ``key: value`` line of ``text`` whose value is a known default."""
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _ASSIGNMENT.match(line)
        if match:
            why = is_default_key(match.group(2).split(" #")[0])
            if why:
                found.append((match.group(1), why))
    return found


def check_not_default(value: str, where: str) -> None:
    """Raise SafetyCheckFailed when ``value`` is a known public default key; ``where`` names the setting."""
    why = is_default_key(value)
    if why:
        raise SafetyCheckFailed(f"{where} is {why}, which anyone can look up; set a random key "
                                "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")


def check_text(text: str, where: str) -> None:
    """Raise SafetyCheckFailed naming the first variable in ``text`` (a file's contents) set to a known default."""
    found = find_default_keys(text)
    if found:
        variable, why = found[0]
        raise SafetyCheckFailed(f"{where}: {variable} is {why}, which anyone can look up; replace it with a random "
                                "key (python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
