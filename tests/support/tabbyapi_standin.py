"""A STAND-IN for tabbyAPI: a small git repository with tabbyAPI's paths and its two n-gram shapes.

There is no GPU and no GitHub in the test lab, so deploy and n-gram tests run against this instead of the real
theroyallab/tabbyAPI. It keeps exactly what labwright looks at, written here from scratch:

- ``backends/exllamav3/model.py`` with the ``AsyncGenerator(`` call in both upstream shapes: tag ``seed-era``
  (ends with ``num_draft_tokens=self.draft_num_tokens,``, no n-gram argument; tabbyAPI dd792e1, 2026-05-24) and
  tag ``config-era`` (passes ``ngram_match_min=self.ngram_match_min``; tabbyAPI 004e837, 2026-06-13);
- ``config_sample.yml`` whose ``draft_model`` block gains ``draft_mode`` and ``ngram_match_min`` at config-era;
- ``main.py``: a stdlib HTTP server answering ``GET /health`` and ``GET /v1/models`` that prints
  "Application startup complete" like the real one. Its config.yml may carry a ``standin:`` section
  (``max_cache_size: N``): a ``model.cache_size`` above N logs "Insufficient VRAM in split for model and cache"
  and exits 1, which is how tabbyAPI reports an out-of-memory cache, for the probe work. Like tabbyAPI it logs
  "Using n-gram drafting with minimum match length N" when n-gram drafting is on (patched call or config).

``main.py`` needs python3 only (no PyYAML), so a bare lab container can run it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

SEED_REF = "seed-era"
CONFIG_REF = "config-era"
STARTUP_LINE = "Application startup complete"
OOM_LINE = "Insufficient VRAM in split for model and cache"

_GENERATOR_HEAD = '''"""Stand-in for tabbyAPI's exllamav3 backend: only the generator construction matters here."""

from exllamav3 import AsyncGenerator


class ExllamaV3Container:
    """Holds the model; labwright patches the call below on seed-era trees."""

    async def create_generator(self):
        """Build the generator (the call's argument list is what differs between tabbyAPI eras)."""
        try:
            # Create new generator
            self.generator = AsyncGenerator(
                model=self.model,
                cache=self.cache,
                draft_model=self.draft_model,
                draft_cache=self.draft_cache,
                tokenizer=self.tokenizer,
                max_batch_size=self.max_batch_size,
                max_chunk_size=self.chunk_size,
                recurrent_cache_size=config.memory.sysmem_recurrent_cache * 1024**2,
                num_draft_tokens=self.draft_num_tokens,
'''
_GENERATOR_TAIL = '''            )
        finally:
            self.load_lock.release()
