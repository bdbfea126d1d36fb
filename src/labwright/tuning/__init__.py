"""Tuning tools: KV-cache maths from config.json (kv), the fit check (fit); the probe and bench come later."""
