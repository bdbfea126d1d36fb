"""labwright.schema: each shared field type accepts what it should, refuses the rest in one line naming the key,
and generated junk never gives a traceback (a one-line refusal, or a value that checks again to itself)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.schema import checks, fields
from labwright.schema.fields import (
    AbsPath,
    Duration,
    KeyFile,
    ListenAddress,
    ManagedDir,
    PackageName,
    Port,
    Secret,
    Size,
    StrictBool,
    Url,
    UserName,
    Version,
)
from labwright.schema.model import Schema, parse


class One(Schema):
    """Every field type once, each under the key a deploy would use."""

    url: Url = "http://127.0.0.1:5000/v1"
    host: ListenAddress = "0.0.0.0"
    port: Port = 5000
    path: AbsPath = "/srv/x"
    data_dir: ManagedDir = "/srv/x"
    api_key_file: KeyFile = "/etc/svc/api-key"
    user: UserName = "lab"
    size: Size = 0
    wait: Duration = 30
    version: Version = "1.0"
    package: PackageName = "litellm"
    api_key: Secret = ""
    enabled: StrictBool = True


def refusal(key: str, value: Any) -> str:
    with pytest.raises(BadInput) as caught:
        parse(One, {key: value}, prefix="svc")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"svc_{key}: "), line
    return line


def accepted(key: str, value: Any) -> Any:
    return getattr(parse(One, {key: value}, prefix="svc"), key)


def test_defaults_are_valid() -> None:
    assert parse(One, {}).port == 5000


@pytest.mark.parametrize("text", ["http://[::1/v1", "http://h:0", "http://h:99999/", "http://h:abc/", "ftp://h/",
                                  "http:///x", "http://999.1.1.1/", "http://a b/", "127.0.0.1:8080", "http://[zz]:1/",
                                  "http://-bad-/"])
def test_url_refused(text: str) -> None:
    assert "is not a" in refusal("url", text)


@pytest.mark.parametrize("text", ["http://127.0.0.1:5000/v1", "https://[::1]:8443/", "http://gpu-01.lan",
                                  "http://h:65535/x?y=1", "http://localhost:1"])
def test_url_accepted(text: str) -> None:
    assert accepted("url", text) == text


@pytest.mark.parametrize("text", ["http://user:s3cret@h:65535/x?y=1", "https://tok3n@127.0.0.1/v1", "http://:s3cret@h/"])
def test_a_url_with_credentials_is_refused_without_echoing_them(text: str) -> None:
    # CLI sweep at 2b91fd1: bench --url http://u:p@... printed the password in its progress line and sent nothing
    line = refusal("url", text)
    assert "credentials never go in a URL" in line and "s3cret" not in line and "tok3n" not in line


def test_url_messages_name_the_problem() -> None:
    assert "invalid IPv6" in refusal("url", "http://[::1/v1")
    assert "port 0 is not 1-65535" in refusal("url", "http://h:0")


@pytest.mark.parametrize("text", ["999.1.1.1", "1.2.3", "-host", "a..b", "a_b", "", "[::]", "x" * 64, 8080])
def test_listen_address_refused(text: Any) -> None:
    refusal("host", text)


@pytest.mark.parametrize("text", ["0.0.0.0", "::", "127.0.0.1", "fe80::1", "gpu-01.lan", "localhost", "a1.example."])
def test_listen_address_accepted(text: str) -> None:
    assert accepted("host", text) == text


@pytest.mark.parametrize("value", [0, 65536, 99999, -1, "80a", 80.5, True, None, [80], "", "1e3"])
def test_port_refused(value: Any) -> None:
    refusal("port", value)


def test_port_accepted() -> None:
    assert accepted("port", "8080") == 8080
    assert accepted("port", 1) == 1 and accepted("port", 65535) == 65535


@pytest.mark.parametrize("value", ["relative/x", "/srv/a b", "/srv/$HOME", "/srv/../etc", "/srv/x;rm", "", 5])
def test_abs_path_refused(value: Any) -> None:
    refusal("path", value)


def test_abs_path_normalised() -> None:
    assert accepted("path", "/srv//x/./y/") == "/srv/x/y"
    assert accepted("path", "//srv") == "/srv"
    assert accepted("path", "/etc") == "/etc"  # a path, not one the service owns


@pytest.mark.parametrize("value", ["/", "/etc", "/etc/", "/usr", "//usr/./", "/bin", "/var", "/home", "/var/lib",
                                   "/usr/local", "/proc/1", "/sys/x", "/dev/shm"])
def test_managed_dir_refuses_system_directories(value: str) -> None:
    assert "system directory" in refusal("data_dir", value)


def test_managed_dir_accepted() -> None:
    assert accepted("data_dir", "/srv/tabbyapi/") == "/srv/tabbyapi"
    assert accepted("data_dir", "/opt/litellm/venv") == "/opt/litellm/venv"
    assert accepted("data_dir", "/etc/labwright") == "/etc/labwright"


@pytest.mark.parametrize("value", ["/etc/shadow", "/etc/", "/api-key", "/usr/bin/k", "/proc/1/k", "/var/lib/k",
                                   "/etc/svc/"])
def test_a_key_file_is_in_a_directory_the_service_can_own(value: str) -> None:
    # deploy-data sweep at 2b91fd1: vllm_api_key_file=/etc/shadow passed (the deploy would chown /etc and the file)
    refusal("api_key_file", value)


def test_key_file_accepted() -> None:
    assert accepted("api_key_file", "/etc/vllm//api-key") == "/etc/vllm/api-key"


@pytest.mark.parametrize("value", ["/usr/bin/python3", "/bin/sh", "/etc", "/etc/x", "/sbin/init", "/usr/lib/x/y",
                                   "/proc/self/exe", "/", "/usr/local/bin"])
def test_a_program_path_is_never_the_systems(value: str) -> None:
    with pytest.raises(ValueError, match="system directory"):
        checks.program_path(value)


@pytest.mark.parametrize("value", ["ssh", "sshd", "nobody", "www-data", "systemd-resolved", "cron", "root"])
def test_a_service_or_user_name_the_system_has_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        checks.service_user(value)


@pytest.mark.parametrize("value", ["Root", "1abc", "a b", "x" * 33, "", "a$", "-a", True])
def test_user_name_refused(value: Any) -> None:
    refusal("user", value)


def test_user_name_accepted() -> None:
    assert accepted("user", "labwright") == "labwright" and accepted("user", "_svc-1") == "_svc-1"


def test_size() -> None:
    assert accepted("size", "2GiB") == 2 * 1024**3 and accepted("size", 512) == 512
    for bad in ("abc", -1, "2PiB", True, 1.5, [1]):
        refusal("size", bad)


def test_duration() -> None:
    assert accepted("wait", "1h30m") == 5400 and accepted("wait", "250ms") == 0.25 and accepted("wait", 5) == 5
    for bad in ("5 minutes", "x", -1, float("nan"), float("inf"), "400d", True, "", "m"):
        refusal("wait", bad)


def test_version() -> None:
    assert accepted("version", "1.2.3") == "1.2.3" and accepted("version", "2.0rc1") == "2.0rc1"
    for bad in ("b4500", "1..2", 1.10, "", None):
        refusal("version", bad)
    assert "quote it" in refusal("version", 1.10)


def test_package_name() -> None:
    assert accepted("package", "open-webui") == "open-webui" and accepted("package", "zope.interface")
    for bad in ("a==1", "a[x]", "-a", "a b", "", "a;b"):
        refusal("package", bad)


def test_secret() -> None:
    assert accepted("api_key", "sk-ab c") == "sk-ab c"
    line = refusal("api_key", "sk-secret\n")
    assert "sk-secret" not in line  # a secret is never printed
    refusal("api_key", ["x"])


@pytest.mark.parametrize("value", ["false", "true", "yes", 0, 1, None, "no"])
def test_strict_bool_refuses_text_and_numbers(value: Any) -> None:
    assert "not true or false" in refusal("enabled", value)


def test_strict_bool_accepted() -> None:
    assert accepted("enabled", False) is False


def test_unknown_key_names_the_closest() -> None:
    with pytest.raises(BadInput, match=r"^svc_prot: unknown key \(did you mean svc_port\?\)"):
        parse(One, {"prot": 1}, prefix="svc")
    with pytest.raises(BadInput, match=r"^zzzz: unknown key \(known keys: api_key, "):
        parse(One, {"zzzz": 1})


def test_error_type_is_the_callers() -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom, match="^port: 0 is out of range"):
        parse(One, {"port": 0}, error=Boom)


JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=40),
                 st.text(alphabet="0123456789.:/[]abcdefhmstpGiB-_ ", max_size=30),
                 st.from_regex(r"https?://[a-z0-9.:\[\]-]{0,20}(:\d{1,6})?/?", fullmatch=True),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
CHECKS = [fields.url, fields.listen_address, fields.port, fields.abs_path, fields.managed_dir, fields.user_name,
          fields.size, fields.duration, fields.version, fields.package_name, fields.secret, fields.strict_bool,
          fields.key_file, checks.program_path, checks.service_user]


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(One.model_fields)), value=JUNK)
def test_junk_is_refused_in_one_line_or_round_trips(key: str, value: Any) -> None:
    try:
        checked = getattr(parse(One, {key: value}, prefix="svc"), key)
    except BadInput as error:
        line = str(error)
        assert "\n" not in line and "\r" not in line and line.startswith(f"svc_{key}: ")
        assert "Traceback" not in line and len(line) < 400
        return
    assert getattr(parse(One, {key: checked}, prefix="svc"), key) == checked


@settings(max_examples=300, deadline=None)
@given(check=st.sampled_from(CHECKS), value=JUNK)
def test_checks_raise_only_value_error(check: Any, value: Any) -> None:
    try:
        checked = check(value)
    except ValueError as error:
        assert "\n" not in str(error)
        return
    assert check(checked) == checked


class Item(Schema):
    host: AbsPath = "/srv/x"
    readonly: StrictBool = False


class Holder(Schema):
    mounts: tuple[Item, ...] = ()
    memory: Port = 5000


def test_an_unknown_key_in_a_list_item_names_the_closest_key_of_the_item() -> None:
    with pytest.raises(BadInput, match=r"^mounts\[1\]\.readonlyy: unknown key \(did you mean readonly\?\)"):
        parse(Holder, {"mounts": [{}, {"readonlyy": True}]})
    with pytest.raises(BadInput, match=r"^mounts\[0\]\.zzz: unknown key \(known keys: host, readonly\)"):
        parse(Holder, {"mounts": [{"zzz": 1}]}, where="docs/x.md")
    # a typo is named before the errors it may lead to
    with pytest.raises(BadInput, match=r"^memroy: unknown key \(did you mean memory\?\)"):
        parse(Holder, {"memory": "x", "memroy": 1})


@settings(max_examples=200, deadline=None)
@given(key=st.text(min_size=1, max_size=12).filter(lambda k: k not in Item.model_fields), value=JUNK,
       index=st.integers(0, 2))
def test_junk_keys_in_list_items_are_one_line_naming_the_item_key(key: str, value: Any, index: int) -> None:
    items = [{} for _ in range(index)] + [{key: value}]
    with pytest.raises(BadInput) as caught:
        parse(Holder, {"mounts": items})
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"mounts[{index}].") and "unknown key" in line, line


TEXT_CHECKS = [fields.url, fields.listen_address, fields.abs_path, fields.managed_dir, fields.user_name,
               fields.version, fields.package_name, fields.key_file, checks.program_path, checks.service_user,
               checks.line, checks.git_url, checks.debian_packages, checks.or_empty(checks.abs_path),
               checks.or_empty(checks.line), checks.or_empty(checks.url)]
GOOD_TEXT = {"url": "http://127.0.0.1:8080/v1", "listen_address": "127.0.0.1", "abs_path": "/srv/x",
             "managed_dir": "/opt/svc", "user_name": "svc", "version": "1.2.3", "package_name": "open-webui",
             "key_file": "/etc/svc/key", "program_path": "/opt/svc/bin/x", "service_user": "svc", "line": "one line",
             "git_url": "https://example.org/x.git", "debian_packages": "curl"}


@given(check=st.sampled_from(TEXT_CHECKS), control=st.sampled_from([chr(c) for c in (*range(0, 32), *range(127, 160))]),
       where=st.sampled_from(["start", "end", "alone"]))
def test_a_control_character_at_either_end_is_never_stripped_away(check: Any, control: str, where: str) -> None:
    """str.strip() takes away \\x0b, \\x1c-\\x1f and \\x85 at the ends: a value of one of them read as "not set", a
    good value with one at its end passed as the good value (sweep at 6d041d3: ``tabbyapi_wheelhouse=\\x1c``)."""
    name = getattr(check, "__name__", "")
    good = next((text for key, text in GOOD_TEXT.items() if key in name), GOOD_TEXT["abs_path"])
    value = control if where == "alone" else control + good if where == "start" else good + control
    try:
        checked = check(value)
    except ValueError:
        return
    assert control not in str(checked), f"{name}({value!r}) -> {checked!r}"
    assert checked not in ("", []), f"{name}({value!r}) read as empty"


#: The checks that read a number or an on/off word out of text, with a value each accepts.
NUMBER_CHECKS: dict[str, tuple[Any, str]] = {
    "port": (checks.port, "8080"), "whole": (checks.whole(), "-12"), "whole(1)": (checks.whole(1), "3"),
    "flag": (checks.flag, "true"), "duration": (checks.duration, "30"), "duration-units": (checks.duration, "1h30m")}
#: What int(), float(), str.strip() and regex \s, \d take beside spaces and ASCII digits: other white space and
#: control characters (\x0b, \x1c-\x1f, \x85, \xa0, \u2028), other scripts' digits (Arabic-Indic, fullwidth).
ODD = st.characters(codec="utf-8").filter(lambda c: c != " " and (c.isspace() or not c.isprintable() or (
    c.isdecimal() and c not in "0123456789")))


@given(name=st.sampled_from(sorted(NUMBER_CHECKS)), odd=ODD, where=st.sampled_from(["start", "end", "both"]))
def test_a_number_or_flag_with_other_white_space_or_digits_around_it_is_refused(name: str, odd: str,
                                                                                where: str) -> None:
    """A sweep at 1a05899: ``gateway_admin_port=\\x0b1`` was read as port 1 and ``kokoro_open=\\x0b1`` as true
    (int() and str.strip() take \\x0b at the ends), so the deploy went on to ask the host its facts."""
    check, good = NUMBER_CHECKS[name]
    value = odd + good if where == "start" else good + odd if where == "end" else odd + good + odd
    with pytest.raises(ValueError):
        check(value)
    assert check(f" {good} ") == check(good)  # spaces around are still forgiven


@given(name=st.sampled_from(sorted(NUMBER_CHECKS)), text=st.text(max_size=10))
def test_what_a_number_or_flag_check_accepts_is_spaces_and_ascii_only(name: str, text: str) -> None:
    check, _ = NUMBER_CHECKS[name]
    try:
        value = check(text)
    except ValueError:
        return
    core = text.strip(" ")
    assert core.isascii() and core.isprintable(), f"{name}({text!r}) -> {value!r}"
    if name.startswith(("port", "whole")):
        assert int(core) == value
    if name == "flag":
        assert core.lower() in checks.FLAG_TRUE + checks.FLAG_FALSE


def test_the_digits_of_other_scripts_are_not_a_port() -> None:
    for text in ("\u0668\u0660\u0668\u0660", "\uff18\uff10\uff18\uff10", "8_080"):
        with pytest.raises(ValueError):
            checks.port(text)
    with pytest.raises(ValueError):
        checks.duration("\u0663\u0660")
