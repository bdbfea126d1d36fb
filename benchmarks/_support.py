"""Benchmarks run as scripts from a checkout: make the test kit in tests/support importable as ``support``."""

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
