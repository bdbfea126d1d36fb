"""pyinfra operations labwright adds (one module per tool, with a facts twin in labwright.facts)."""
