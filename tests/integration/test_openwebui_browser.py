"""deploys/openwebui.py for real, checked in a REAL browser: Open WebUI 0.12.4 from PyPI in a lab container beside the
REAL llama-server on a tiny generated GGUF; Debian's Chromium, headless, driven by Playwright, signs in with the
generated admin credentials, sends a chat message and sees the streamed answer.

open-webui's ~240 wheels (0.7 GB with the CPU torch) are built once into a wheelhouse under
~/.cache/labwright/test-envs/openwebui-wheels/ (labwright.openwebui.wheelhouse) and served to the guest over the
lab bridge by an HTTP server on this machine: the deploy's ``openwebui_find_links`` URL path, the one an air-gapped
user takes (lab containers cannot verify PyPI's certificate here). The guest is a copy of a cached lab container
(support.openwebui_cache, keyed by the locks and the lab image) whose venvs already hold the dependencies of
open-webui and litellm, installed by the same pip from the same wheelhouses and locks: the deploy's install step
still runs pip on the whole lock and installs open-webui itself (about 85 s of the guest's CPU less per run).
Open WebUI first talks to the engine directly (no LiteLLM gateway on this host: openwebui_backend=auto picks the
inventory's engines); the last test deploys the LiteLLM gateway on the same guest and checks that Open WebUI
switches to it. The engine stops each answer after 64 tokens (--n-predict): the tiny model never emits an
end-of-generation token.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from labwright.digest import sha256_file
from labwright.lab.lab import instance_address
from labwright.litellm.config import load_defaults as litellm_defaults
from labwright.litellm.wheelhouse import wheelhouse as litellm_wheelhouse
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.openwebui.config import SIGNIN_CHECK, load_defaults
from labwright.openwebui.wheelhouse import wheelhouse
from labwright.paths import cache_root, package_dir
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra, tool_env
from labwright.wheelhouse import download_wheelhouse
from support.openwebui_cache import Venv, clone, ensure_cache
from support.pipelines_standin import PIPELINE_ID, REQUIREMENTS, git_daemon, write_repository
from support.tiny_engine import (
    ENGINE_PORT,
    MODEL,
    REPO,
    deploy_tiny_engines,
    engine_key,
    guest_python,
    guest_sh,
    tokens_predicted,
)

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

ALIAS = "tiny"
N_PREDICT = 64
PORT = 8080
CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 800
VERSION = str(load_defaults()["service"]["version"])
PIPELINES_PORT = int(load_defaults()["service"]["pipelines_port"])
# The pipelines server's requirements-minimum.txt (open-webui/pipelines at the pinned commit) as wheels for 3.11.2:
#   pip download --only-binary=:all: --python-version 3.11.2 --platform manylinux2014_x86_64 -d DIR -r FILE
PIPELINES_WHEELS = cache_root() / "test-envs" / "openwebui-pipelines-wheels"
# Run on the guest as root: GET a pipelines URL with the key from pipelines.env ("file"), the public default
# ("default") or no key ("none"); prints the status and the model ids, never the key.
PIPELINES_GET = r"""
import json, sys, urllib.error, urllib.request
url, which = sys.argv[1], sys.argv[2]
headers = {}
if which == "file":
    for line in open("/etc/open-webui/pipelines.env"):
        if line.startswith("PIPELINES_API_KEY="):
            headers["Authorization"] = "Bearer " + line.split("=", 1)[1].strip()
elif which == "default":
    headers["Authorization"] = "Bearer 0p3n-w3bu!"
try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        print(json.dumps([r.status, [m["id"] for m in json.load(r).get("data", [])]]))
except urllib.error.HTTPError as error:
    print(json.dumps([error.code, []]))
