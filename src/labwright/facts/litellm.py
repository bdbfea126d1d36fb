"""pyinfra fact for deploys/litellm.py: the litellm version installed in a venv (None: no venv or no litellm)."""

from __future__ import annotations

from pyinfra.api import FactBase

from labwright.facts.python_stack import VenvPackageVersion


class LitellmVersion(VenvPackageVersion, FactBase):
    """The litellm version in a venv."""

    package = "litellm"


class PrometheusClientVersion(VenvPackageVersion, FactBase):
    """The prometheus-client version in a venv: LiteLLM's prometheus callback needs it, litellm[proxy] lacks it."""

    package = "prometheus_client"
