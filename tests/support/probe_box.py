"""A lab container for the context-ceiling probe's tests and benchmark: a memory limit, the REAL llama-server.

``llama_box`` copies the test lab's template, sets ``limits.memory`` (512 MiB: large contexts are killed by the
OOM killer for real), pushes a tiny GGUF written here and deploys llama-server with deploys/llamacpp.py, as a
user would (8,192 context, the seed's q4_0 cache). It also writes the tiny model's shape as a Hugging Face
config.json, which is what the KV planner reads. Measured: ~25 s on a warm machine (the binary build is cached).
"""

from __future__ import annotations

import json
from pathlib import Path

from labwright.errors import OperationFailed
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import run_pyinfra
from support import guest_apt

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
MEMORY = "512MiB"
UNIT_PATH = "/etc/systemd/system/llama-server.service"  # as deploys/llamacpp.py writes it


def tiny_config(path: Path, model: TinyModel = TinyModel()) -> Path:
    """The tiny GGUF's shape as a config.json for the planner (4 layers x 4 KV heads x 64 = 4,096 B/token f16)."""
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": model.layers,
                                "num_attention_heads": model.heads, "num_key_value_heads": model.kv_heads,
                                "hidden_size": model.embedding, "max_position_embeddings": model.context_length}))
    return path


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    if result.exit_code != 0:
        raise OperationFailed(f"{script!r} in {name} failed: {result.stderr.decode(errors='replace')[-500:]}")
    return result.stdout.decode()


def llama_box(lab: Lab, workdir: Path, prefix: str = "lwprobe", memory: str = MEMORY) -> tuple[str, Path]:
    """A fresh container with llama-server deployed under a memory limit; returns (name, tiny config.json).

    The caller removes the container (``lab.remove(name)``); when this raises, it is already removed.
    """
    build_llama_server()
    model = write_tiny_gguf(workdir / "tiny.gguf")
    name = lab.fresh(prefix)
    try:
        _prepare(lab, name, model, memory)
    except BaseException:
        lab.remove(name)
        raise
    return name, tiny_config(workdir / "config.json")


def _prepare(lab: Lab, name: str, model: Path, memory: str = MEMORY) -> None:
    lab.client.request("PATCH", f"/1.0/instances/{name}", {"config": {"limits.memory": memory}})
    sh(lab, name, "mkdir -p /srv/models")
    with model.open("rb") as handle:
        lab.client.push_file(name, MODEL, handle, mode=0o644)
    install = guest_apt.command("update -qq") + " && " + guest_apt.command("install -y -qq libgomp1")
    sh(lab, name, "dpkg-query -W libgomp1 >/dev/null 2>&1 || { " + install + "; }")
    run = run_pyinfra(f"@lxd/{name}", "deploys/llamacpp.py", f"llamacpp_model={MODEL}", "llamacpp_ctx_size=8192",
                      cwd=REPO, timeout=900)
    if run.rc != 0:
        raise OperationFailed(f"deploying llama-server into {name} failed:\n{run.output[-3000:]}")
