"""A stand-in vLLM for deploys/vllm.py's tests: real wheels (a ``vllm`` whose ``_C`` extension is compiled with g++
against the stand-in torch of support.wheels, and whose METADATA pins that torch exactly, as vLLM's do), a matrix
whose vllm rows take that pin from the wheel's METADATA through labwright's own reader
(labwright.matrix.registry.built_against, what ``labwright matrix refresh --package vllm`` runs), and a server that
accepts exactly the flags labwright passes.

The server is ``vllm serve MODEL [flags]`` (the console script ``vllm = vllm.entrypoints.cli.main:main``, vLLM 0.33.0
pyproject.toml line 43). Every flag it accepts is one vLLM 0.33.0 defines (PyPI sdist vllm-0.33.0.tar.gz, the v0.33.0
tag) and labwright uses (labwright.vllm.deploy_data's docstring has the lines): anything else is refused with
argparse's exit 2, as vLLM's FlexibleArgumentParser does for an unknown flag. What it serves, as vLLM 0.33.0 does:

- ``GET /health``: 200 with an empty body (vllm/entrypoints/serve/instrumentator/health.py 22-34);
- ``GET /metrics``: Prometheus text with vLLM's metric names (vllm/v1/metrics/loggers.py 528-620, 748-799:
  vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:prompt_tokens_total,
  vllm:generation_tokens_total, labelled model_name);
- ``GET /v1/models``: ``{"object": "list", "data": [ModelCard]}`` (vllm/entrypoints/serve/engine/protocol.py
  105-117: id, object "model", owned_by "vllm", root, max_model_len);
- ``POST /v1/chat/completions``: OpenAI chat completions, ``"stream": true`` as server-sent events ending
  ``data: [DONE]``;
- the key: ``VLLM_API_KEY`` (vllm/envs.py 829; middleware/register.py 32-36), checked as ``Authorization: Bearer``
  only on paths under /v1, /v2, /inference and /cohere (middleware/authenticate.py GUARDED_PREFIX), 401
  ``{"error": "Unauthorized"}`` otherwise; /health and /metrics stay open, as in vLLM.

It imports torch and ``vllm._C`` at start (a .so built against another torch fails there, as the real one would) and
prints uvicorn's ``Application startup complete.`` once it listens, and one ``standin-vllm args:`` JSON line with the
flags it was given.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from labwright.matrix.registry import built_against
from support.wheels import (
    STANDIN_EXTENSION,
    StandinTorch,
    build_standin_torch,
    compile_shared,
    ext_suffix,
    python_tag,
    write_wheel,
)

PY = python_tag()
PY_VERSION = f"{PY[2]}.{PY[3:]}"
GOOD, BROKEN = "0.33.0", "0.33.1"

#: The flags of vLLM 0.33.0 that labwright.vllm.deploy_data passes (its docstring cites each definition).
SERVER = r'''
import argparse, json, os, sys, time, http.server

# vllm/config/cache.py 44-67 (CacheDType)
KV_CACHE_DTYPES = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                   "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                   "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
                   "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6"]
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")


def parser():
    top = argparse.ArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="subcommand", required=True)
    serve = sub.add_parser("serve", usage="vllm serve [model_tag] [options]")
    serve.add_argument("model_tag", nargs="?")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+", default=None)
    serve.add_argument("--max-model-len", type=int, default=None)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    serve.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    serve.add_argument("--cpu-offload-gb", type=float, default=0)
    serve.add_argument("--cpu-offload-params", nargs="+", default=[])
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--enforce-eager", action="store_true")
    serve.add_argument("--api-key", nargs="+", default=None)
    return top


def main():
    args = parser().parse_args()
    import torch
    from vllm import _C
    _C.set_device(0)
    if not args.model_tag or not os.path.isdir(args.model_tag):
        print(f"ValueError: model {args.model_tag!r} is not a directory", flush=True)
        sys.exit(1)
    if not 0 < args.gpu_memory_utilization <= 1:
        print("ValueError: gpu_memory_utilization must be in (0, 1]", flush=True)
        sys.exit(1)
    name = (args.served_model_name or [args.model_tag])[0]
    tokens = [k for k in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if k]
    print("standin-vllm args: " + json.dumps({k: v for k, v in vars(args).items() if k != "api_key"}), flush=True)
    counts = {"prompt": 0, "generation": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def send(self, status, body, kind="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def guarded(self):
            if not self.path.startswith(GUARDED_PREFIX) or not tokens:
                return False
            scheme, _, param = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() == "bearer" and param in tokens:
                return False
            self.send(401, {"error": "Unauthorized"})
            return True

        def do_GET(self):
            if self.guarded():
                return
            if self.path == "/health":
                self.send(200, b"", "text/plain")
            elif self.path.startswith("/metrics"):
                label = '{model_name="%s"}' % name
                text = "".join(f"# TYPE {m} {t}\n{m}{label} {v}\n" for m, t, v in (
                    ("vllm:num_requests_running", "gauge", 0), ("vllm:num_requests_waiting", "gauge", 0),
                    ("vllm:kv_cache_usage_perc", "gauge", 0.0),
                    ("vllm:prompt_tokens_total", "counter", counts["prompt"]),
                    ("vllm:generation_tokens_total", "counter", counts["generation"])))
                self.send(200, text.encode(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "vllm",
                                                            "root": args.model_tag,
                                                            "max_model_len": args.max_model_len or 4096}]})
            else:
                self.send(404, {"detail": "Not Found"})

        def do_POST(self):
            if self.guarded():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self.send(400, {"error": {"message": "invalid JSON"}})
            if self.path != "/v1/chat/completions":
                return self.send(404, {"detail": "Not Found"})
            if body.get("model") != name:
                return self.send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
            words = ["stand", "-in", " v", "LL", "M", " says", " hello"][: int(body.get("max_tokens") or 7)]
            counts["prompt"] += sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
            counts["generation"] += len(words)
            created = int(time.time())
            if not body.get("stream"):
                return self.send(200, {"id": "chatcmpl-standin", "object": "chat.completion", "created": created,
                                       "model": name, "choices": [{"index": 0, "finish_reason": "length",
                                       "message": {"role": "assistant", "content": "".join(words)}}],
                                       "usage": {"prompt_tokens": 1, "completion_tokens": len(words),
                                                 "total_tokens": 1 + len(words)}})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def event(obj):
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            for index, word in enumerate(words):
                event({"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": created,
                       "model": name, "choices": [{"index": 0, "delta": ({"role": "assistant"} if index == 0 else {})
                                                   | {"content": word}, "finish_reason": None}]})
            event({"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": created, "model": name,
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")

    server = http.server.ThreadingHTTPServer((args.host or "0.0.0.0", args.port), Handler)
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
'''


@dataclass
class VllmStandin:
    wheelhouse: Path
    matrix_dir: Path
    torches: dict[str, StandinTorch] = field(default_factory=dict)

    def wheel(self, prefix: str) -> Path:
        return next(p for p in sorted(self.wheelhouse.glob("*.whl")) if p.name.startswith(prefix))


def build_vllm(wheelhouse: Path, workdir: Path, built_with: StandinTorch, version: str, pins_torch: str) -> Path:
    """A ``vllm`` wheel: ``vllm._C`` compiled against ``built_with``, METADATA ``Requires-Dist: torch==pins_torch``
    (a lie when the two differ: the ABI-broken combination), the server, and the ``vllm`` console script."""
    build = workdir / f"vllm-{version}"
    extension = compile_shared(
        build / f"_C{ext_suffix()}", STANDIN_EXTENSION,
        include_dirs=[built_with.include_dir, Path(sysconfig.get_paths()["include"])],
        library_dirs=[built_with.lib_dir], libraries=["c10"], rpath="$ORIGIN/../torch/lib")
    files: dict[str, bytes | Path] = {
        "vllm/__init__.py": b"import torch  # noqa: F401  (loads libc10 first, as the real extension needs)\n",
        f"vllm/_C{ext_suffix()}": extension,
        "vllm/entrypoints/__init__.py": b"",
        "vllm/entrypoints/cli/__init__.py": b"",
        "vllm/entrypoints/cli/main.py": SERVER.encode(),
        f"vllm-{version}.dist-info/entry_points.txt": b"[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n",
    }
    return write_wheel(wheelhouse, "vllm", version, files, requires=[f"torch=={pins_torch}"])


def metadata_of(wheel: Path) -> str:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode()


COMPONENTS = """\
[components.torch]
display = "torch"
packages = ["torch"]

