"""The Open WebUI and pipelines units render with every variable the deploy passes (StrictUndefined: a missing one
fails), and say what the deploy promises: root-only env files read by systemd, the service user, the port."""

from __future__ import annotations

from labwright.deploy_data import jinja
from labwright.openwebui.config import TEMPLATES, load_defaults

JINJA = jinja(TEMPLATES)
SERVICE = load_defaults()["service"]


def test_open_webui_unit() -> None:
    text = JINJA.get_template("open-webui.service.j2").render(
        user="open-webui", data_dir="/var/lib/open-webui", config_dir="/etc/open-webui", venv="/opt/open-webui/.venv",
        host="0.0.0.0", port=8080)
    lines = text.splitlines()
    assert "User=open-webui" in lines and "WorkingDirectory=/var/lib/open-webui" in lines
    assert [line for line in lines if line.startswith("EnvironmentFile=")] == [
        f"EnvironmentFile=/etc/open-webui/{name}" for name in ("settings.env", "secret.env", "admin.env", "openai.env")]
    assert "ExecStart=/opt/open-webui/.venv/bin/open-webui serve --host 0.0.0.0 --port 8080" in lines


def test_pipelines_unit_listens_on_loopback_with_the_generated_key() -> None:
    text = JINJA.get_template("pipelines.service.j2").render(
        user="open-webui", directory=SERVICE["pipelines_dir"], data_dir="/var/lib/open-webui",
        config_dir="/etc/open-webui", port=SERVICE["pipelines_port"], ref=SERVICE["pipelines_ref"])
    lines = text.splitlines()
    assert "EnvironmentFile=/etc/open-webui/pipelines.env" in lines
    assert f"ExecStart={SERVICE['pipelines_dir']}/.venv/bin/uvicorn main:app --host 127.0.0.1 --port 9099 " \
           "--forwarded-allow-ips '*'" in lines
    assert "0p3n-w3bu!" not in "\n".join(line for line in lines if not line.startswith("#"))
    assert len(SERVICE["pipelines_ref"]) == 40
