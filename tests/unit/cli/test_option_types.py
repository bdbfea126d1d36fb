"""Free-text options typed at the typer boundary (labwright.cli.vocab's callbacks through labwright.schema.fields):
a bad URL, host name, version, unit name or empty path is one line naming the option, exit 2, before any daemon,
API or server is contacted (issue 33 classes 1 and 4)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.no_contact import no_contact


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """An LXD_DIR with a socket file (a command that goes on dials it) and Proxmox credentials set."""
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "unix.socket"))
    monkeypatch.setenv("LXD_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("hello")
    yield tmp_path
    listener.close()


def _run(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    from labwright.cli import main

    with no_contact() as attempts:
        code = main(argv)
    out, err = capsys.readouterr()
    return code, err, attempts


@pytest.mark.parametrize(("argv", "says"), [
    (["host", "upgrade", "pve1", "--to", "550; rm -rf /"], "--to '550; rm -rf /' is not a version like 550.54.15"),
    (["host", "upgrade", "pve 1"], "NODE 'pve 1' is not an IP address or a host name"),
    (["gpu", "check", "llm1", "--decode-url", "http://[::1/v1"], "--decode-url 'http://[::1/v1' is not a URL"),
    (["gpu", "check", "llm1", "--service", "a;b"], "--service 'a;b' is not a systemd service name"),
    (["bench", "tts", "--url", "https://127.0.0.1:0", "--text", "text.txt"], "port 0 is not 1-65535"),
    (["bench", "tts", "--url", "http://127.0.0.1:1", "--text", "text.txt", "--voice", "a\nb"],
     "--voice 'a\\nb' holds the control character"),
    (["bench", "llm", "--url", "https://127.0.0.1:99999"], "--url 'https://127.0.0.1:99999'"),
    (["model", "fetch", "x/y", "--endpoint", "http://[::1", "--dry"], "--endpoint 'http://[::1' is not a URL"),
    (["wheelhouse", "litellm", "--python", "3.11", "--version", "1.0; rm", "--dry"], "--version '1.0; rm'"),
    (["matrix", "inspect", ""], "WHEELS '': an empty path"),
])
def test_a_bad_option_is_one_line_exit_2_nothing_contacted(sandbox, capsys, argv, says):
    code, err, attempts = _run(argv, capsys)
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert attempts == []


def test_a_good_option_does_contact_the_daemon(sandbox, capsys):
    code, err, attempts = _run(["gpu", "check", "llm1", "--decode-url", "http://127.0.0.1:8001/v1"], capsys)
    assert code != 0 and attempts, err


_URL_JUNK = st.one_of(
    st.integers(65536, 10**8).map(lambda p: f"http://127.0.0.1:{p}/v1"),
    st.just("http://127.0.0.1:0/v1"),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00]"), max_size=15).map(
        lambda t: f"http://[::1{t}/v1"),
    st.sampled_from(["ftp://127.0.0.1/", "127.0.0.1:8080", "http://", "http://a b/", "http://999.1.1.1/",
                     "http://127.0.0.1:9/v1\nX-Injected: 1"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(url=_URL_JUNK, where=st.sampled_from([["gpu", "check", "llm1", "--decode-url"],
                                              ["bench", "llm", "--contexts", "64", "--url"],
                                              ["model", "fetch", "x/y", "--dry", "--endpoint"]]))
def test_generated_junk_urls_are_refused_before_anything_is_contacted(sandbox, capsys, url, where):
    code, err, attempts = _run([*where, url], capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"labwright: error: {where[-1]} "), err
    assert "Traceback" not in err and attempts == []


def test_empty_path_refusal_holds_after_register(sandbox, capsys):
    """``register`` adds the groups as typer builds them (tests that walk the app call it); an empty path must still be
    refused naming the parameter, whichever way the group was built (CI's run found the register order)."""
    from labwright.cli import register

    register()
    code, err, attempts = _run(["matrix", "inspect", ""], capsys)
    assert code == 2 and err.splitlines() == ["labwright: error: WHEELS '': an empty path; give a file or directory"]
    assert attempts == []
