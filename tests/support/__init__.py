"""The test kit: stand-ins, doubles, the PVE simulator, wheel builders, the netns corosync cluster.

Importable as ``support`` (pytest's ``pythonpath = ["tests"]``; benchmarks add ``tests/`` themselves). None of it ships:
users get only :mod:`labwright.testing` (the lab fixtures and pyinfra run results).
"""