"""
INVENTORY = """\
lab = [
    ("@lxd/{name}", {{"llamacpp_model": "{model}", "llamacpp_alias": "{alias}", "llamacpp_ctx_size": 4096,
                     "llamacpp_extra_args": ["--n-predict", "{n_predict}"]}}),
]
"""


@dataclass
class Webui:
    lab: Lab
    name: str
    address: str
    inventory: Path
    wheels_url: str
    deploy_started: float = 0.0
    before: subprocess.CompletedProcess[str] | None = None
    first: DeployRun | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def sh(self, script: str) -> str:
        return guest_sh(self.lab, self.name, script)

    def deploy(self, *data: str) -> DeployRun:
        # The wheelhouses are served over plain http on the lab bridge: trusted by name (docs/security.md).
        return run_pyinfra(str(self.inventory), "deploys/openwebui.py", f"openwebui_find_links={self.wheels_url}",
                           f"pip_trusted_host={urlsplit(self.wheels_url).hostname}", *data, cwd=REPO, timeout=1500)

    def verify(self) -> subprocess.CompletedProcess[str]:
        suite = package_dir("labwright.verify") / "test_openwebui.py"
        cmd = [sys.executable, "-m", "pytest", str(suite), f"--hosts=lxc://{self.name}", "-q", "-p",
               "no:cacheprovider"]
        return subprocess.run(cmd, cwd=REPO, env={**tool_env(), "LABWRIGHT_OPENWEBUI_MODELS": ALIAS},
                              capture_output=True, text=True, timeout=300)

    def env_value(self, file: str, variable: str) -> str:
        text = self.sh(f"cat /etc/open-webui/{file}")
        match = re.search(rf"^{variable}=(.*)$", text, re.MULTILINE)
        assert match, f"no {variable} in /etc/open-webui/{file}"
        return match.group(1).strip().strip('"')

    def predicted(self) -> float:
        return tokens_predicted(self.address, ENGINE_PORT, engine_key(self.lab, self.name))


#: The stand-in for PyTorch's CPU wheel page (https://download.pytorch.org/whl/cpu/torch/, unreachable here): the
#: CPU torch wheel an earlier wheelhouse build kept, listed with its sha256 as that page lists it (PEP 503
#: ``#sha256=``), so the lock pins it by a published hash (labwright.locks.find_links_hashes) and the download is
#: checked against it. Without the wheel the page is empty and pip takes PyPI's torch (CUDA, several GB).
TORCH_CPU = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_PAGE = cache_root() / "test-envs" / "torch-cpu-page"


def torch_cpu_page() -> Path:
    TORCH_PAGE.mkdir(parents=True, exist_ok=True)
    wheel = TORCH_PAGE / TORCH_CPU
    if not wheel.is_file():
        for kept in sorted((cache_root() / "test-envs" / "openwebui-wheels").glob(f"*/{TORCH_CPU}")):
            shutil.copy2(kept, wheel.with_suffix(".part"))
            wheel.with_suffix(".part").rename(wheel)
            break
    index = TORCH_PAGE / "index.html"
    if wheel.is_file() and not index.is_file():
        href = TORCH_CPU.replace("+", "%2B")
        index.write_text(f'<html><body><a href="{href}#sha256={sha256_file(wheel)}">{TORCH_CPU}</a></body></html>\n')
    return TORCH_PAGE


def serve(directory: Path, address: str) -> tuple[ThreadingHTTPServer, str]:
    """The wheelhouse as a plain directory listing (what pip's --find-links reads) on the lab bridge."""
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{address}:{server.server_address[1]}/"


@pytest.fixture(scope="module")
def webui(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webui]:
    binary = build_llama_server()
    assert binary.is_file()
    model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
    probe = lab.fresh("lwowuipy")  # the guest's Python, which the wheelhouse (and so the cache) is made for
    name = ""
    server = torch_server = gateway_server = None
    try:
        started = time.monotonic()
        python = guest_python(lab, probe)
        lab.remove(probe)
        torch_server, torch_url = serve(torch_cpu_page(), "127.0.0.1")
        wheels = wheelhouse(VERSION, python, root=cache_root() / "test-envs" / "openwebui-wheels",
                            torch_find_links=torch_url)
        whl = list(wheels.glob("*.whl"))
        print(f"\nwheelhouse ready in {time.monotonic() - started:.1f}s: {wheels} ({len(whl)} wheels, "
              f"{sum(w.stat().st_size for w in whl) / 1e9:.2f} GB)")
        server, url = serve(wheels, str(lab.spec.subnet.ip))
        started = time.monotonic()
        # The last test deploys the LiteLLM gateway beside Open WebUI: its venv's dependencies are in the cache too.
        gateway_wheels = litellm_wheelhouse(str(litellm_defaults()["service"]["version"]), python)
        gateway_server, gateway_url = serve(gateway_wheels, str(lab.spec.subnet.ip))
        cache, built = ensure_cache(lab, [
            Venv(wheels, url, str(load_defaults()["service"]["venv"]), "open-webui"),
            Venv(gateway_wheels, gateway_url, str(litellm_defaults()["service"]["venv"]), "litellm")])
        name = clone(lab, cache, "lwowui")
        assert guest_python(lab, name) == python
        print(f"Open WebUI cache {cache} {'built' if built else 'reused'}, guest {name} cloned from it in "
              f"{time.monotonic() - started:.1f}s")
        inventory = tmp_path_factory.mktemp("inventory") / "lab.py"
        inventory.write_text(INVENTORY.format(name=name, model=MODEL, alias=ALIAS, n_predict=N_PREDICT))
        deploy_tiny_engines(lab, [name], model, inventory)
        state = Webui(lab, name, instance_address(lab.client, name) or "", inventory, url)
        state.before = state.verify()
        state.deploy_started = time.monotonic()
        state.first = state.deploy()
        state.timings["deploy"] = time.monotonic() - state.deploy_started
        assert state.first.rc == 0, state.first.output[-6000:]
        yield state
    finally:
        for running in (server, torch_server, gateway_server):
            if running is not None:
                running.shutdown()
                running.server_close()
        lab.remove(probe)
        if name:
            lab.remove(name)


def test_verify_fails_before_and_passes_after_the_deploy(webui: Webui) -> None:
    assert webui.before is not None and webui.first is not None
    assert webui.before.returncode == 1, webui.before.stdout[-3000:]
    assert "test_unit_enabled_and_active" in webui.before.stdout
    assert webui.first.totals.changed > 0 and webui.first.totals.error == 0
    # The install step ran pip on the whole lock from the wheelhouse: open-webui itself was not in the cached guest.
    assert len(webui.first.operation(f"Install open-webui=={VERSION} in").success) == 1, webui.first.output[-3000:]
    assert len(webui.first.operation("the admin signs in and sees the models").success) == 1, \
        webui.first.output[-3000:]
    print(f"\nfirst deploy: {webui.first.seconds:.1f}s, {webui.first.totals.changed} changed")
    result = webui.verify()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_secrets_are_made_on_the_guest_and_never_printed(webui: Webui) -> None:
    assert webui.first is not None
    secret = webui.env_value("secret.env", "WEBUI_SECRET_KEY")
    password = webui.env_value("admin.env", "WEBUI_ADMIN_PASSWORD")
    assert len(secret) >= 48 and len(password) >= 20
    for value in (secret, password):
        assert value not in webui.first.output
        assert value not in webui.sh("cat /etc/open-webui/settings.env /etc/systemd/system/open-webui.service")
    modes = webui.sh("stat -c '%n %a %U' /etc/open-webui/secret.env /etc/open-webui/admin.env "
                     "/etc/open-webui/openai.env")
    assert [line.split()[1:] for line in modes.splitlines()] == [["600", "root"]] * 3, modes
    # The engine's real key, read from its key file on the guest (never "none", which it answers with 401).
    engine = engine_key(webui.lab, webui.name)
    assert webui.sh("cat /etc/open-webui/openai.env") == f"OPENAI_API_KEYS={engine}\n"
    assert engine not in webui.first.output
    settings = webui.sh("cat /etc/open-webui/settings.env")
    assert f"OPENAI_API_BASE_URLS=http://127.0.0.1:{ENGINE_PORT}/v1\n" in settings
    assert "OFFLINE_MODE=true\n" in settings and "ENABLE_OLLAMA_API=false\n" in settings


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:32]
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_the_browser_signs_in_chats_and_sees_the_streamed_answer(webui: Webui, tmp_path: Path) -> None:
    from PIL import Image
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    password = webui.env_value("admin.env", "WEBUI_ADMIN_PASSWORD")
    email = str(load_defaults()["service"]["admin_email"])
    base = f"http://{webui.address}:{PORT}"
    predicted_before = webui.predicted()
    frames: list[tuple[float, str]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.on("websocket", lambda ws: ws.on(
                "framereceived", lambda payload: frames.append((time.monotonic(), str(payload)))))
            page.goto(f"{base}/auth", timeout=120_000)
            page.fill("input[type=email]", email, timeout=120_000)
            page.fill("input[type=password]", password)
            page.locator("button[type=submit]").first.click()
            page.wait_for_function("() => !!localStorage.token", timeout=120_000)
            page.goto(f"{base}/?models={ALIAS}", timeout=120_000)
            editor = page.locator("#chat-input")
            editor.wait_for(state="visible", timeout=120_000)
            # A first sign-in may open the release-notes dialog over the chat: close it if it is there.
            lets_go = page.get_by_text("Okay, Let's Go!")
            if lets_go.count() and lets_go.first.is_visible():
                lets_go.first.click()
            editor.click()
            page.keyboard.type("Hello from the lab browser test")
            sent = time.monotonic()
            page.locator("#send-message-button").click()
            answer = page.locator("#response-content-container").last
            try:
                page.wait_for_function(
                    "() => { const all = document.querySelectorAll('#response-content-container');"
                    " return all.length && all[all.length - 1].innerText.trim().length > 0; }", timeout=120_000)
            except PlaywrightTimeout:  # say what the page and its socket had by then (a run at load ~6 had nothing)
                pytest.fail(f"no answer text {time.monotonic() - sent:.0f} s after sending; "
                            f"{len(frames)} websocket frames, the last: {[f[1][:300] for f in frames[-4:]]}; "
                            f"page text: {page.inner_text('body')[-600:]!r}")
            first_token = time.monotonic()
            # The answer is complete when the engine has generated N_PREDICT more tokens and the page stopped changing.
            deadline = time.monotonic() + 180
            while webui.predicted() < predicted_before + N_PREDICT:
                assert time.monotonic() < deadline, "llama-server did not generate the answer's tokens in 180s"
                page.wait_for_timeout(250)
            page.wait_for_selector("#response-content-container", timeout=30_000)
            stable, last_text = 0, ""
            # ...and Open WebUI said the answer is done (its final chat:completion event): on a loaded machine that
            # can come seconds after the page stopped changing.
            while stable < 4 or not any('"chat:completion"' in payload for _, payload in frames):
                assert time.monotonic() < deadline, (f"the answer kept changing or was never completed: "
                                                     f"{last_text[-200:]!r}")
                page.wait_for_timeout(250)
                text = answer.inner_text()
                stable = stable + 1 if text == last_text else 0
                last_text = text
            chat_id = page.url.rstrip("/").rsplit("/c/", 1)[-1]
            stored = page.evaluate(
                "async (id) => { const r = await fetch('/api/v1/chats/' + id, {headers: "
                "{Authorization: 'Bearer ' + localStorage.token}}); return await r.json(); }", chat_id)
            screenshot = page.screenshot(path=str(tmp_path / "chat.png"))
            answer_png = answer.screenshot()
        finally:
            browser.close()

    webui.timings.update(first_token_after_send=first_token - sent,
                         deploy_to_first_token=first_token - webui.deploy_started)
    if os.environ.get("LABWRIGHT_OPENWEBUI_TIMINGS"):  # benchmarks/openwebui.py reads them
        Path(os.environ["LABWRIGHT_OPENWEBUI_TIMINGS"]).write_text(json.dumps(webui.timings))
    print(f"\nfirst streamed token in the browser {first_token - sent:.2f}s after send; "
          f"{first_token - webui.deploy_started:.1f}s after the deploy started "
          f"(deploy {webui.timings['deploy']:.1f}s)")
    # The stored answer (Open WebUI's own record of what the engine said) is what the page shows.
    messages = stored["chat"]["history"]["messages"].values()
    [content] = [m["content"] for m in messages if m["role"] == "assistant"]
    assert content.strip(), stored
    words = re.findall(r"[A-Za-z0-9]{3,}", content)
    shown = [w for w in words if w in last_text]
    assert len(words) >= 3 and len(shown) >= 0.8 * len(words), (content[:300], last_text[:300])
    # Streamed: the answer reached the page over the socket as delta events (0.12.4's utils/middleware.py emits
    # "response:completion" with each text delta), several of them, before the final chat:completion.
    types = [m.group(1) for _, payload in frames for m in [re.search(r'"data":\{"type":"([^"]+)"', payload)] if m]
    deltas = [payload for _, payload in frames if '"response:completion"' in payload and '"delta"' in payload]
    assert len(deltas) >= 2 and "chat:completion" in types, f"{len(deltas)} delta events: not streamed ({types})"
    assert "".join(re.findall(r'"delta":"((?:[^"\\]|\\.)*)"', "".join(deltas))), deltas[:3]
    # The screenshot: a PNG of the viewport, not blank; the answer's own box holds rendered text (many colours).
    assert png_size(screenshot) == (WIDTH, HEIGHT)
    page_colours = Image.open(io.BytesIO(screenshot)).convert("RGB").getcolors(maxcolors=1 << 20) or []
    answer_colours = Image.open(io.BytesIO(answer_png)).convert("L").getcolors(maxcolors=1 << 16) or []
    assert len(page_colours) > 20 and len(answer_colours) > 8, (len(page_colours), len(answer_colours))
    (tmp_path / "answer.txt").write_text(json.dumps({"content": content, "shown": last_text}))


def test_second_run_changes_nothing(webui: Webui) -> None:
    again = webui.deploy()
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    print(f"\nno-change re-run: {again.seconds:.2f}s ({again.totals.no_change} operations)")


@pytest.mark.parametrize(("items", "key", "words"), [
    (["openwebui_pipelines_api_key=0p3n-w3bu!"], "openwebui_pipelines_api_key",
     "is Open WebUI pipelines' default API key, which anyone can look up"),
    (["openwebui_admin_password=hunter2-hunter2"], "openwebui_admin_password", "is never taken from inventory data"),
    (["openwebui_backend=gateway"], "openwebui_backend", "no LiteLLM gateway on this host"),
    (["openwebui_admin_email=admin"], "openwebui_admin_email", "'admin' is not an e-mail address"),
    (["openwebui_prot=8081"], "openwebui_prot", "did you mean openwebui_port?"),
])
def test_bad_input_is_one_line_and_leaves_the_service_alone(webui: Webui, items: list[str], key: str,
                                                             words: str) -> None:
    files = "/etc/open-webui/*.env /etc/systemd/system/open-webui.service"
    before = webui.sh(f"sha256sum {files}; systemctl show -p MainPID --value open-webui.service")
    run = webui.deploy(*items)
    assert run.rc != 0
    lines = [line for line in run.output.splitlines() if f"{key}: " in line]
    assert len(lines) == 1 and words in lines[0], run.output[-3000:]
    assert "0p3n-w3bu!" not in lines[0] and "hunter2" not in run.output
    assert "Traceback" not in run.output and "Beginning operation run" not in run.output, run.output[-3000:]
    assert webui.sh(f"sha256sum {files}; systemctl show -p MainPID --value open-webui.service") == before


def test_a_public_default_key_on_the_guest_is_refused(webui: Webui) -> None:
    """The seed's pipelines server kept its published default key: found in a key file, the deploy stops."""
    webui.sh("umask 077; echo 'PIPELINES_API_KEY=0p3n-w3bu!' > /etc/open-webui/pipelines.env")
    try:
        run = webui.deploy()
        assert run.rc != 0
        assert ("openwebui_pipelines_api_key: /etc/open-webui/pipelines.env on "
                f"@lxd/{webui.name} sets PIPELINES_API_KEY to Open WebUI pipelines' default API key") in run.output, \
            run.output[-3000:]
        verify = webui.verify()
        assert verify.returncode == 1 and "test_no_public_default_key" in verify.stdout, verify.stdout[-3000:]
    finally:
        webui.sh(f"rm -f {shlex.quote('/etc/open-webui/pipelines.env')}")


def test_the_pipelines_server_runs_with_its_generated_key(webui: Webui, tmp_path: Path) -> None:
    """openwebui_pipelines=true: the pipelines server (a stand-in tree with upstream's layout, served by git daemon
    on the lab bridge; its wheels over HTTP) runs on loopback with the PIPELINES_API_KEY generated on the guest,
    refuses the public default and no key, and Open WebUI lists its pipeline through the key copied on the guest."""
    # requirements-minimum.txt's wheels for the guest's Python, downloaded once into the cache (pip, PyPI)
    requirements = PIPELINES_WHEELS.parent / "openwebui-pipelines-requirements-minimum.txt"
    if not requirements.is_file() or requirements.read_text() != REQUIREMENTS:
        requirements.parent.mkdir(parents=True, exist_ok=True)
        requirements.write_text(REQUIREMENTS)
    download_wheelhouse(["-r", str(requirements)], guest_python(webui.lab, webui.name), PIPELINES_WHEELS)
    assert sorted(PIPELINES_WHEELS.glob("fastapi-*.whl")), f"no fastapi wheel in {PIPELINES_WHEELS}"
    commit = write_repository(tmp_path / "pipelines")
    bridge = str(webui.lab.spec.subnet.ip)
    server, wheels_url = serve(PIPELINES_WHEELS, bridge)
    try:
        with git_daemon(tmp_path, bridge, "pipelines") as repo:
            items = ["openwebui_pipelines=true", f"openwebui_pipelines_repo={repo}",
                     f"openwebui_pipelines_ref={commit}", f"openwebui_pipelines_find_links={wheels_url}"]
            started = time.monotonic()
            run = webui.deploy(*items)
            assert run.rc == 0, run.output[-6000:]
            print(f"\npipelines deploy: {time.monotonic() - started:.1f}s, {run.totals.changed} changed")
            assert webui.sh("systemctl is-active open-webui-pipelines.service").strip() == "active"
            pid = webui.sh("systemctl show -p MainPID --value open-webui-pipelines.service").strip()
            assert webui.sh(f"ps -o user= -p {pid}").strip() == "open-webui"
            assert webui.sh("git -C /opt/open-webui-pipelines rev-parse HEAD").strip() == commit
            # The key: made on the guest, root-only, never printed, copied into Open WebUI's keys beside the engine's.
            key = webui.env_value("pipelines.env", "PIPELINES_API_KEY")
            assert len(key) >= 40 and key != "0p3n-w3bu!"
            assert webui.sh("stat -c '%a %U %G' /etc/open-webui/pipelines.env").split() == ["600", "root", "root"]
            assert key not in run.output
            assert key not in webui.sh("cat /etc/open-webui/settings.env /etc/systemd/system/open-webui*.service")
            engine = engine_key(webui.lab, webui.name)
            assert webui.sh("cat /etc/open-webui/openai.env") == f"OPENAI_API_KEYS={engine};{key}\n"
            assert (f"OPENAI_API_BASE_URLS=http://127.0.0.1:{ENGINE_PORT}/v1;http://127.0.0.1:{PIPELINES_PORT}\n"
                    in webui.sh("cat /etc/open-webui/settings.env"))
            # The server answers its model list only with the generated key (upstream main.py: /models, /v1/models).
            for path in ("/v1/models", "/models"):
                url = f"http://127.0.0.1:{PIPELINES_PORT}{path}"
                answers = {which: json.loads(webui.sh(f"python3 -c {shlex.quote(PIPELINES_GET)} {url} {which}"))
                           for which in ("file", "default", "none")}
                assert answers["file"] == [200, [PIPELINE_ID]], answers
                assert answers["default"][0] == 401 and answers["none"][0] in (401, 403), answers
            # Open WebUI itself lists the pipeline: it called the server with the key from openai.env.
            signin = webui.sh(f"python3 -c {shlex.quote(SIGNIN_CHECK)} http://127.0.0.1:{PORT} /etc/open-webui")
            models = json.loads(signin.strip().splitlines()[-1])["models"]
            assert PIPELINE_ID in models and ALIAS in models, models
            assert key not in signin
            again = webui.deploy(*items)
            assert again.rc == 0, again.output[-4000:]
            assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    finally:
        server.shutdown()
        server.server_close()


def test_the_litellm_gateway_on_the_same_host_becomes_the_one_connection(webui: Webui) -> None:
    """With deploys/litellm.py on the same guest, openwebui_backend=auto switches to the gateway: its master key is
    copied into openai.env on the guest (never printed, never through this machine), the admin sees the model
    through the gateway, and a third run changes nothing. (Last in the module: the gateway stays.)"""
    wheels = litellm_wheelhouse(str(litellm_defaults()["service"]["version"]), guest_python(webui.lab, webui.name))
    webui.lab.client.request("PATCH", f"/1.0/instances/{webui.name}", {"devices": {"litellm-wheels": {
        "type": "disk", "source": str(wheels), "path": "/mnt/litellm-wheels", "readonly": "true"}}})
    gateway = run_pyinfra(str(webui.inventory), "deploys/litellm.py", "litellm_find_links=/mnt/litellm-wheels",
                          cwd=REPO, timeout=900)
    assert gateway.rc == 0, gateway.output[-4000:]
    # Its install step installed litellm itself from its wheelhouse (the cached guest holds only its dependencies).
    assert len(gateway.operation("Install litellm[proxy]==").success) == 1, gateway.output[-3000:]
    master = webui.sh("sed -n 's/^LITELLM_MASTER_KEY=//p' /etc/litellm/master.env").strip()
    assert master.startswith("sk-")
    run = webui.deploy()
    assert run.rc == 0, run.output[-4000:]
    assert master not in run.output
    assert "OPENAI_API_BASE_URLS=http://127.0.0.1:4000/v1\n" in webui.sh("cat /etc/open-webui/settings.env")
    assert webui.sh("cat /etc/open-webui/openai.env") == f"OPENAI_API_KEYS={master}\n"
    assert len(run.operation("the admin signs in and sees the models").success) == 1, run.output[-3000:]
    verify = webui.verify()
    assert verify.returncode == 0, verify.stdout[-4000:]
    again = webui.deploy()
    assert again.rc == 0 and (again.totals.changed, again.totals.error) == (0, 0), again.output[-3000:]
