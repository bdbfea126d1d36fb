from __future__ import annotations

import itertools

import pytest

from labwright.testing.waiting import wait_for


def test_returns_the_first_truthy_answer() -> None:
    answers = itertools.chain([None, 0, ""], itertools.repeat("ready"))
    assert wait_for("the third poll", lambda: next(answers), timeout=5, every=0.01) == "ready"


def test_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"^timed out after 0.05s waiting for the unit to start$"):
        wait_for("the unit to start", lambda: False, timeout=0.05, every=0.01)
