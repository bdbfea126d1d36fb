"""Lab guests running the REAL llama-server (deploys/llamacpp.py) on the tiny generated GGUF: the engine the
integration tests of the companions (LiteLLM gateway, Open WebUI) talk to.

- ``guest_sh`` runs a shell script in a lab container and returns its stdout (asserting exit 0);
- ``deploy_tiny_engines`` pushes the tiny GGUF to ``MODEL`` on each guest and runs deploys/llamacpp.py over the
  inventory;
- ``tokens_predicted`` reads llama-server's own count of generated tokens from its /metrics.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import run_pyinfra

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
ENGINE_PORT = 8001


def guest_sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed on {name}: {result.stderr.decode()}"
    return str(result.stdout.decode())


def guest_python(lab: Lab, name: str) -> str:
    """The guest's CPython version (e.g. 3.11.2), the one its wheelhouses are built for."""
    return guest_sh(lab, name, "python3 -c 'import platform; print(platform.python_version())'").strip()


def deploy_tiny_engines(lab: Lab, names: list[str], model: Path, inventory: Path) -> None:
    """The tiny GGUF at MODEL on each guest, then deploys/llamacpp.py over ``inventory`` (which names them)."""
    for name in names:
        assert lab.client.exec(name, ["mkdir", "-p", str(Path(MODEL).parent)]).exit_code == 0
        with model.open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
    engines = run_pyinfra(str(inventory), "deploys/llamacpp.py", cwd=REPO, timeout=900)
    assert engines.rc == 0, engines.output[-4000:]


KEY_FILE = "/etc/llama-server/api-key"


def engine_key(lab: Lab, name: str) -> str:
    """The API key deploys/llamacpp.py made on the guest (read there through LXD, never over the network)."""
    return guest_sh(lab, name, f"cat {KEY_FILE}").strip()


def tokens_predicted(address: str, port: int = ENGINE_PORT, key: str = "") -> float:
    """llama-server's own count of generated tokens (its /metrics, which asks for the key like every path but
    /health)."""
    request = urllib.request.Request(f"http://{address}:{port}/metrics",
                                     headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    match = re.search(r"^llamacpp:tokens_predicted_total\s+(\S+)", text, re.MULTILINE)
    assert match, text[:2000]
    return float(match.group(1))
