"""A pytest hook the suite loads from tests/conftest.py (kept here so a test can load it alone)."""

from __future__ import annotations

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure's report is made again with native tracebacks where pytest's own source lookup (ast.parse) hits
    CPython 3.11's "AST constructor recursion depth mismatch" SystemError (python/cpython#106905, fixed in 3.12;
    pytest-dev/pytest#10763): otherwise it is an INTERNALERROR that ends the whole run, every later test unrun and
    the failure itself unreported (a full run here stopped after 441 of 7,234 tests)."""
    outcome = yield
    error = outcome.exception
    if isinstance(error, SystemError) and "recursion depth mismatch" in str(error):
        style = item.config.option.tbstyle
        item.config.option.tbstyle = "native"
        try:
            outcome.force_result(pytest.TestReport.from_item_and_call(item, call))
        finally:
            item.config.option.tbstyle = style
