"""Test helpers labwright ships for its users: a pytest plugin giving fresh lab containers."""
