"""Wheel compatibility: the wheels matrix, the resolver and checker, and the ABI verifier (abi)."""
