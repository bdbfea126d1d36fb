"""labwright.textio: every way a user's file can be wrong is one BadInput line naming the file, what was expected
and the fix."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.testing.waiting import wait_for
from labwright.textio import describe_oserror, read_json, read_json_object, read_text, read_toml, read_yaml

WHAT = "a tabbyAPI config.yml"


def refused(call, *args) -> str:
    with pytest.raises(BadInput) as info:
        call(*args)
    message = str(info.value)
    assert "\n" not in message
    assert WHAT in message or "nested" in message
    return message


def test_text_is_read_and_a_bom_removed(tmp_path: Path):
    f = tmp_path / "c.yml"
    f.write_bytes(b"\xef\xbb\xbfmodel:\n  a: 1\n")
    assert read_text(f, WHAT) == "model:\n  a: 1\n"
    assert read_yaml(f, WHAT) == {"model": {"a": 1}}


def test_missing_file(tmp_path: Path):
    message = refused(read_text, tmp_path / "nope.yml", WHAT)
    assert str(tmp_path / "nope.yml") in message and "no such file" in message and "check the path" in message


def test_directory(tmp_path: Path):
    message = refused(read_text, tmp_path, WHAT)
    assert f"{tmp_path} is a directory" in message and "give the file's path" in message


def test_device_is_not_read(tmp_path: Path):
    message = refused(read_text, Path("/dev/zero"), WHAT)
    assert "/dev/zero is not a regular file" in message


def test_oserrors_in_words():
    # root reads a mode-000 file, so the permission case is checked on the message builder itself
    message = describe_oserror(PermissionError(13, "Permission denied"), "/etc/x.yml", WHAT)
    assert message == (f"/etc/x.yml: permission denied (expected {WHAT}); "
                       "fix its permissions or run as a user who can use it")
    assert "no space left" in describe_oserror(OSError(28, "No space left on device"), "/srv/v")


def test_binary_and_not_utf8(tmp_path: Path):
    binary = tmp_path / "model.gguf"
    binary.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)))
    assert "is a binary file, not text" in refused(read_text, binary, WHAT)
    latin = tmp_path / "latin.yml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    message = refused(read_text, latin, WHAT)
    assert "is not UTF-8 text (byte 0xe9 at offset 9" in message and "convert it to UTF-8" in message


def test_too_large(tmp_path: Path):
    f = tmp_path / "big.yml"
    f.write_text("a" * 2048)
    assert "is larger than 1024 bytes" in refused(lambda: read_text(f, WHAT, max_bytes=1024))


def test_parse_errors_name_the_line(tmp_path: Path):
    j = tmp_path / "c.json"
    j.write_text('{"a": 1,\n "b": }\n')
    assert "is not valid JSON (line 2, column 7" in refused(read_json, j, WHAT)
    t = tmp_path / "c.toml"
    t.write_text("a = 1\nb = \n")
    assert "is not valid TOML" in refused(read_toml, t, WHAT) and "line 2" in refused(read_toml, t, WHAT)
    y = tmp_path / "c.yml"
    y.write_text("a: [1, 2\nb: 3\n")
    assert "is not valid YAML (line" in refused(read_yaml, y, WHAT)
    j.write_text("[1, 2]")
    assert "holds a JSON list, not an object" in refused(read_json_object, j, WHAT)
    j.write_text("[" * 100000)
    refused(read_json, j, WHAT)


def test_a_pipe_nobody_writes_to_is_refused_not_waited_on(tmp_path: Path):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    said: list[str] = []
    # open() must not block on a writer that never comes: read in a thread, so that a regression fails, not hangs
    reader = threading.Thread(target=lambda: said.append(refused(read_text, pipe, WHAT)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), f"reading {pipe} blocked: a pipe with no writer was waited on"
    message = said[0]
    assert f"{pipe} is a pipe with nothing written to it" in message and "give the path of a file" in message


def unread(fd: int) -> int:
    """Bytes waiting in the pipe behind ``fd`` (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_a_pipe_with_a_writer_is_read_to_its_end(tmp_path: Path):
    # `--config <(...)`: the writer may be slower than the reader; the read waits for the whole document.
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb") as handle:
            handle.write(b"model:\n")
            handle.flush()
            # the second half arrives only once the reader has taken the first: it must not stop there
            wait_for("the reader to take the first half from the pipe", lambda: unread(read_end) == 0, timeout=60,
                     every=0.01)
            handle.write(b"  a: 1\n")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert read_yaml(f"/proc/self/fd/{read_end}", WHAT) == {"model": {"a": 1}}
    finally:
        writer.join()
        os.close(read_end)


def test_gguf_sniffing_skips_pipes(tmp_path: Path):
    from labwright.tuning.kv_gguf import is_gguf

    pipe = tmp_path / "model"
    os.mkfifo(pipe)
    found: list[bool] = []
    sniffer = threading.Thread(target=lambda: found.append(is_gguf(pipe)), daemon=True)
    sniffer.start()
    sniffer.join(timeout=30)
    assert found == [False]  # not opened: that would block here, and eat a real pipe's first bytes
    gguf = tmp_path / "model.bin"
    gguf.write_bytes(b"GGUF" + bytes(20))
    assert is_gguf(gguf) is True


def _laughs(levels: int) -> str:
    """A "billion laughs": each level a list of nine aliases to the one before (nine levels: 432 bytes that
    expand to 9**9 items)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{n}: &a{n} [{','.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_nested_alias_bomb_is_one_line_before_anything_walks_it(tmp_path: Path):
    bomb = tmp_path / "config.yml"
    bomb.write_text(_laughs(9))
    message = refused(read_yaml, bomb, WHAT)
    assert message.startswith(f"{bomb} expands its aliases to ") and "nodes from" in message
    assert message.endswith("fix or replace the file")


def test_a_recursive_alias_is_refused(tmp_path: Path):
    loop = tmp_path / "config.yml"
    loop.write_text("a: &a [1, *a]\n")
    assert "an alias to a node that contains it" in refused(read_yaml, loop, WHAT)


def test_aliases_within_the_bound_load_as_before(tmp_path: Path):
    from labwright.textio import yaml_load

    # Three levels of nine: 819 nodes, under the 10,000 floor; merge keys and shared anchors as YAML means them.
    assert len(yaml_load(_laughs(3))["a2"]) == 9
    assert yaml_load("base: &b {x: 1}\nc: {<<: *b, y: 2}\n") == {"base": {"x": 1}, "c": {"x": 1, "y": 2}}
    assert yaml_load("") is None
    # A document without aliases is never refused, however large.
    assert len(yaml_load("[" + ",".join(["1"] * 50_000) + "]")) == 50_000


def test_the_tabbyapi_config_editor_refuses_a_bomb_in_one_line():
    from labwright.tabbyapi.config_edit import ConfigShapeError, load

    with pytest.raises(ConfigShapeError) as info:
        load(_laughs(9))
    assert "expands its aliases to" in str(info.value) and "\n" not in str(info.value)


def test_every_yaml_document_goes_through_the_one_bounded_loader():
    """No YAML parsed past textio.yaml_load in labwright's code: a new yaml.safe_load would read an alias bomb."""
    import re

    import labwright

    root = Path(labwright.__file__).parent
    calls = re.compile(r"\byaml\.(safe_load|load|full_load|unsafe_load|load_all|safe_load_all)\(")
    found = [f"{path.relative_to(root)}:{number}" for path in sorted(root.rglob("*.py")) if path.name != "textio.py"
             for number, line in enumerate(path.read_text().splitlines(), 1) if calls.search(line)]
    assert not found, f"YAML parsed without labwright.textio.yaml_load at {found}"
