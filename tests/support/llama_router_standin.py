"""A stand-in for llama-server in router mode, as far as labwright's GPU textfile script asks it: ``GET /models``
and ``GET /slots?model=NAME&autoload=false``, behind the key.

Derived from the pinned llama.cpp (llama-cpp-python 0.3.36's vendor/llama.cpp/tools/server): server-models.cpp
``get_router_models`` (lines 2021-2075: ``{"data": [{"id": NAME, "status": {"value": "loaded" | "unloaded" | ...},
...}], "object": "list"}``), ``proxy_get`` (lines 1958-1969: a GET carries ``?model=``; ``autoload=false`` does not
load it) and ``router_validate_model`` (lines 1859-1875: 400 ``model is not loaded``, 400 ``model name is missing
from the request``); a loaded model's /slots is its instance's own (server-context.cpp's slot JSON: ``id_task``,
``n_prompt_tokens``, ``is_processing``, ``next_token``). A request without the key is 401 before any routing.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def router_standin(key: str, models: dict[str, str], slots: dict[str, list[dict]]) -> Iterator[tuple[str, list]]:
    """Serve on 127.0.0.1 at a free port; ``models``: name -> status value, ``slots``: a loaded model's /slots.
    Yields the base URL and the list of request paths it answered (to show what was asked, and what was not)."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def answer(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            asked.append(self.path)
            if self.headers.get("Authorization") != f"Bearer {key}":
                return self.answer(401, {"error": {"code": 401, "message": "Invalid API Key"}})
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/models":
                return self.answer(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "status": {"value": value}} for name, value in models.items()]})
            if url.path == "/slots":
                name = query.get("model", "")
                if not name:
                    return self.answer(400, {"error": {"message": "model name is missing from the request"}})
                if name not in models:
                    return self.answer(400, {"error": {"message": f"model '{name}' not found"}})
                if models[name] != "loaded":
                    if query.get("autoload") == "false":
                        return self.answer(400, {"error": {"message": "model is not loaded"}})
                    models[name] = "loaded"  # what autoload would do: the script must never cause this
                return self.answer(200, slots.get(name, []))
            return self.answer(404, {"error": {"message": "File Not Found"}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
