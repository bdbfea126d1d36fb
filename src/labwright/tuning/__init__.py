"""Tuning tools: KV-cache maths from config.json (kv), the fit check (fit), the context-ceiling probe (probe)."""
