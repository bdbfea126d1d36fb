"""deploy_data.cli_data_error: a ``--data KEY=VALUE`` text that pyinfra reads as something other than what was typed
is refused naming the key. pyinfra's own reading (pyinfra_cli/util.py ``parse_cli_arg``) is asked in a subprocess,
for generated texts: importing pyinfra_cli here would patch this test process with gevent."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.deploy_data import cli_data, cli_data_error

READ = """
import json, sys
from pyinfra_cli.util import parse_cli_arg
print(json.dumps([[type(v).__name__, v] for v in map(parse_cli_arg, json.load(sys.stdin))]))
"""
#: Characters beside spaces and ASCII digits that int() or JSON may take: white space, control characters and other
#: scripts' digits (listed once, not filtered from all of Unicode).
ODD = st.sampled_from([c for c in map(chr, range(1, 0x10000)) if not 0xD800 <= ord(c) <= 0xDFFF and c != " " and (
    c.isspace() or (not c.isprintable() and ord(c) < 0xA1) or (c.isdecimal() and c not in "0123456789"))])
NUMBER = r"[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"


def pyinfra_reads(texts: list[str]) -> list[tuple[str, object]]:
    done = subprocess.run([sys.executable, "-c", READ], input=json.dumps(texts), capture_output=True, text=True,
                          timeout=120, check=True)
    return [tuple(pair) for pair in json.loads(done.stdout)]


@settings(max_examples=5, deadline=None)
@given(texts=st.lists(st.one_of(
    st.tuples(st.sampled_from(["", " "]), ODD, st.sampled_from(["1", "8080", "-3", "1.5", "true"])).map("".join),
    st.tuples(st.sampled_from(["1", "8080", "1.5"]), ODD).map("".join),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8),
    st.sampled_from(["8_080", "1_0.5", "\u0668\u0660", " 7 ", "[1, 2]", '{"a": 1}', "null", "false", '["Zo\u00eb"]',
                     '"caf\u00e9"', '{"name": "\u00e9t\u00e9"}\n', "\t1.5"])),
    min_size=20, max_size=40))
def test_what_pyinfra_reads_as_other_than_typed_is_refused_naming_the_key(texts: list[str]) -> None:
    for text, (kind, read) in zip(texts, pyinfra_reads(texts), strict=True):
        error = cli_data_error(["pyinfra", "--data", f"svc_port={text}", "@local", "x.py"])
        if kind == "str":  # kept as typed: the deploy's own checks read it
            assert error is None, (text, error)
            continue
        clean = text.strip(" ")
        if kind not in ("int", "float"):  # text, lists, objects, true/false: JSON keeps them as written
            assert error is None, (text, read, error)
        if kind in ("int", "float"):
            assert (error is None) == bool(re.fullmatch(NUMBER, clean)), (text, read, error)
        if any(c in text for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0") or (kind == "int" and "_" in text):
            assert error is not None, (text, read)
        if error is not None:
            line = str(error)
            assert line.startswith("svc_port: ") and "\n" not in line and "pyinfra" in line, line


def test_data_is_read_from_both_spellings_and_only_from_pyinfra():
    argv = ["pyinfra", "--data", "a_x=1", "--data=a_y=\x0b2", "@local", "deploy.py", "--", "--data", "a_z=\x0b3"]
    assert cli_data(argv) == {"a_x": "1", "a_y": "\x0b2"}
    assert str(cli_data_error(argv)).startswith("a_y: ")
    assert cli_data_error(argv[:3]) is None
    assert cli_data() == {}  # a test process is not pyinfra's CLI: nothing read from its argv
