"""Open WebUI: deploys/openwebui.py's pure configuration and its wheelhouse."""
