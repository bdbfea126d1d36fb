"""labwright/verify/test_security.py's parsing, on the outputs the real tools print (ss from iproute2 6.1,
systemd-analyze 252), and on generated listener tables."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from labwright.verify.test_security import ask_address, exposure_of, listeners, unpinned_environments

# `ss -Hltn` in a Debian 12 lab container with sshd, a loopback engine, a wildcard one and an IPv6 one.
SS = """\
LISTEN 0      128          0.0.0.0:22         0.0.0.0:*
LISTEN 0      5          127.0.0.1:8001       0.0.0.0:*
LISTEN 0      4096   127.0.0.53%lo:53         0.0.0.0:*
LISTEN 0      5            0.0.0.0:18401      0.0.0.0:*
LISTEN 0      128             [::]:22            [::]:*
LISTEN 0      5              [::1]:8880          [::]:*
LISTEN 0      5      [fd42::5]:4000              [::]:*
LISTEN 0      5                  *:9090             *:*
"""


def test_loopback_listeners_are_left_out_and_wildcards_asked_on_loopback():
    found = listeners(SS)
    assert found == {22: "0.0.0.0", 18401: "0.0.0.0", 4000: "fd42::5", 9090: "*"}
    assert ask_address(found[22]) == ask_address(found[9090]) == "127.0.0.1"
    assert ask_address(found[4000]) == "fd42::5"


def test_the_score_is_read_from_systemd_analyze_s_last_line():
    out = ("  NAME  DESCRIPTION  EXPOSURE\n✓ PrivateNetwork= ...\n\n"
           "→ Overall exposure level for llama-server.service: 1.8 OK 🙂\n")
    assert exposure_of(out) == 1.8
    assert exposure_of("Failed to connect to bus") is None


ADDRESSES = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str),
                      st.sampled_from(["0.0.0.0", "::", "*", "127.0.0.1", "::1", "127.0.0.53%lo"]))


@given(st.lists(st.tuples(ADDRESSES, st.integers(1, 65535)), max_size=20))
def test_every_listener_beyond_loopback_is_found_and_none_on_it(rows):
    text = "".join(f"LISTEN 0 5 {f'[{a}]' if ':' in a else a}:{p} 0.0.0.0:*\n" for a, p in rows)
    found = listeners(text)

    def loopback(address: str) -> bool:
        bare = address.split("%", 1)[0]
        return bare not in ("0.0.0.0", "::", "*") and ipaddress.ip_address(bare).is_loopback

    wanted: dict[int, str] = {}
    for address, port in rows:
        if not loopback(address):
            wanted.setdefault(port, address)
    assert found == wanted


def test_stack_environments_without_pinned_dependencies_are_named():
    """`PATH<TAB>manifest` lines as the suite lists /opt/labwright/stacks/*/stack.json; the manifests are what
    labwright.stacks.build writes (its ``dependencies``) and layout.adopt writes for a plain venv."""
    root = "/opt/labwright/stacks"
    listing = "".join(f"{root}/{name}/stack.json\t{text}\n" for name, text in (
        ("A-1", '{"stack": "A", "dependencies": {"pinned": true, "lock": "dependencies.lock", "count": 3}}'),
        ("B-2", '{"stack": "B", "dependencies": {"pinned": false, "lock": null, "count": 0}}'),
        ("C-3", '{"stack": "C", "wheels": []}'),
        ("original-4", '{"stack": "original", "adopted_from": "/opt/tabbyapi/.venv", "wheels": []}'),
        ("D-5", "{not json"),
    ))
    assert unpinned_environments(listing) == [
        f"{root}/B-2 (stack B): its dependencies were installed WITHOUT hashes (stack_unpinned_dependencies=true); "
        "switch again without it to pin them",
        f"{root}/C-3 (stack C) was built before stack dependency locks: what its wheels require was installed without "
        "hashes; switch to the stack again to rebuild it pinned",
        f"{root}/D-5: its stack.json is not JSON",
    ]
    assert unpinned_environments("") == []
