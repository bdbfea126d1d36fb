"""`labwright bench tts` against a URL where nothing listens: one line, exit 1, no table of failures."""

from __future__ import annotations

import socket

from labwright.cli import main


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_tts_url_is_one_line_exit_1(tmp_path, capsys):
    text = tmp_path / "speech.txt"
    text.write_text("Hello there. How are you?")
    port = closed_port()
    code = main(["bench", "tts", "--url", f"http://127.0.0.1:{port}/v1", "--text", str(text)])
    out, err = capsys.readouterr()
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "unreachable" in errors[0], err
    assert "Errno" not in errors[0] and "┃" not in out, (out, err)
