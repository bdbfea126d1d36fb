"""Metrics for the lab's engines: Prometheus and node-exporter from the distribution (deploys/monitoring.py)."""
