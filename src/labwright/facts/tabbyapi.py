"""pyinfra fact: the tabbyAPI files that decide how n-gram drafting is turned on, as text.

model.py, config_sample.yml and config.yml travel base64-encoded, one line each, so comments, blank lines, tabs
and trailing spaces reach the pure planner (labwright.tabbyapi.ngram) byte for byte: pyinfra splits and strips
a fact's output by line, which would otherwise lose exactly the indentation the patch must copy.

**Example:**

.. code:: python

    from labwright.facts.tabbyapi import TabbyapiNgramFiles
    texts = host.get_fact(TabbyapiNgramFiles, source="/opt/tabbyapi")
    texts.model_py, texts.config
"""

from __future__ import annotations

import base64
import binascii
import posixpath

from pyinfra.api import FactBase

from labwright.shell import quote
from labwright.tabbyapi.ngram import CONFIG, CONFIG_SAMPLE, MODEL_PY, TabbyTexts

_MARK = "@@labwright-tabbyapi-"


def config_path(source: str, config: str | None) -> str:
    return config or posixpath.join(source, CONFIG)


class TabbyapiNgramFiles(FactBase[TabbyTexts]):
    """``TabbyTexts`` for a tabbyAPI checkout on the host (a missing file reads as None).

    + source: the checkout (``/opt/tabbyapi``)
    + config: the config.yml tabbyAPI reads (default ``SOURCE/config.yml``)
    """

    def command(self, source: str, config: str | None = None) -> str:
        parts = []
        for key, path in self._paths(source, config).items():
            quoted = quote(path)
            parts.append(f"echo {_MARK}{key}; if [ -f {quoted} ]; then base64 -w0 < {quoted}; echo; "
                         f"else echo {_MARK}absent; fi")
        return "; ".join(parts)

    @staticmethod
    def _paths(source: str, config: str | None) -> dict[str, str]:
        return {"model_py": posixpath.join(source, MODEL_PY), "config_sample": posixpath.join(source, CONFIG_SAMPLE),
                "config": config_path(source, config)}

    def process(self, output: list[str]) -> TabbyTexts:
        sections: dict[str, str | None] = {}
        current: str | None = None
        for line in output:
            if line.startswith(_MARK):
                name = line.removeprefix(_MARK).strip()
                if name == "absent" and current:
                    sections[current] = None
                else:
                    current = name
                    sections[current] = ""
            elif current is not None and sections.get(current) is not None:
                sections[current] = (sections[current] or "") + line.strip()
        texts = {key: _decode(value) for key, value in sections.items()}
        return TabbyTexts(texts.get("model_py"), texts.get("config_sample"), texts.get("config"))


def _decode(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
