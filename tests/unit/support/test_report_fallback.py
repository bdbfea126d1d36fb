"""A failing test whose report pytest cannot format (CPython 3.11's AST SystemError, python/cpython#106905) is still
reported as a failure, and the run goes on: before, it was an INTERNALERROR that ended the whole suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[2] / "support"


def test_a_report_the_ast_bug_breaks_is_made_natively_and_the_run_goes_on(tmp_path):
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(SUPPORT.parent)!r})\n"
                                          "pytest_plugins = ['support.report_fallback']\n")
    (tmp_path / "test_broken.py").write_text(
        "import _pytest._code.source as source\n"
        "def test_fails(monkeypatch):\n"
        "    def parse(*args, **kwargs):\n"
        "        raise SystemError('AST constructor recursion depth mismatch (before=147, after=30)')\n"
        "    monkeypatch.setattr(source.ast, 'parse', parse)\n"
        "    assert 1 == 2, 'the failure itself'\n"
        "def test_after():\n"
        "    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    output = run.stdout + run.stderr
    assert "INTERNALERROR" not in output, output[-3000:]
    assert "1 failed, 1 passed" in output and "the failure itself" in output, output[-3000:]