'''
SEED_MODEL_PY = _GENERATOR_HEAD + _GENERATOR_TAIL
CONFIG_MODEL_PY = _GENERATOR_HEAD + "                ngram_match_min=self.ngram_match_min,\n" + _GENERATOR_TAIL

_SAMPLE_TOP = """# Stand-in of tabbyAPI's sample configuration: copy to config.yml and edit.

network:
  # The IP to host on (default: 127.0.0.1).
  host: 127.0.0.1
  # The port to host on (default: 5000).
  port: 5000

model:
  # Directory to look for models (default: models).
  model_dir: models
  # An initial model to load.
  model_name: standin-model
  # Size of the prompt cache to allocate (default: max_seq_len); a multiple of 256.
  cache_size: 4096

# Options for draft models (speculative decoding).
draft_model:
"""
_SAMPLE_DRAFT_MODE = """  # Drafting mode (default: model). Options: model, disabled, mtp, ngram.
  draft_mode: model

"""
_SAMPLE_DRAFT = """  # Directory to look for draft models (default: models)
  draft_model_dir: models

  # An initial draft model to load.
  draft_model_name:

  # Number of tokens to draft per iteration (default: draft model default)
  draft_num_tokens:
"""
_SAMPLE_NGRAM = """
  # Minimum match length for n-gram drafting (default: 2). Only used when draft_mode is ngram.
  ngram_match_min: 2
"""
_SAMPLE_TAIL = """
# Options for sampling
sampling:
  # Select a sampler override preset (default: None).
  override_preset:
"""
SEED_CONFIG_SAMPLE = _SAMPLE_TOP + _SAMPLE_DRAFT + _SAMPLE_TAIL
CONFIG_CONFIG_SAMPLE = _SAMPLE_TOP + _SAMPLE_DRAFT_MODE + _SAMPLE_DRAFT + _SAMPLE_NGRAM + _SAMPLE_TAIL

MAIN_PY = '''"""tabbyAPI STAND-IN (labwright test double): serves /health and /v1/models, logs like tabbyAPI."""

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def read_config(path):
    """Two-level `section: / key: value` YAML, which is all the stand-in needs (no PyYAML on bare hosts)."""
    config, section = {}, None
    for raw in Path(path).read_text().splitlines() if Path(path).is_file() else []:
        line = raw.split(" #")[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(":")
        if not raw.startswith((" ", "\\t")):
            section = config.setdefault(key, {})
        elif section is not None:
            section[key] = value.strip().strip("\\"'")
    return config


def ngram_match_min(config):
    """What exllamav3 would be given: config-era reads draft_model, seed-era whatever the call hard-codes."""
    source = (Path(__file__).parent / "backends" / "exllamav3" / "model.py").read_text()
    if "ngram_match_min=self.ngram_match_min" in source:
        draft = config.get("draft_model") or {}
        return int(draft.get("ngram_match_min") or 2) if draft.get("draft_mode") == "ngram" else 0
    found = re.search(r"ngram_match_min=(\\d+)", source)
    return int(found.group(1)) if found else 0


def log(message):
    print(f"INFO:     {message}", flush=True)


def main(argv):
    path = argv[argv.index("--config") + 1] if "--config" in argv else str(Path(__file__).parent / "config.yml")
    config = read_config(path)
    network, model, standin = (config.get(k) or {} for k in ("network", "model", "standin"))
    cache_size = int(model.get("cache_size") or 4096)
    limit = standin.get("max_cache_size")
    if limit and cache_size > int(limit):
        print(f"ERROR:    {OOM_LINE} (cache_size {cache_size} > stand-in limit {limit})", file=sys.stderr, flush=True)
        return 1
    name = model.get("model_name") or "standin-model"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            bodies = {
                "/health": {"status": "healthy", "issues": []},
                "/v1/models": {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "tabbyAPI"}]},
            }
            body = bodies.get(self.path.split("?")[0])
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body or {"detail": "Not Found"}).encode())

        def log_message(self, format, *args):
            return

    server = ThreadingHTTPServer((network.get("host") or "127.0.0.1", int(network.get("port") or 5000)), Handler)
    host, port = server.server_address[:2]
    log(f"Loaded model {name} with cache_size {cache_size}")
    if ngram_match_min(config):
        log(f"Using n-gram drafting with minimum match length {ngram_match_min(config)}")
    log(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    log(STARTUP_LINE)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


OOM_LINE = "@OOM@"
STARTUP_LINE = "@STARTUP@"

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''.replace('"@OOM@"', repr(OOM_LINE)).replace('"@STARTUP@"', repr(STARTUP_LINE))

COMMON_INIT = '"""Stand-in of tabbyAPI\'s common package."""\n'
CONFIG_MODELS_SEED = '"""Stand-in config models."""\n\nDRAFT_MODEL_KEYS = ["draft_model_dir", "draft_model_name"]\n'
CONFIG_MODELS_CONFIG = CONFIG_MODELS_SEED.replace(
    '"draft_model_name"]', '"draft_model_name", "draft_mode", "ngram_match_min"]')


@dataclass(frozen=True)
class StandinRepo:
    """The stand-in's git repository and its two refs."""

    path: Path
    seed_ref: str = SEED_REF
    config_ref: str = CONFIG_REF

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()

    @property
    def http_root(self) -> Path:
        """Serve this directory over plain HTTP (``python3 -m http.server``) and ``git clone http://.../`` works:
        git's "dumb" protocol, so a container can fetch the stand-in without a git daemon."""
        return self.path / ".git"

    def bundle(self, dest: Path) -> Path:
        """One file holding every ref (``git clone BUNDLE``), for a host that cannot reach this machine."""
        _git(self.path, "bundle", "create", str(dest.resolve()), "--all")
        return dest

    def checkout(self, ref: str, dest: Path) -> Path:
        """A fresh working tree of ``ref`` at ``dest`` (a clone, as a deploy makes one)."""
        _git(dest.parent, "clone", "--quiet", str(self.path), str(dest))
        _git(dest, "checkout", "--quiet", ref)
        return dest


def _git(cwd: Path, *args: str, date: str | None = None) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    if date:
        # Fixed dates make the two commits' hashes the same on every machine.
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    identity = ["-c", "user.name=labwright stand-in", "-c", "user.email=standin@labwright.invalid",
                "-c", "init.defaultBranch=main", "-c", "advice.detachedHead=false"]
    subprocess.run(["git", *identity, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def build_standin_repo(path: Path) -> StandinRepo:
    """``git init`` at ``path`` and commit the seed-era shape, then the config-era shape, each tagged."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "--quiet")
    shared = {"main.py": MAIN_PY, "common/__init__.py": COMMON_INIT, "backends/__init__.py": "",
              "backends/exllamav3/__init__.py": "", ".gitignore": "config.yml\n"}
    eras = [
        (SEED_REF, "2026-05-24T12:00:00+00:00", {"backends/exllamav3/model.py": SEED_MODEL_PY,
                                                 "config_sample.yml": SEED_CONFIG_SAMPLE,
                                                 "common/config_models.py": CONFIG_MODELS_SEED}),
        (CONFIG_REF, "2026-06-13T12:00:00+00:00", {"backends/exllamav3/model.py": CONFIG_MODEL_PY,
                                                   "config_sample.yml": CONFIG_CONFIG_SAMPLE,
                                                   "common/config_models.py": CONFIG_MODELS_CONFIG}),
    ]
    for ref, date, files in eras:
        _write(path, {**shared, **files})
        _git(path, "add", "--all")
        _git(path, "commit", "--quiet", "-m", f"stand-in: tabbyAPI {ref} shape", date=date)
        _git(path, "tag", ref)
    _git(path, "update-server-info")  # the index files git's dumb HTTP clone reads (see StandinRepo.http_root)
    return StandinRepo(path)
