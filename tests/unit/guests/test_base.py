"""Dispatch from a spec to its backend, without a daemon."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput, OperationFailed
from labwright.guests import base
from labwright.guests.base import BackendPool, backend_class, backend_for
from labwright.guests.lxd import LxdBackend
from labwright.guests.model import spec_from_data


def test_lxd_specs_get_the_lxd_backend():
    assert backend_class("lxd") is LxdBackend


def test_unknown_lxd_remote_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setenv("LXD_CONF", str(tmp_path))
    (tmp_path / "config.yml").write_text("default-remote: local\nremotes: {}\n")
    with pytest.raises(BadInput, match="LXD remote 'nas' is not configured"):
        backend_for(spec_from_data("@lxd/nas:web", {"backend": "lxd"}))
    with pytest.raises(BadInput, match="LXD remote 'nas' is not configured"), BackendPool() as pool:
        pool.get(spec_from_data("@lxd/nas:web", {"backend": "lxd"}))


def test_a_backend_module_that_is_not_there_is_one_line(monkeypatch):
    monkeypatch.setitem(base.BACKEND_CLASSES, "lxd", ("labwright.guests.not_written_yet", "Backend"))
    with pytest.raises(OperationFailed, match="the lxd guest backend is not available yet"):
        backend_class("lxd")
