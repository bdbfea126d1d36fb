"""The lab pool's storage driver (lab_pool_driver, lab_pool_size): typed when the inventory is read, auto resolved
to btrfs where the host can make it and to dir with the reason where it cannot, an existing pool never re-driven."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.lab import lab as lab_ops
from labwright.lab.spec import POOL_DRIVERS, spec_from_group
from labwright.ui import Reporter

SIZE = re.compile(r"^(\d+(?:\.\d+)?)(B|kB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB)?$")
UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15, "EB": 10**18,
         "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60, None: 1}


def spec(**data: Any):
    return spec_from_group(["@lxd/a1"], {"lab_name": "t", **data}, source="inv.py")


class FakeClient:
    """What choose_pool_driver asks the daemon: the pool, if it exists."""

    def __init__(self, pool: dict[str, Any] | None = None):
        self.pool = pool

    def get_or_none(self, path: str) -> Any:
        assert path == "/1.0/storage-pools/labwright", path
        return self.pool


class Said(Reporter):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


def test_defaults_keep_the_plain_pool_for_a_users_lab():
    s = spec()
    assert (s.pool_driver, s.pool_size) == ("dir", "20GiB")
    assert lab_ops.wanted_objects(s)["storage-pools"] == {"name": "labwright", "driver": "dir",
                                                          "description": "labwright lab t", "config": {}}


def test_a_btrfs_pool_is_a_loop_file_of_the_given_size():
    obj = lab_ops.wanted_objects(spec(lab_pool_driver="btrfs", lab_pool_size="40GiB"), "btrfs")["storage-pools"]
    assert obj["driver"] == "btrfs" and obj["config"] == {"size": "40GiB"}


@given(st.one_of(st.text(max_size=12), st.integers(), st.none(), st.booleans(), st.lists(st.text(max_size=3))))
def test_any_driver_but_the_three_is_refused_naming_the_key(value):
    if isinstance(value, str) and value.strip() in POOL_DRIVERS:
        assert spec(lab_pool_driver=value).pool_driver == value.strip()
        return
    with pytest.raises(BadInput) as err:
        spec(lab_pool_driver=value)
    assert str(err.value).startswith("inv.py: lab_pool_driver ") and "dir" in str(err.value)
    assert "\n" not in str(err.value)


@given(st.one_of(
    st.builds(lambda n, u: f"{n}{u}", st.integers(min_value=0, max_value=10**6),
              st.sampled_from(["", "B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "%", "gib", " GiB", "G"])),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=10), st.integers(), st.booleans(), st.none()))
def test_pool_size_is_an_lxd_size_of_at_least_2gib_or_one_line(value):
    text = str(value).strip()
    match = SIZE.match(text)
    good = (not isinstance(value, bool) and match is not None
            and float(match.group(1)) * UNITS[match.group(2)] >= 2 * 2**30)
    if good:
        assert spec(lab_pool_size=value).pool_size == text
        return
    with pytest.raises(BadInput) as err:
        spec(lab_pool_size=value)
    assert str(err.value).startswith("inv.py: lab_pool_size ") and "\n" not in str(err.value)


def test_cow_refusal_names_what_is_missing(tmp_path, monkeypatch):
    filesystems = tmp_path / "filesystems"
    loop = tmp_path / "loop-control"
    filesystems.write_text("nodev\tsysfs\n\text4\n")
    monkeypatch.setattr(lab_ops.subprocess, "run", lambda *a, **k: None)  # modprobe: nothing changes
    assert "no btrfs" in (lab_ops.cow_refusal(str(filesystems), str(loop)) or "")
    filesystems.write_text("nodev\tsysfs\n\text4\n\tbtrfs\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(lab_ops.shutil, "which", lambda name, path=None: None)
    assert "btrfs-progs" in (lab_ops.cow_refusal(str(filesystems), str(loop)) or "")
    monkeypatch.setattr(lab_ops.shutil, "which", lambda name, path=None: "/usr/sbin/mkfs.btrfs")
    assert "loop devices" in (lab_ops.cow_refusal(str(filesystems), str(loop)) or "")
    loop.write_text("")
    assert lab_ops.cow_refusal(str(filesystems), str(loop)) is None


def test_auto_takes_btrfs_where_it_can_and_says_why_not_where_it_cannot(monkeypatch):
    said = Said()
    monkeypatch.setattr(lab_ops, "cow_refusal", lambda: None)
    assert lab_ops.choose_pool_driver(spec(lab_pool_driver="auto"), FakeClient(), said) == "btrfs"
    monkeypatch.setattr(lab_ops, "cow_refusal", lambda: "no loop devices here (/dev/loop-control is missing)")
    assert lab_ops.choose_pool_driver(spec(lab_pool_driver="auto"), FakeClient(), said) == "dir"
    assert said.lines == ["pool labwright: dir, not btrfs: no loop devices here (/dev/loop-control is missing)"]
    with pytest.raises(BadInput, match="lab_pool_driver btrfs cannot be made here: no loop devices"):
        lab_ops.choose_pool_driver(spec(lab_pool_driver="btrfs"), FakeClient(), said)


def test_an_existing_pool_keeps_its_driver_and_a_different_explicit_one_is_refused(monkeypatch):
    monkeypatch.setattr(lab_ops, "cow_refusal", lambda: None)
    made = {"driver": "dir", "description": "labwright lab t"}
    assert lab_ops.choose_pool_driver(spec(lab_pool_driver="auto"), FakeClient(made), Said()) == "dir"
    with pytest.raises(BadInput, match="pool labwright exists with driver dir; run `labwright lab down`"):
        lab_ops.choose_pool_driver(spec(lab_pool_driver="btrfs"), FakeClient(made), Said())
    btrfs = {"driver": "btrfs", "description": "labwright lab t", "config": {"size": "20GiB"}}
    assert lab_ops.choose_pool_driver(spec(lab_pool_driver="btrfs"), FakeClient(btrfs), Said()) == "btrfs"


def test_an_existing_pool_is_never_planned_again(monkeypatch):
    """A pool is made once: a changed size (or LXD's own keys such as source) plans no update."""
    s = spec(lab_pool_driver="btrfs", lab_pool_size="30GiB")
    pool = {"name": "labwright", "driver": "btrfs", "description": "labwright lab t",
            "config": {"size": "20GiB", "source": "/var/lib/lxd/disks/labwright.img"}}

    class Client:
        def get_or_none(self, path: str) -> Any:
            return pool if path.startswith("/1.0/storage-pools/") else None

    assert "storage-pools" not in lab_ops.plan_infrastructure(s, Client(), "btrfs")  # type: ignore[arg-type]
