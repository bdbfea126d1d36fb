"""The small test kit labwright ships for its users (as pyinfra ships only its ``@fake`` connector).

- :mod:`labwright.testing.lab_fixture`: pytest fixtures giving fresh containers in a real local LXD lab
  (``pytest_plugins = ["labwright.testing.lab_fixture"]``).
- :mod:`labwright.testing.pyinfra_output`: run ``pyinfra`` as a subprocess and read what it changed.

Everything else labwright's own tests use (stand-ins, doubles, the PVE simulator) lives in the repository's
``tests/support/`` and is not installed.
"""
