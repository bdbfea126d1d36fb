"""Stand-in engine stacks for stack-switch tests and the downtime benchmark: real wheels, a matrix naming them, a
service that serves /health only when its torch extension imports.

``build_standin_stacks`` compiles (with g++, via support.wheels) stand-in torch 2.9 / 2.10 / 2.11 and
``standin-attn`` builds for them into one wheelhouse, and writes a wheels_matrix directory (point
``LABWRIGHT_MATRIX_DIR`` at it) with these stacks:

- ``standin-2.9`` / ``standin-2.10``: torch + the extension built for it (good);
- ``standin-2.10-mislabelled``: torch 2.10 + ``standin-attn 1.0.1+torch2.10``, whose .so was really compiled
  against 2.9: the label lies, the verifier must catch it (refused before the swap);
- ``standin-2.11``: torch 2.11 and no extension wheel for it (resolved as absent, like causal-conv1d for torch
  2.11 in the seed): it installs and verifies fine, but the service cannot import the extension, so its
  health check fails after the swap (automatic rollback);
- ``standin-badsha``: an extension row whose recorded sha256 is not the file's;
- ``standin-404``: an extension row whose file is not in the wheelhouse (its URL answers 404).
"""

from __future__ import annotations

import fcntl
import hashlib
import random
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from support.wheels import build_standin_extension, build_standin_torch, python_tag, test_env_root, write_wheel

PY = python_tag()  # cp311: the stand-in wheels are compiled for this interpreter
PY_VERSION = f"{PY[2]}.{PY[3:]}"
SERVICE_PORT = 8765

COMPONENTS = """\
[components.torch]
display = "torch"
packages = ["torch"]

[components.standin_attn]
display = "standin-attn"
packages = ["standin-attn"]
fallback = "the stand-in server cannot answer /health without it"

[engines.standin]
components = ["torch", "standin_attn"]
required = ["torch"]
engine_component = ""
requires_python = ">=3.10"
"""

STACKS = {
    "standin-2.9": ("2.9.0", ["standin-attn==1.0.0"]),
    "standin-2.10": ("2.10.0", ["standin-attn==1.0.0"]),
    "standin-2.10-mislabelled": ("2.10.0", ["standin-attn==1.0.1"]),
    "standin-2.11": ("2.11.0", []),
    "standin-badsha": ("2.9.0", ["standin-attn==1.0.2"]),
    "standin-404": ("2.9.0", ["standin-attn==1.0.3"]),
}

# The service: imports the stand-in torch and extension at start; /health is 200 only when that worked.
SERVER = '''\
import http.server, json, sys
try:
    import torch
    import standin_attn
    standin_attn._C.set_device(1)
    STATUS, BODY = 200, {"torch": torch.__version__, "prefix": sys.prefix}
except Exception as exc:
    STATUS, BODY = 503, {"error": f"{type(exc).__name__}: {exc}"}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps(BODY).encode()
        self.send_response(STATUS if self.path.startswith("/health") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
'''

UNIT = """\
[Unit]
Description=labwright stand-in engine (stack switch tests)

[Service]
ExecStart={venv}/bin/python {server} {port}
Restart=no
"""


