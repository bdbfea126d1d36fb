"""The deploys' Jinja2 templates and defaults.toml, one folder per tool.

Installed as the package ``labwright.data.templates`` (setup.py maps this folder in, for a wheel and an editable
install alike); read with ``labwright.paths.templates_dir(TOOL)``. This file only makes the folder a package.
"""
