"""``--data KEY=VALUE`` of ``labwright bios backup|restore`` driven by generated junk: an unknown key (naming the
closest), a value of the wrong type, a host name that is none, a control character: one line naming the item, exit 2,
and the host never dialled (a good item does dial it: the control)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.hosts.host_data import connector_keys
from support.no_contact import no_contact

SSH = connector_keys("ssh")
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
_CONTROL = st.sampled_from([chr(c) for c in range(1, 32)] + ["\x7f"])


def _typo(key: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(key) - 1).map(lambda i: key[:i] + key[i + 1:]).filter(lambda k: k not in SSH)


_JUNK = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9_]{0,20}\Z").filter(lambda k: k not in SSH).map(lambda k: f"{k}=1"),
    st.sampled_from(SSH).flatmap(_typo).filter(lambda k: k != "" and k[0].isalpha()).map(lambda k: f"{k}=1"),
    st.one_of(st.integers(65536, 10**9), st.just(0)).map(lambda p: f"ssh_port={p}"),
    _TEXT.filter(lambda t: not t.isdigit()).map(lambda t: f"ssh_port={t}"),
    _TEXT.filter(lambda t: t.lower() not in ("true", "false", "yes", "no", "1", "0")).map(
        lambda t: f"ssh_look_for_keys={t}"),
    st.sampled_from(["a b", "a;b", "-x", "a..b", "999.1.1.1", "$(id)", "h\u00e9"]).map(lambda h: f"ssh_hostname={h}"),
    st.tuples(st.sampled_from(["ssh_user", "ssh_password", "ssh_key"]), _TEXT, _CONTROL, _TEXT).map(
        lambda t: f"{t[0]}={t[1]}{t[2]}{t[3]}"),
    _TEXT.filter(lambda t: "=" not in t),
)


def _run(item: str, tmp_path) -> tuple[int, list[str]]:
    from labwright.cli import main

    with no_contact() as attempts:
        code = main(["bios", "backup", "127.0.0.1", "--programmer", "internal", "--out", str(tmp_path / "out"),
                     "--data", item])
    return code, attempts


def test_a_good_item_does_dial_the_host(tmp_path, capsys):
    code, attempts = _run("ssh_port=2222", tmp_path)
    capsys.readouterr()
    assert code != 0 and attempts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(item=_JUNK)
def test_generated_junk_data_is_one_line_exit_2_nothing_contacted(item, tmp_path, capsys):
    code, attempts = _run(item, tmp_path)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("labwright: error: --data "), err
    assert "Traceback" not in err and attempts == [] and not (tmp_path / "out").exists()
