'''A git repository with the layout of github:open-webui/pipelines that deploys/openwebui.py expects, served to lab
guests by ``git daemon`` on the lab bridge (guests cannot reach GitHub here).

The deploy checks out ``openwebui_pipelines_ref``, installs ``requirements-minimum.txt`` into ``DIR/.venv`` and starts
``uvicorn main:app --host 127.0.0.1 --port PORT --forwarded-allow-ips '*'`` in DIR, as upstream's start.sh does
(open-webui/pipelines at 26b8f20b4747e44d900599960056f2299a9d508c, start.sh line 155). The stand-in keeps, from
that commit:

- ``requirements-minimum.txt`` verbatim (its wheels: ~/.cache/labwright/test-envs/openwebui-pipelines-wheels);
- ``config.py``'s ``API_KEY = os.getenv("PIPELINES_API_KEY", "0p3n-w3bu!")`` (config.py line 24), so a unit that did
  not pass the generated key would serve the public default, which the test would catch;
- ``utils/pipelines/auth.py``'s ``get_current_user`` (lines 66-77: HTTPBearer, 401 "Invalid API key" for another key);
- ``main.py``'s ``GET /models`` and ``/v1/models`` (lines 285-322, the same response shape, one "pipe" pipeline) and
  ``GET /`` and ``/v1`` (lines 324-327, ``{"status": true}``), behind the same dependency.

The pipelines themselves (loading ``./pipelines/*.py``, valves, ``/chat/completions``) are left out.
'''

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PIPELINE_ID = "labwright_echo"

# requirements-minimum.txt at 26b8f20, verbatim.
REQUIREMENTS = """\
fastapi==0.111.0
uvicorn[standard]==0.22.0
pydantic==2.7.1
python-multipart==0.0.9
python-socketio
grpcio

passlib==1.7.4
passlib[bcrypt]
PyJWT[crypto]

requests==2.32.2
aiohttp==3.9.5
httpx
"""

CONFIG = '''\
import os

# open-webui/pipelines config.py at 26b8f20, line 24: the published default when the variable is not set.
API_KEY = os.getenv("PIPELINES_API_KEY", "0p3n-w3bu!")
PIPELINES_DIR = os.getenv("PIPELINES_DIR", "./pipelines")
'''

MAIN = '''\
"""Stand-in for open-webui/pipelines main.py at 26b8f20: its model list and status routes, its key check."""

import time
from typing import Optional

from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from config import API_KEY

bearer_security = HTTPBearer()


def get_current_user(credentials: HTTPAuthorizationCredentials = Depends(bearer_security)) -> Optional[str]:
    # utils/pipelines/auth.py lines 66-77
    token = credentials.credentials
    if token != API_KEY:
        raise HTTPException(status_code=status.HTTP_401_UNAUTHORIZED, detail="Invalid API key")
    return token


PIPELINES = {"@ID@": {"id": "@ID@", "name": "Labwright Echo", "type": "pipe", "valves": None}}

app = FastAPI(docs_url="/docs", redoc_url=None)


@app.get("/v1/models")
@app.get("/models")
async def get_models(user: str = Depends(get_current_user)):
    return {
        "data": [
            {
                "id": pipeline["id"],
                "name": pipeline["name"],
                "object": "model",
                "created": int(time.time()),
                "owned_by": "openai",
                "pipeline": {"type": pipeline["type"], "valves": pipeline["valves"] is not None},
            }
            for pipeline in PIPELINES.values()
        ],
        "object": "list",
        "pipelines": True,
    }


@app.get("/v1")
@app.get("/")
async def get_status():
    return {"status": True}
'''.replace("@ID@", PIPELINE_ID)


def git(*args: str, cwd: Path) -> str:
    result = subprocess.run(["git", "-c", "user.name=labwright test", "-c", "user.email=test@labwright.invalid",
                             "-c", "init.defaultBranch=main", *args], cwd=cwd, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def write_repository(directory: Path) -> str:
    """The stand-in tree as one commit in ``directory`` (a new git repository); returns the commit's full id."""
    directory.mkdir(parents=True)
    git("init", "-q", cwd=directory)
    (directory / "requirements-minimum.txt").write_text(REQUIREMENTS)
    (directory / "config.py").write_text(CONFIG)
    (directory / "main.py").write_text(MAIN)
    (directory / "pipelines").mkdir()
    (directory / "pipelines" / ".gitkeep").write_text("")
    git("add", "-A", cwd=directory)
    git("commit", "-q", "-m", "pipelines stand-in", cwd=directory)
    # The deploy fetches one commit by id (git fetch --depth 1 URL COMMIT).
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=directory)
    return git("rev-parse", "HEAD", cwd=directory)


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@contextmanager
def git_daemon(base: Path, address: str, name: str, timeout: float = 60) -> Iterator[str]:
    """``git daemon`` serving the repositories under ``base`` on ``address``; yields ``git://ADDRESS:PORT/NAME``
    once ``git ls-remote`` reads it."""
    port = free_port(address)
    process = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
                                f"--base-path={base}", f"--listen={address}", f"--port={port}", str(base)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"git://{address}:{port}/{name}"
    try:
        deadline = time.monotonic() + timeout
        while subprocess.run(["git", "ls-remote", url], capture_output=True, timeout=30).returncode != 0:
            assert process.poll() is None, f"git daemon exited: {process.stderr.read() if process.stderr else ''}"
            assert time.monotonic() < deadline, f"git daemon did not serve {url} within {timeout}s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
