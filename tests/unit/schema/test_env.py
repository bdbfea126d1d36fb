"""labwright.schema.env: every environment variable labwright reads is declared with its type, read through one
function; junk in one is one line naming the variable and the fix, exit 2, before anything is contacted."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.schema import env
from support.no_contact import no_contact

SRC = Path(__file__).resolve().parents[3] / "src" / "labwright"


@pytest.mark.parametrize(("raw", "on"), [("1", True), ("0", False), ("true", True), ("False", False), ("YES", True),
                                         ("no", False), (" 1 ", True), ("", None)])
def test_a_bool_reads_1_0_true_false_yes_no(raw, on):
    assert env.read("LABWRIGHT_DEBUG", {"LABWRIGHT_DEBUG": raw}) is on


def test_labwright_debug_0_is_off():
    assert env.debug({"LABWRIGHT_DEBUG": "0"}) is False
    assert env.debug({"LABWRIGHT_DEBUG": "1"}) is True
    assert env.debug({"LABWRIGHT_DEBUG": "maybe"}) is False  # asked while an error is reported: never a new error
    with pytest.raises(BadInput, match=r"LABWRIGHT_DEBUG='maybe' is not a yes/no value; set LABWRIGHT_DEBUG=1"):
        env.read("LABWRIGHT_DEBUG", {"LABWRIGHT_DEBUG": "maybe"})


def test_a_secret_with_a_line_break_is_refused_without_showing_it():
    with pytest.raises(BadInput) as refused:
        env.read("PROXMOX_TOKEN_SECRET", {"PROXMOX_TOKEN_SECRET": "s3cret\nX-Injected: 1"})
    line = str(refused.value)
    assert "PROXMOX_TOKEN_SECRET" in line and "s3cret" not in line and "\n" not in line
    assert env.read("PROXMOX_TOKEN_SECRET", {"PROXMOX_TOKEN_SECRET": "a b-c"}) == "a b-c"  # kept as written
    # a token file read with $(cat) keeps no line break; one read another way is forgiven where the tool does too
    assert env.read("HF_TOKEN", {"HF_TOKEN": "hf_abc\n"}) == "hf_abc"


def test_a_variable_the_user_names_is_read_with_its_kind():
    assert env.read("MY_KEY", {"MY_KEY": "k"}, kind="secret") == "k"
    with pytest.raises(BadInput, match=r"^environment variable MY_KEY holds the control character '\\r'"):
        env.read("MY_KEY", {"MY_KEY": "k\r"}, kind="secret")
    with pytest.raises(KeyError):
        env.read("NOT_DECLARED", {})


@pytest.mark.parametrize(("name", "raw", "says"), [
    ("HF_ENDPOINT", "http://[::1/v1", "is not a URL"),
    ("HF_ENDPOINT", "https://127.0.0.1:99999", "port"),
    ("HF_ENDPOINT", "https://127.0.0.1:0", "port 0 is not 1-65535"),
    ("LABWRIGHT_DEBIAN_MIRROR", "ftp://deb.debian.org/debian", "is not a http or https URL"),
    ("LABWRIGHT_PROGRESS_INTERVAL", "soon", "is not a number of seconds"),
    ("LABWRIGHT_PROGRESS_INTERVAL", "nan", "is not a number of seconds"),
    ("LABWRIGHT_PROGRESS", "loud", "is not one of off, lines"),
    ("LXD_DIR", "/tmp/a\nb", "control character"),
])
def test_junk_is_one_line_naming_the_variable(name, raw, says):
    with pytest.raises(BadInput) as refused:
        env.check_environment({name: raw})
    line = str(refused.value)
    assert line.startswith(f"environment variable {name}") and says in line and "\n" not in line
    assert refused.value.exit_code == 2


def test_every_variable_labwright_reads_is_declared():
    """A new ``os.environ.get("NAME")`` in the CLI's code is declared in VARS (or in the list of those that are
    only passed through, or read inside a guest by the verify suites)."""
    passed_through = {"PATH", "PIP_FIND_LINKS", "USER", "PYTHONCOERCECLOCALE", "PIP_CONFIG_FILE",
                      "PIP_DISABLE_PIP_VERSION_CHECK", "DEBIAN_FRONTEND", "LC_ALL"}
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        if "verify" in path.relative_to(SRC).parts or path.parent.name == "testing":
            continue
        text = path.read_text()
        names |= set(re.findall(r"os\.environ(?:\.get|\.pop|\.setdefault)?[(\[]\"([A-Z_][A-Z0-9_]*)\"", text))
    missing = names - set(env.VARS) - passed_through - {"_LABWRIGHT_COMPLETE"}
    missing = {name for name in missing if not name.startswith("HF_HUB_")}  # set for huggingface_hub, not read
    assert not missing, f"declare these in labwright.schema.env.VARS: {sorted(missing)}"


# --- generated junk through the CLI: one line, exit 2, nothing contacted ----------------------------------------
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
_CONTROL = st.sampled_from([chr(c) for c in range(1, 32)] + ["\x7f"])


def _junk(var: env.Var) -> st.SearchStrategy[str]:
    with_control = st.tuples(_TEXT, _CONTROL, _TEXT).map("".join)
    if var.kind == "bool":
        return _TEXT.filter(lambda t: t.strip() and t.strip().lower() not in {"1", "0", "true", "false", "yes", "no"})
    if var.kind == "choice":
        return _TEXT.filter(lambda t: t.strip() and t.strip().lower() not in var.choices)
    if var.kind == "seconds":
        def bad_seconds(text: str) -> bool:
            try:
                return not 0 <= float(text) <= 86400
            except ValueError:
                return bool(text.strip())
        return _TEXT.filter(bad_seconds) | st.sampled_from(["-1", "86401", "inf", "nan", "1e9"])
    if var.kind == "url":
        return st.one_of(
            st.integers(65536, 10**7).map(lambda p: f"https://127.0.0.1:{p}"),
            st.just("https://127.0.0.1:0"),
            _TEXT.filter(lambda t: "]" not in t and t.isprintable()).map(lambda t: f"http://[::1{t}/v1"),
            st.sampled_from(["ftp://x", "127.0.0.1:8080", "http:// a", "http://999.1.1.1/"]),
        )
    if var.strip:  # surrounding white space is dropped: the control character sits inside the value
        return st.tuples(st.text("abc", min_size=1, max_size=5), _CONTROL, st.text("xyz", min_size=1, max_size=5)
                         ).map("".join).filter(lambda t: t.strip() == t)
    return with_control.filter(lambda t: t.strip() if var.kind != "secret" else t)


_DECLARED = st.sampled_from(sorted(env.VARS.values(), key=lambda v: v.name))
#: A command that contacts the LXD daemon (LXD_DIR's unix.socket) unless refused first.
_CONTACTS = ["guest", "snapshots", "@lxd/x1"]


@pytest.fixture
def lxd_dir(tmp_path, monkeypatch):
    """An LXD_DIR whose unix.socket exists (bound, nobody answers): a command that goes on dials it."""
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "unix.socket"))
    monkeypatch.setenv("LXD_DIR", str(tmp_path))
    yield tmp_path
    listener.close()


def test_the_command_used_does_contact_the_daemon_without_junk(lxd_dir, capsys):
    from labwright.cli import main

    with no_contact() as attempts:
        code = main(_CONTACTS)
    capsys.readouterr()
    assert code != 0 and attempts and str(lxd_dir) in attempts[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_junk_in_any_variable_is_refused_before_anything_is_contacted(data, lxd_dir, monkeypatch, capsys):
    from labwright.cli import main

    var = data.draw(_DECLARED, label="variable")
    raw = data.draw(_junk(var), label="value")
    with monkeypatch.context() as patch:
        patch.setenv(var.name, raw)
        with no_contact() as attempts:
            code = main(_CONTACTS)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"labwright: error: environment variable {var.name}"), err
    assert "Traceback" not in err and out == ""
    assert attempts == []
    if var.kind == "secret":  # never echoed: a value of a few characters ('1') is in any sentence by chance
        assert raw not in lines[0] and (raw.strip() not in lines[0] or len(raw.strip()) < 4)


def test_labwright_debug_0_prints_no_traceback(tmp_path):
    """LABWRIGHT_DEBUG=0 is off (it turned debugging on: any non-empty value did)."""
    environ = {**os.environ, "LABWRIGHT_DEBUG": "0", "LXD_DIR": str(tmp_path), "INCUS_DIR": str(tmp_path)}
    done = subprocess.run([str(Path(os.sys.executable).parent / "labwright"), "guest", "snapshots", "@lxd/x1"],
                          capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    done = subprocess.run([str(Path(os.sys.executable).parent / "labwright"), "guest", "snapshots", "@lxd/x1"],
                          capture_output=True, text=True, env={**environ, "LABWRIGHT_DEBUG": "1"}, timeout=120)
    assert "Traceback" in done.stderr


@pytest.mark.parametrize("name", ["BAD=NAME", "1KEY", "A B", "KEY-1", "ü"])
def test_a_variable_name_the_user_gives_is_a_name(name):
    """CLI sweep at 2b91fd1: --api-key-env BAD=NAME said 'export BAD=NAME=KEY first'."""
    with pytest.raises(BadInput, match="is not an environment variable name"):
        env.read(name, {}, kind="secret")


_GOOD = {"bool": "1", "seconds": "10", "url": "http://127.0.0.1:8080", "secret": "abc", "path": "/srv/x", "line": "abc"}


@settings(max_examples=80)
@given(var=_DECLARED, odd=st.sampled_from([chr(c) for c in (*range(1, 32), 0x7f, 0x85)]),
       where=st.sampled_from(["start", "end"]))
def test_a_control_character_at_either_end_is_refused_not_stripped(var, odd, where):
    """A sweep at 1a05899 found deploy data read "\\x0b1" as 1 (str.strip() takes \\x0b); the variables stripped
    the same way. Only what reading a file leaves (a line break, a tab) is dropped, and only where ``strip`` says."""
    good = var.choices[0] if var.kind == "choice" else _GOOD.get(var.kind, "abc")
    raw = odd + good if where == "start" else good + odd
    if var.strip and odd in "\t\r\n":
        assert env.read(var.name, {var.name: raw}) == env.read(var.name, {var.name: good})
        return
    with pytest.raises(BadInput) as refused:
        env.read(var.name, {var.name: raw})
    assert str(refused.value).startswith(f"environment variable {var.name}")
