"""Snapshot names and the keep-last-N rule (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from labwright.errors import BadInput
from labwright.snapshots.model import (
    NAME_RULE,
    Snapshot,
    check_user_name,
    free_name,
    latest_ours,
    make_name,
    parse_ours,
    snapshot_from,
    step_slug,
    to_prune,
)

T0 = datetime(2026, 11, 24, 6, 24, 41, tzinfo=UTC)


def test_name_carries_step_and_utc_time_and_fits_pve_rule():
    name = make_name("stack-switch", T0)
    assert name == "labwright-stack-switch-20261124T062441Z"
    assert NAME_RULE.match(name) and len(name) <= 40
    assert parse_ours(name) == ("stack-switch", T0)
    local = T0.astimezone(__import__("datetime").timezone(timedelta(hours=2)))
    assert make_name("stack-switch", local) == name  # always UTC


@pytest.mark.parametrize("step", ["tabbyAPI ref change", "package upgrades!", "desktop", "x" * 80])
def test_any_step_gives_a_name_both_backends_accept(step):
    name = make_name(step, T0)
    assert NAME_RULE.match(name) and len(name) <= 40, name
    assert parse_ours(name) is not None


def test_step_without_letters_is_refused():
    with pytest.raises(BadInput, match="'!!!' has no letter or digit"):
        step_slug("!!!")


def test_same_second_gets_the_next_free_second():
    first = make_name("pkg", T0)
    second = free_name("pkg", T0, {first})
    assert second == make_name("pkg", T0 + timedelta(seconds=1))
    assert parse_ours(second)[1] > parse_ours(first)[1]  # type: ignore[index]


@pytest.mark.parametrize("name, needle", [
    ("a", "2-40 letters"), ("1abc", "starting with a letter"), ("has space", "2-40 letters"),
    ("x" * 41, "2-40 letters"), ("a/b", "2-40 letters"), ("current", "reserved"), ("vzdump", "reserved"),
    ("labwright-mine", "labwright's own"),
])
def test_user_names_refused_with_the_fix(name, needle):
    with pytest.raises(BadInput, match=needle) as info:
        check_user_name(name, "@lxd/llm1")
    assert "@lxd/llm1" in str(info.value) and "\n" not in str(info.value)


def test_user_names_accepted():
    for name in ("before-upgrade", "Mine_2", "ab"):
        check_user_name(name, "@lxd/llm1")


def test_prune_keeps_newest_n_of_labwrights_and_never_users():
    ours = [snapshot_from(make_name("stack-switch", T0 + timedelta(minutes=i)), None) for i in range(5)]
    users = [Snapshot("mine", T0 - timedelta(days=9)), Snapshot("labwright-not-a-stamp", T0 - timedelta(days=9))]
    pruned = to_prune([*users, *reversed(ours)], keep=2)
    assert [s.name for s in pruned] == [s.name for s in ours[:3]]  # oldest first
    assert to_prune(ours, keep=10) == []
    with pytest.raises(BadInput, match="keep at least 1"):
        to_prune(ours, keep=0)


def test_latest_ours_is_by_time_in_name_not_listing_order():
    older = snapshot_from(make_name("a", T0), T0 + timedelta(days=1))  # created field disagrees: name wins
    newer = snapshot_from(make_name("b", T0 + timedelta(seconds=5)), T0)
    assert latest_ours([newer, older, Snapshot("mine", T0 + timedelta(days=3))]) == newer
    assert latest_ours([Snapshot("mine", T0)]) is None