[components.vllm]
display = "vLLM"
packages = ["vllm"]

[engines.vllm]
components = ["torch", "vllm"]
required = ["torch", "vllm"]
engine_component = "vllm"
requires_python = ">=3.10"
"""

#: name -> (torch, pins): good; broken ABI (the wheel says torch 2.10, its .so was built against 2.9); a torch its
#: METADATA pin refuses (resolved away before anything is installed).
STACKS = {
    "vllm-standin": ("2.9.0", [f"vllm=={GOOD}"]),
    "vllm-standin-broken": ("2.10.0", [f"vllm=={BROKEN}"]),
    "vllm-standin-other-torch": ("2.10.0", [f"vllm=={GOOD}"]),
}


def build_vllm_standin(workdir: Path) -> VllmStandin:
    """Wheelhouse + matrix in ``workdir``: torch 2.9.0 / 2.10.0 stand-ins, vllm 0.33.0 (built for 2.9.0, pins it) and
    0.33.1 (built against 2.9.0's headers, pins 2.10.0)."""
    wheelhouse, build = workdir / "wheelhouse", workdir / "build"
    torches = {v: build_standin_torch(wheelhouse, build, v, api) for v, api in (("2.9.0", 1), ("2.10.0", 2))}
    build_vllm(wheelhouse, build, torches["2.9.0"], GOOD, "2.9.0")
    build_vllm(wheelhouse, build, torches["2.9.0"], BROKEN, "2.10.0")
    standin = VllmStandin(wheelhouse, workdir / "wheels_matrix", torches)
    write_matrix(standin)
    return standin


def write_matrix(standin: VllmStandin) -> None:
    rows = []
    base = standin.wheelhouse.resolve().as_uri()
    for wheel in sorted(standin.wheelhouse.glob("*.whl")):
        package, version = wheel.name.split("-")[:2]
        fields = [f'package = "{package}"', f'version = "{version}"', f'python = "{PY}"', f'abi = "{PY}"',
                  'platform = "linux_x86_64"', f'url = "{base}/{urllib.parse.quote(wheel.name)}"',
                  f'sha256 = "{hashlib.sha256(wheel.read_bytes()).hexdigest()}"', 'source = "support.vllm_standin"',
                  'cxx11_abi = ""']
        if package == "torch":
            fields += ['torch = ""', 'cuda = "12.8"']
        else:
            # what labwright's registry refresh reads from a vllm wheel: its METADATA's torch== pin
            pin = built_against(metadata_of(wheel))["torch"]
            fields += [f'torch = "{".".join(pin.split(".")[:2])}"', f'torch_build = "{pin}"',
                       f'requires_torch = "=={pin}"', 'cuda = ""']
        rows.append("  { " + ", ".join(fields) + " },")
    matrix = standin.matrix_dir
    matrix.mkdir(parents=True, exist_ok=True)
    (matrix / "components.toml").write_text(COMPONENTS)
    (matrix / "vllm_standin.toml").write_text("wheels = [\n" + "\n".join(rows) + "\n]\n")
    blocks = [f'[stacks."{name}"]\ndescription = "stand-in stack {name}"\ntorch = "{torch}"\ncuda = "12.8"\n'
              f'python = "{PY_VERSION}"\nengine = "vllm"\npins = {json.dumps(pins)}\n'
              for name, (torch, pins) in STACKS.items()]
    (matrix / "stacks.toml").write_text("\n".join(blocks))
