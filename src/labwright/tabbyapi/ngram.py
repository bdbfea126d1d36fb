"""n-gram drafting for tabbyAPI, version-aware, as pure logic over file texts (no host access).

Two upstream shapes exist (docs/tabbyapi-ngram.md):

- config era (tabbyAPI >= 004e837, 2026-06-13): ``draft_model.draft_mode: ngram`` and
  ``draft_model.ngram_match_min`` in config.yml; the source is left alone.
- patch era (the tabbyAPI field note 001 patched): the ``AsyncGenerator(`` call in backends/exllamav3/model.py ends with
  ``num_draft_tokens=self.draft_num_tokens,`` and passes no n-gram argument; ``ngram_match_min=N,`` is inserted
  after that argument with its indentation.

Anything else is "unrecognised" and says which file and which anchor it looked for: field note 001's ``sed`` silently
did nothing there. A configured draft model is "refused": exllamav3 asserts when both are set.
"""

from __future__ import annotations

import difflib
import posixpath
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from labwright import textio
from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.tabbyapi import config_edit
from labwright.tabbyapi.pycall import (
    SourceShapeError,
    calls_named,
    find_sequence,
    keyword_value,
    line_offsets,
    tokens_of,
    top_level,
)
from labwright.textio import ascii_digits

MODEL_PY = "backends/exllamav3/model.py"
CONFIG_SAMPLE = "config_sample.yml"
CONFIG = "config.yml"
CALL = "AsyncGenerator"
ANCHOR = "num_draft_tokens=self.draft_num_tokens,"
KEYWORD = "ngram_match_min"
DEFAULT_MATCH_MIN = 3
_ANCHOR_TOKENS = ["num_draft_tokens", "=", "self", ".", "draft_num_tokens", ","]

Mode = Literal["config", "patch", "already", "refused", "unrecognised"]


class ShapeUnrecognised(OperationFailed):
    """The tabbyAPI source has neither known shape: nothing was changed."""


class ConfigUnusable(BadInput):
    """The config.yml cannot be read or edited as it is written (not a mapping, broken YAML, a duplicate key, an
    unusual layout): the user's file is the cause, so bad input (exit 2); the message says how to fix it."""


class DraftModelConfigured(SafetyCheckFailed):
    """A draft model is configured; exllamav3 asserts when n-gram drafting is added to it."""


@dataclass(frozen=True)
class NgramChange:
    """What to do: ``mode``, the ``file`` it concerns, its unified ``diff`` and full ``new_text`` (None: no change).

    ``message`` is the one-line reason for refused/unrecognised, or a summary otherwise.
    """

    mode: Mode
    file: str
    diff: str = ""
    new_text: str | None = None
    message: str = ""
    #: "unrecognised" because of the config.yml itself (not the tabbyAPI source): bad input.
    config_unusable: bool = False

    @property
    def ok(self) -> bool:
        return self.mode in ("config", "patch", "already")

    def as_json(self) -> dict[str, str]:
        return {"mode": self.mode, "file": self.file, "diff": self.diff}

    def raise_for_mode(self) -> None:
        if self.mode == "refused":
            raise DraftModelConfigured(self.message)
        if self.mode == "unrecognised":
            raise ConfigUnusable(self.message) if self.config_unusable else ShapeUnrecognised(self.message)


@dataclass(frozen=True)
class TabbyTexts:
    """The files that decide the shape, as texts (None: the file does not exist) and the paths to name."""

    model_py: str | None
    config_sample: str | None
    config: str | None
    model_py_path: str = MODEL_PY
    config_path: str = CONFIG
    root: str = ""

    def label(self, path: str) -> str:
        """The diff's name for ``path``: relative to the checkout, as ``git diff`` would print it."""
        if self.root and (path == self.root or path.startswith(self.root.rstrip("/") + "/")):
            return posixpath.relpath(path, self.root)
        return path


