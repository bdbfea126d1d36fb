"""testinfra checks of what deploys/desktop.py promises, on a deployed desktop guest.

    labwright verify desktop --hosts=@lxd/desk1
    LABWRIGHT_DESKTOP_USER=anna labwright verify desktop --hosts=@ssh/root@ADDR

Expected values: what the deploy recorded on the guest (/etc/labwright/desktop.json), overridden by
$LABWRIGHT_DESKTOP_USER, $LABWRIGHT_DESKTOP_PORT, $LABWRIGHT_DESKTOP_LISTEN and $LABWRIGHT_DESKTOP_FIREFOX_SOURCE.
The checks are labwright.desktop.checks, the same ones `labwright desktop check` runs, so each failure names
field note 003's cause and fix (grey screen: no Xorg backend; launcher that does nothing: XFCE's trust flag; caja's
complaint; Chrome "offline" in an unprivileged container), plus listeners, TLS, origin and confinement.
"""

from __future__ import annotations

import os

import pytest

from labwright.desktop.checks import CHECKS, Expected, read_record
from labwright.hosts.testinfra import TestinfraHost


@pytest.fixture(scope="module")
def desktop_expected(host) -> Expected:
    overrides = {
        "user": os.environ.get("LABWRIGHT_DESKTOP_USER"),
        "port": os.environ.get("LABWRIGHT_DESKTOP_PORT"),
        "listen": os.environ.get("LABWRIGHT_DESKTOP_LISTEN"),
        "firefox_source": os.environ.get("LABWRIGHT_DESKTOP_FIREFOX_SOURCE"),
    }
    return read_record(TestinfraHost(host), overrides)


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_desktop(host, desktop_expected, check):
    result = check(TestinfraHost(host), desktop_expected)
    assert result.ok, f"{result.name}: {result.detail}; cause: {result.cause}; fix: {result.fix}"


def test_desktop_user_exists_with_a_password(host, desktop_expected):
    user = host.user(desktop_expected.user)
    assert user.exists, f"user {desktop_expected.user} does not exist: run deploys/desktop.py"
    shadow = host.run(f"getent shadow {desktop_expected.user} | cut -d: -f2").stdout.strip()
    assert shadow.startswith("$"), f"{desktop_expected.user} has no usable password ({shadow[:2]!r}): set one"


def test_xrdp_services_enabled(host):
    for unit in ("xrdp", "xrdp-sesman"):
        service = host.service(unit)
        assert service.is_enabled and service.is_running, f"{unit} is not enabled and running"
