"""Every host or address labwright reads is judged by one parser, labwright.schema.checks.host_problem: the gateway's
names, the monitoring targets, an SSH target, the cluster's --lead. Copies of their own had drifted (sweep at
6d041d3: the gateway took ``[::1`` and would have written it into the Caddyfile)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from labwright.cli.cluster import check_address
from labwright.errors import BadInput
from labwright.gateway.config import GatewayError, names_of
from labwright.hosts.host_data import check_hostname
from labwright.monitoring.config import MonitoringError, extra_targets
from labwright.schema.checks import host_problem

HOSTISH = st.text(alphabet="[]:.0123456789abcdefABCDEF-xyz", min_size=1, max_size=24)
ADDRESSES = st.one_of(st.ip_addresses().map(str), st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z]{2,6}){0,2}",
                                                                 fullmatch=True))


def _accepted(call, *errors) -> bool:
    try:
        call()
    except errors:
        return False
    return True


@given(HOSTISH)
@example("[::1")
@example("[::1]")
@example("[10.0.0.1]")
@example("999.1.1.1")
@example("::1]")
@example("[[::1]]")
def test_every_reader_of_a_host_agrees_with_the_one_parser(text):
    bracketed = host_problem(text, brackets=True) is None
    assert _accepted(lambda: names_of([text], []), GatewayError) == bracketed
    assert _accepted(lambda: check_hostname(text), BadInput) == bracketed
    assert _accepted(lambda: check_address(text, "--lead"), BadInput) == (host_problem(text) is None)
    if bracketed and ":" in text and not text.startswith("["):
        return  # an IPv6 address needs brackets before a port: HOST:PORT cannot hold it bare
    assert _accepted(lambda: extra_targets(f"{text}:9400", "guest"), MonitoringError) == bracketed


@given(ADDRESSES)
def test_real_addresses_and_names_pass_everywhere(text):
    assert host_problem(text) is None
    names_of([text], [])
    check_hostname(text)
    check_address(text, "--lead")
    if ":" in text:
        assert host_problem(f"[{text}]", brackets=True) is None
        extra_targets(f"[{text}]:9400", "guest")
    else:
        extra_targets(f"{text}:9400", "guest")


@pytest.mark.parametrize("text", ["[::1", "::1]", "[10.0.0.1]", "[]", "[[::1]]", "[::1]x"])
def test_brackets_only_as_a_whole_pair_around_ipv6(text):
    assert host_problem(text, brackets=True) is not None
