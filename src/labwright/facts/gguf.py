"""pyinfra fact: a GGUF's size and header as the guest has it, for the fit of a model that lives there.

**Example:**

.. code:: python

    head = host.get_fact(GgufHead, path="/srv/models/a.gguf", limit=16 << 20)
    if head is None:
        ...  # refuse: no such regular file
    size, first_bytes = head
"""

from __future__ import annotations

import base64
import binascii
import gzip
import zlib

from pyinfra.api import FactBase

from labwright.shell import quote

_SIZE = "@@labwright-size="


class GgufHead(FactBase):
    """(size in bytes, the first ``limit`` bytes) of the regular file ``path``; None when there is none (or root
    cannot read it). The bytes travel gzipped (a header is mostly names; the start of a short or sparse file, zeros) and
    base64-encoded on one line."""

    def command(self, path: str, limit: int) -> str:
        quoted = quote(path)
        return (f"if [ -f {quoted} ] && [ -r {quoted} ]; then echo {_SIZE}$(stat -L -c %s {quoted}); "
                f"head -c {int(limit)} {quoted} | gzip -1 | base64 -w0; echo; else echo missing; fi")

    def requires_command(self, path: str, limit: int) -> str:
        return "gzip"

    def process(self, output: list[str]) -> tuple[int, bytes] | None:
        if not output or not output[0].startswith(_SIZE):
            return None
        size = output[0].removeprefix(_SIZE).strip()
        try:
            return int(size), gzip.decompress(base64.b64decode("".join(output[1:]).strip(), validate=True))
        except (ValueError, binascii.Error, OSError, EOFError, zlib.error):
            return None