#: The longest match labwright writes when config.yml does not say the context length (model.max_seq_len).
#: exllamav3 (turboderp-org/exllamav3 4f8ad01, v1.4.1) drafts only when the suffix automaton's longest match of the
#: job's token sequence reaches ngram_match_min (generator/job.py get_ngram_draft: ``end - beg >=
#: self.generator.ngram_match_min``); that match is an int32 counter (exllamav3_ext/sam.cpp advance_match) and is
#: always shorter than the sequence, which the KV cache bounds. tabbyAPI (theroyallab/tabbyAPI e632af4,
#: common/config_models.py DraftModelConfig.ngram_match_min, default 2; backends/exllamav3/model.py) only refuses
#: values <= 0, so a value at or above the context is accepted and drafting silently never fires. 2^20 tokens is
#: above the context any single-host tabbyAPI serves; with max_seq_len in config.yml that is the bound instead.
MATCH_MIN_CEILING = 1 << 20


def check_match_min(value: int, context: int | None = None) -> int:
    """``value`` when n-gram drafting can fire with it: 1 <= value < the context length (``context``, from
    config.yml's model.max_seq_len, else MATCH_MIN_CEILING + 1); BadInput naming --min and the range otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"--min {value!r}: n-gram match length must be a whole number >= 1 (tabbyAPI's default is 2, "
                       "field note 001 used 3)")
    if context is not None and value >= context:
        raise BadInput(f"--min {value}: a match that long never happens within config.yml's model.max_seq_len "
                       f"{context}, so drafting would never fire; use a small value such as 2 or 3")
    if value > MATCH_MIN_CEILING:
        raise BadInput(f"--min {value}: longer than any context ({MATCH_MIN_CEILING} tokens), so drafting would "
                       "never fire; use a small value such as 2 or 3 (tabbyAPI's default is 2)")
    return value


def unified_diff(before: str, after: str, label: str) -> str:
    name = label.lstrip("/")
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{name}", tofile=f"b/{name}"))


def plan_ngram(texts: TabbyTexts, match_min: int = DEFAULT_MATCH_MIN) -> NgramChange:
    """Decide and compute the change for one tabbyAPI tree. Never raises for a shape; see ``raise_for_mode``."""
    check_match_min(match_min)
    try:
        draft = config_edit.draft_section(texts.config or "")
        context = config_edit.max_seq_len(texts.config or "")
    except config_edit.ConfigShapeError as exc:
        return NgramChange("unrecognised", texts.config_path, message=f"{texts.config_path} {exc}",
                           config_unusable=True)
    check_match_min(match_min, context)
    if texts.model_py is None:
        return NgramChange("unrecognised", texts.model_py_path, message=(
            f"{texts.model_py_path} not found: is this a tabbyAPI checkout? (expected the `{CALL}(` call with "
            f"`{ANCHOR}`)"))
    modern = config_era(texts)
    in_use = draft_in_use(draft, modern)
    if in_use:
        return NgramChange("refused", texts.config_path, message=(
            f"{texts.config_path}: {in_use}; exllamav3 cannot draft with a model and n-grams at once (it asserts): "
            "clear it to use n-gram drafting, or skip n-gram"))
    if modern:
        return _plan_config(texts, match_min)
    return plan_patch(texts.model_py, texts.model_py_path, match_min, texts.label(texts.model_py_path))


def draft_in_use(draft: dict[str, object], modern: bool) -> str | None:
    """What configures model-based drafting, or None.

    Config-era tabbyAPI uses ``draft_model_name`` only in ``draft_mode: model`` (its default) and drafts with the
    model's own MTP head in ``mtp``; patch-era tabbyAPI loads any named draft model.
    """
    name = draft.get("draft_model_name")
    if not modern:
        return f"draft_model.draft_model_name is {name!r}" if name else None
    mode = draft.get("draft_mode") or "model"
    if mode == "mtp":
        return "draft_model.draft_mode is 'mtp' (the model's own draft head)"
    if mode == "model" and name:
        return f"draft_model.draft_model_name is {name!r} with draft_mode: model"
    return None


def config_era(texts: TabbyTexts) -> bool:
    """True where tabbyAPI reads draft_mode/ngram_match_min from its config (since 004e837)."""
    sample = texts.config_sample or ""
    try:
        section = config_edit.draft_section(sample)
    except config_edit.ConfigShapeError:
        section = {}
    if "draft_mode" in section and KEYWORD in section:
        return True
    # A trimmed checkout without config_sample.yml: the call itself passing the setting tells the same.
    try:
        value = _call_value(texts.model_py or "")
    except SourceShapeError:
        return False
    return value is not None and bool(value) and value[0].string == "self"


def _call_value(source: str) -> list[tokenize.TokenInfo] | None:
    calls = [c for c in calls_named(tokens_of(source), CALL) if find_sequence(top_level(c), _ANCHOR_TOKENS) is not None]
    return keyword_value(top_level(calls[0]), KEYWORD) if len(calls) == 1 else None


def _plan_config(texts: TabbyTexts, match_min: int) -> NgramChange:
    before = texts.config or ""
    try:
        after = config_edit.set_draft_keys(before, {"draft_mode": "ngram", KEYWORD: match_min})
    except config_edit.ConfigShapeError as exc:
        return NgramChange("unrecognised", texts.config_path, message=f"{texts.config_path} {exc}",
                           config_unusable=True)
    if after == before:
        return NgramChange("already", texts.config_path,
                           message=f"{texts.config_path} already sets draft_mode: ngram, {KEYWORD}: {match_min}")
    return NgramChange("config", texts.config_path, unified_diff(before, after, texts.label(texts.config_path)), after,
                       f"{texts.config_path}: draft_model.draft_mode: ngram, {KEYWORD}: {match_min}")


def _unrecognised(path: str, why: str) -> NgramChange:
    return NgramChange("unrecognised", path, message=(
        f"{path}: {why}; expected `{ANCHOR}` inside the `{CALL}(` call (patch-era tabbyAPI) or "
        f"draft_model.{KEYWORD} in {CONFIG_SAMPLE} (since 2026-06-13): nothing changed, patch by hand or pin a "
        "known tabbyAPI ref"))


def plan_patch(source: str, path: str = MODEL_PY, match_min: int = DEFAULT_MATCH_MIN,
               label: str | None = None) -> NgramChange:
    """Insert (or update) ``ngram_match_min=N,`` after the anchor inside the ``AsyncGenerator(`` call."""
    try:
        calls = calls_named(tokens_of(source), CALL)
    except SourceShapeError as exc:
        return _unrecognised(path, str(exc))
    if not calls:
        return _unrecognised(path, f"no `{CALL}(` call")
    holding = [c for c in calls if find_sequence(top_level(c), _ANCHOR_TOKENS) is not None]
    if not holding:
        where = "appears outside it" if ANCHOR.rstrip(",") in source else "is missing"
        return _unrecognised(path, f"the `{CALL}(` call has no `{ANCHOR}` argument (the anchor {where})")
    if len(holding) > 1:
        return _unrecognised(path, f"{len(holding)} `{CALL}(` calls carry `{ANCHOR}`; cannot tell which to patch")
    args = top_level(holding[0])
    offsets = line_offsets(source)
    existing = keyword_value(args, KEYWORD)
    if existing is not None:
        return _update_existing(source, path, existing, match_min, offsets, label or path)
    anchor_at = find_sequence(args, _ANCHOR_TOKENS) or 0  # not None: the call was kept for holding it
    comma = args[anchor_at + len(_ANCHOR_TOKENS) - 1]
    after = _insert_after(source, comma, match_min, offsets)
    return NgramChange("patch", path, unified_diff(source, after, label or path), after,
                       f"{path}: {KEYWORD}={match_min} added to the {CALL}( call")


def _update_existing(source: str, path: str, value: list[tokenize.TokenInfo], match_min: int,
                     offsets: list[int], label: str) -> NgramChange:
    if len(value) != 1 or value[0].type != tokenize.NUMBER or not ascii_digits(value[0].string):
        shown = " ".join(t.string for t in value) or "nothing"
        return _unrecognised(path, f"the `{CALL}(` call already passes {KEYWORD}={shown}, not a number")
    if int(value[0].string) == match_min:
        return NgramChange("already", path, message=f"{path} already passes {KEYWORD}={match_min}")
    start = offsets[value[0].start[0]] + value[0].start[1]
    end = offsets[value[0].end[0]] + value[0].end[1]
    after = source[:start] + str(match_min) + source[end:]
    return NgramChange("patch", path, unified_diff(source, after, label), after,
                       f"{path}: {KEYWORD} {value[0].string} -> {match_min} in the {CALL}( call")


def _insert_after(source: str, comma: tokenize.TokenInfo, match_min: int, offsets: list[int]) -> str:
    row, col = comma.end
    line = source[offsets[row]:offsets[row + 1]] if row + 1 < len(offsets) else source[offsets[row]:]
    body = line.rstrip("\r\n")
    rest = body[col:].strip()
    if rest and not rest.startswith("#"):
        # More arguments follow on the same line: stay on it.
        at = offsets[row] + col
        return f"{source[:at]} {KEYWORD}={match_min},{source[at:]}"
    indent = body[:len(body) - len(body.lstrip(" \t"))]
    ending = line[len(body):] or "\n"
    at = offsets[row] + len(line)
    prefix = source[:at] if line.endswith("\n") else source[:at] + ending
    return f"{prefix}{indent}{KEYWORD}={match_min},{ending}{source[at:]}"


def read_tree(source_dir: Path, config: Path | None = None) -> TabbyTexts:
    """The deciding files of a local checkout; BadInput when the directory itself is unusable."""
    if not source_dir.is_dir():
        raise BadInput(f"--source {source_dir}: not a directory; pass the tabbyAPI checkout (e.g. /opt/tabbyapi)")
    if not (source_dir / "main.py").exists() and not (source_dir / MODEL_PY).exists():
        raise BadInput(f"--source {source_dir}: not a tabbyAPI checkout (no main.py, no {MODEL_PY}); pass the "
                       "directory tabbyAPI was cloned into (e.g. /opt/tabbyapi)")
    config_path = config if config is not None else source_dir / CONFIG
    if config is not None and not config_path.exists():
        # SOURCE/config.yml may be created (tabbyAPI fills the rest from defaults); an explicit path that does not
        # exist is a typo far more often than a wish for a new file tabbyAPI would never read.
        raise BadInput(f"--config {config}: no such file; pass the config.yml tabbyAPI reads, or leave --config "
                       "out to use SOURCE/config.yml")

    def text(path: Path) -> str | None:
        """The file's text as it is (a BOM and CRLF kept, so a write-back changes only the edited lines); None when
        it does not exist; BadInput naming it for a directory, a device, binary bytes or another encoding."""
        if not path.exists():
            return None
        what = "a tabbyAPI config.yml (--config)" if path == config_path else f"tabbyAPI's {path.name}"
        data = textio.read_bytes(path, what)  # directories, devices, permissions, size
        if b"\x00" in data[:8192]:
            raise BadInput(f"{path} is a binary file, not YAML/Python text; pass the tabbyAPI config.yml / checkout")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); pass "
                           "the tabbyAPI config.yml / checkout, or convert the file to UTF-8") from None

    return TabbyTexts(text(source_dir / MODEL_PY), text(source_dir / CONFIG_SAMPLE), text(config_path),
                      str(source_dir / MODEL_PY), str(config_path), str(source_dir))


def write_change(change: NgramChange) -> None:
    """Write the planned file, if the plan changes one: atomic (temp + fsync + rename), so a kill mid-write leaves
    the old file or the new, never half a config or half a patched model.py; what it replaced is kept as
    ``NAME.prev``. The planner's text keeps the file's own line endings and byte order mark."""
    if change.new_text is None:
        return
    try:
        write_text_atomic(Path(change.file), change.new_text, keep_previous=True)
    except OSError as exc:
        raise OperationFailed(f"{change.file}: cannot write ({exc.strerror}); run as the file's owner or root, "
                              "or use --dry to see the change") from None
