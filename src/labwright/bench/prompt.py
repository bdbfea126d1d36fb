"""Prompts of a requested length in tokens.

The text is plain English-like filler from a seeded word list, opened by a per-trial nonce so that no two trials share
a prefix (a server's prompt cache would otherwise skip the prefill being measured). With the server's ``/tokenize``
the length is corrected until it is within a few tokens of the target; without it the length comes from the
characters-per-token ratio measured by calibration requests, and the actual count is what the server reports back in
``usage``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or has had not "
    "but their one its new after first two been also they who all more other into time over may most some "
    "only would where when there these than about many then them years could she such through during city "
    "under between both while known three before later season school being part several since well team early "
    "world national second called along until house state made used found took same long life water river "
    "north south east west light stone field market garden winter summer morning evening road bridge village "
    "harbor mountain forest island valley station library museum kitchen window letter story music paper "
    "engine signal memory number table column answer question reason method result change order power"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int  # by the server's tokenizer when exact, else estimated
    exact: bool


def filler(chars: int, seed: int) -> str:
    """At least ``chars`` characters of words; the same seed always gives the same words, so shorter is a prefix."""
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def build(target: int, seed: int, chars_per_token: float, count: Callable[[str], int | None],
          tolerance: int | None = None) -> Prompt:
    """Text of ``target`` tokens (within ``tolerance``: by default 0.5% or 2 tokens, whichever is more)."""
    tolerance = tolerance if tolerance is not None else max(2, target // 200)
    head = f"{hashlib.sha256(str(seed).encode()).hexdigest()[:12]} benchmark. "  # differs from its first token
    ratio = max(chars_per_token, 0.5)
    text = head + filler(max(1, round(target * ratio) - len(head)), seed)
    for _ in range(8):
        counted = count(text)
        if counted is None:
            return Prompt(text, max(1, round(len(text) / ratio)), exact=False)
        if abs(counted - target) <= tolerance:
            return Prompt(text, counted, exact=True)
        ratio = len(text) / max(counted, 1)
        wanted = max(len(head) + 1, len(text) + round((target - counted) * ratio))
        text = (head + filler(wanted, seed))[:wanted].rstrip()
    counted = count(text)
    return Prompt(text, counted if counted is not None else round(len(text) / ratio), exact=counted is not None)
