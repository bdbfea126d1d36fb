"""pyinfra facts labwright adds (one module per tool, as pyinfra's own facts)."""
