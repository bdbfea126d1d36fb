"""pyinfra's SSH client logs two warnings that labwright's own one-line connect error already says; they are dropped so
a bad-host run prints that one line (`labwright bios backup nosuch` printed "Failed to load host keys from
/root/.ssh/known_hosts: [Errno 2] ..." above its error). The real pyinfra functions log here, not copies."""

from __future__ import annotations

import logging

import pytest
from paramiko import SSHException
from pyinfra.connectors.sshuserclient.client import StrictPolicy, get_host_keys

import labwright.hosts.ssh  # noqa: F401  (installs the filter, as every labwright SSH path does)


def test_a_known_hosts_file_that_does_not_exist_yet_is_not_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        get_host_keys((str(tmp_path / "known_hosts"),))
    assert caplog.records == []


def test_a_known_hosts_that_cannot_be_read_still_warns(tmp_path, caplog):
    unreadable = tmp_path / "known_hosts"
    unreadable.mkdir()  # IsADirectoryError: a real problem the user must hear about
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        get_host_keys((str(unreadable),))
    [record] = caplog.records
    assert record.getMessage().startswith(f"Failed to load host keys from {unreadable}: ")


def test_strict_policys_error_is_left_to_the_connect_error_line(caplog):
    with caplog.at_level(logging.WARNING, logger="pyinfra"), pytest.raises(SSHException, match="No host key for"):
        StrictPolicy().missing_host_key(None, "node1.example", None)
    assert caplog.records == []


def test_other_pyinfra_warnings_pass(caplog):
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        logging.getLogger("pyinfra").warning("No host keys filename, not saving key for: %s", "node1")
    assert [r.getMessage() for r in caplog.records] == ["No host keys filename, not saving key for: node1"]