@dataclass
class StandinStacks:
    wheelhouse: Path
    matrix_dir: Path
    sha256: dict[str, str] = field(default_factory=dict)  # file name -> sha256

    def wheel(self, prefix: str) -> Path:
        return next(p for p in sorted(self.wheelhouse.glob("*.whl")) if p.name.startswith(prefix))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pad_wheel(wheel: Path, megabytes: int, files: int = 12_000, seed: int = 0) -> None:
    """Rewrite ``wheel`` with ``megabytes`` of incompressible data in ``files`` files, so installing it costs what
    installing a real torch does: torch 2.9.0+cu128's cp312 wheel is ~900 MB, and torch 2.13.0's CPU wheel holds
    12,248 files, most bytes in a few libraries and thousands of small headers. So here: 90% in 8 big files under
    torch/lib, the rest spread over the others under torch/include. None is ELF: the verifier ignores them."""
    with zipfile.ZipFile(wheel) as archive:
        content: dict[str, bytes | Path] = {n: archive.read(n) for n in archive.namelist() if ".dist-info/" not in n}
    rng = random.Random(seed)
    total = megabytes << 20
    big = min(8, files)
    big_bytes = total * 9 // 10 if files > big else total
    for index in range(big):
        content[f"torch/lib/_standin_pad_{index}.bin"] = rng.randbytes(big_bytes // big)
    small = files - big
    for index in range(small):
        content[f"torch/include/_standin_pad/{index // 500:03d}/{index:05d}.h"] = \
            rng.randbytes((total - big_bytes) // small)
    name, version = wheel.name.split("-")[:2]
    wheel.unlink()
    write_wheel(wheel.parent, name, version, content)


def build_standin_stacks(workdir: Path, base_url: str | None = None, torch_pad_mb: int = 0,
                         pad_versions: tuple[str, ...] = ("2.9.0", "2.10.0", "2.11.0")) -> StandinStacks:
    """Wheelhouse + matrix in ``workdir`` (see the module docstring). ``base_url``: where the matrix says the
    files are (an http server over the wheelhouse); default a file:// URL of the wheelhouse itself.
    ``torch_pad_mb``: make the torch wheels of ``pad_versions`` that big (see pad_wheel).

    The wheels are compiled once per machine and kept by content (``built_wheels``) and copied in here."""
    wheelhouse = workdir / "wheelhouse"
    if wheelhouse.exists():
        shutil.rmtree(wheelhouse)
    shutil.copytree(built_wheels(), wheelhouse)
    if torch_pad_mb:
        for version in pad_versions:
            pad_wheel(next(wheelhouse.glob(f"torch-{version}-*.whl")), torch_pad_mb)
    sha = {p.name: sha256_file(p) for p in wheelhouse.glob("*.whl")}
    next(wheelhouse.glob(f"standin_attn-{MISSING}-*.whl")).unlink()  # its row stays in the matrix: a URL that 404s
    stacks = StandinStacks(wheelhouse=wheelhouse, matrix_dir=workdir / "wheels_matrix", sha256=sha)
    write_matrix(stacks, base_url or wheelhouse.resolve().as_uri())
    return stacks


#: The extension build whose file is deleted from the wheelhouse after hashing (``standin-404``).
MISSING = "1.0.3+torch2.9"


def _build_wheels(wheelhouse: Path, build: Path) -> None:
    torches = {v: build_standin_torch(wheelhouse, build, v, api) for v, api in
               (("2.9.0", 1), ("2.10.0", 2), ("2.11.0", 2))}
    build_standin_extension(wheelhouse, build, torches["2.9.0"], version="1.0.0+torch2.9")
    build_standin_extension(wheelhouse, build, torches["2.10.0"], version="1.0.0+torch2.10")
    # The lie: labelled for torch 2.10, compiled against 2.9's headers and libc10.so.
    build_standin_extension(wheelhouse, build, torches["2.9.0"], version="1.0.1+torch2.10")
    build_standin_extension(wheelhouse, build, torches["2.9.0"], version="1.0.2+torch2.9")
    build_standin_extension(wheelhouse, build, torches["2.9.0"], version=MISSING)


def built_wheels() -> Path:
    """The stand-in wheels (every one ``build_standin_stacks`` needs, ``MISSING``'s too), compiled with g++ once per
    machine and kept under the test environments (support.wheels.test_env_root), by content: the sources of this
    module and support.wheels, the Python and g++'s version. Eight compiles were ~2.7 s of CPU (18 s of wall at load
    20) for every module that built a wheelhouse. One builder at a time (a file lock); a half-built one is never
    taken (built beside, renamed into place)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for source in (here / "stacks.py", here / "wheels.py"):
        digest.update(source.read_bytes())
    digest.update(sys.version.encode())
    digest.update(subprocess.run(["g++", "--version"], capture_output=True, check=True).stdout)
    root = test_env_root() / "standin-wheels"
    root.mkdir(parents=True, exist_ok=True)
    done = root / digest.hexdigest()[:16]
    with (root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            with tempfile.TemporaryDirectory(dir=root, prefix=".building-") as tmp:
                _build_wheels(Path(tmp) / "wheelhouse", Path(tmp) / "build")
                (Path(tmp) / "wheelhouse").rename(done)
    return done


def write_matrix(stacks: StandinStacks, base_url: str) -> None:
    """The matrix rows for every wheel built (the 404 one included: its file was deleted after hashing)."""
    rows = []
    for filename, sha in sorted(stacks.sha256.items()):
        package, version = filename.split("-")[:2]
        package = package.replace("_", "-")
        built_for = version.partition("+torch")[2] if package != "torch" else ""
        if filename.startswith("standin_attn-1.0.2"):
            sha = hashlib.sha256(b"not the file").hexdigest()  # the recorded hash that does not match
        url = f"{base_url.rstrip('/')}/{urllib.parse.quote(filename)}"
        fields = [f'package = "{package}"', f'version = "{version}"', f'python = "{PY}"', f'abi = "{PY}"',
                  'platform = "linux_x86_64"', f'torch = "{built_for}"', f'cuda = "{"" if built_for else "12.8"}"',
                  'cxx11_abi = ""', f'url = "{url}"', 'source = "support.stacks"']
        if sha:
            fields.append(f'sha256 = "{sha}"')
        rows.append("  { " + ", ".join(fields) + " },")
    matrix = stacks.matrix_dir
    matrix.mkdir(parents=True, exist_ok=True)
    (matrix / "components.toml").write_text(COMPONENTS)
    (matrix / "standin.toml").write_text("wheels = [\n" + "\n".join(rows) + "\n]\n")
    blocks = []
    for name, (torch, pins) in STACKS.items():
        pinned = ", ".join(f'"{p}"' for p in pins)
        blocks.append(f'[stacks."{name}"]\ndescription = "stand-in stack {name}"\ntorch = "{torch}"\n'
                      f'cuda = "12.8"\npython = "{PY_VERSION}"\nengine = "standin"\npins = [{pinned}]\n')
    (matrix / "stacks.toml").write_text("\n".join(blocks))
