"""Every git URL labwright passes to git on a guest (``tabbyapi_git_url``, ``openwebui_pipelines_repo``) is checked by
one function, labwright.schema.checks.git_url (sweep at 2b91fd1: ``http://u:p@127.0.0.1:9/x#f`` was accepted:
credentials kept in the inventory, and a fragment git ignores)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.schema.checks import git_url
from labwright.tabbyapi.deploy_data import settings_from as tabbyapi_settings

WORD = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,12}", fullmatch=True)
HOST = st.one_of(st.from_regex(r"[a-z]([a-z0-9-]{0,6}[a-z0-9])?(\.[a-z]{2,5}){1,2}", fullmatch=True),
                 st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(lambda a: f"[{a}]"))
PATH = st.lists(WORD, min_size=1, max_size=3).map("/".join)


@given(scheme=st.sampled_from(["https", "http", "git", "ssh"]), user=WORD, secret=WORD, host=HOST, path=PATH)
def test_a_password_or_token_in_a_git_url_is_refused_and_never_echoed(scheme, user, secret, host, path):
    for text in (f"{scheme}://{user}:{secret}@{host}/{path}", *(() if scheme == "ssh" else
                                                                 (f"{scheme}://{secret}@{host}/{path}",))):
        with pytest.raises(ValueError) as caught:
            git_url(text)
        message = str(caught.value)
        assert "credentials never go in a URL" in message
        shown, wanted = message.split(" holds ")[0], repr(f"{scheme}://***@{host}/{path}")  # its userinfo masked
        assert shown == wanted or (shown.endswith("...") and wanted.startswith(shown[:-3])), message


@given(scheme=st.sampled_from(["https", "http", "git", "ssh"]), host=HOST, path=PATH, fragment=WORD)
def test_good_git_urls_pass_and_a_fragment_is_refused(scheme, host, path, fragment):
    text = f"{scheme}://{host}/{path}.git"
    assert git_url(text) == text
    with pytest.raises(ValueError, match="git ignores a #fragment"):
        git_url(f"{text}#{fragment}")


@pytest.mark.parametrize("text", ["git@github.com:theroyallab/tabbyAPI.git", "ssh://git@github.com/x.git",
                                  "file:///srv/git/tabbyAPI.git", "/srv/git/tabbyAPI.git",
                                  "git://10.99.0.1:9418/tabbyAPI", "http://10.99.0.1:8000/tabbyAPI.git"])
def test_the_forms_git_clone_documents_pass(text):
    assert git_url(text) == text


@pytest.mark.parametrize(("text", "words"), [
    ("--upload-pack=touch /tmp/x", "spaces"), ("--upload-pack=id", "options"), ("ext::sh", "remote helpers"),
    ("ftp://h/x.git", "not a https or http or git or ssh URL"), ("https://[::1/x", "invalid IPv6"),
    ("https://999.1.1.1/x", "not a valid IP address"), ("file://host/x", "absolute path"),
    ("/srv/../etc/x", "absolute path"), ("git@999.1.1.1:x.git", "not a valid IP address"),
])
def test_what_git_would_misread_is_refused_in_one_line(text, words):
    with pytest.raises(ValueError) as caught:
        git_url(text)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_the_tabbyapi_deploy_refuses_credentials_naming_its_key():
    with pytest.raises(Exception) as caught:
        tabbyapi_settings({"tabbyapi_model_name": "m", "tabbyapi_git_url": "https://u:p@example.org/x.git"})
    assert str(caught.value).startswith("tabbyapi_git_url: ") and "u:p" not in str(caught.value)
