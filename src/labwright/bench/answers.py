"""What labwright reads from a server's answers, declared once as pydantic models and checked where each answer enters.

- ``StreamChunk``: one ``data:`` event of an OpenAI-compatible stream (``chat.completion.chunk`` or
  ``text_completion``): its first choice's text, delta and finish_reason, the ``usage`` object (OpenAI's
  ``stream_options.include_usage``) and llama.cpp's ``timings``;
- ``Usage`` and ``Timings``: token counts are whole numbers, 0 or more (never a bool, a float or a string), speeds are
  finite numbers, 0 or more (JSON's ``NaN`` and ``Infinity``, which Python's json accepts, are refused);
- ``Models`` and ``TokenCount``: ``GET /v1/models`` and the tokenizer endpoints' counts.

Servers add fields of their own (ids, ``system_fingerprint``, ``prompt_tokens_details``, llama.cpp's extras), so
unknown keys are kept and ignored: an answer is refused for what labwright reads from it, not for what it does not.
A refusal is ``BadAnswer`` (labwright.bench.sse) naming the field and the value the server sent, so the benchmark
reports it as an error row, never as a measurement.

pydantic is imported here only: labwright.bench.openai imports this module when the first answer arrives, so
``labwright --help`` and ``labwright bench --help`` never load it.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from labwright.bench.sse import BadAnswer

__all__ = ["BadAnswer", "Models", "SpeechHeaders", "StreamChunk", "TokenCount", "parse"]

Count = Annotated[StrictInt, Field(ge=0)]
Speed = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


Model = TypeVar("Model", bound=_Answer)


class Usage(_Answer):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Count | None = None


class Timings(_Answer):
    """llama.cpp's per-request timings (its server adds them to the last chunk)."""

    prompt_n: Count | None = None
    cache_n: Count | None = None
    predicted_n: Count | None = None
    prompt_per_second: Speed | None = None
    predicted_per_second: Speed | None = None


class Delta(_Answer):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class Choice(_Answer):
    index: Count = 0
    delta: Delta | None = None
    text: str | None = None
    finish_reason: str | None = None


class StreamChunk(_Answer):
    choices: list[Choice] | None = None
    usage: Usage | None = None
    timings: Timings | None = None

    def text(self, kind: str) -> str:
        """The first choice's generated text; a reasoning model's thinking counts (those are generated tokens too)."""
        if not self.choices:
            return ""
        choice = self.choices[0]
        if kind == "chat":
            delta = choice.delta or Delta()
            return (delta.content or "") + (delta.reasoning_content or delta.reasoning or "")
        return choice.text or ""

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None


class ModelMeta(_Answer):
    n_ctx: Count | None = None


class ModelEntry(_Answer):
    """One served model: llama.cpp lists its context as ``meta.n_ctx``, vLLM as ``max_model_len``."""

    id: str
    aliases: list[str] | None = None
    meta: ModelMeta | None = None
    max_model_len: Count | None = None

    @property
    def context(self) -> int | None:
        return (self.meta.n_ctx if self.meta else None) or self.max_model_len


class Models(_Answer):
    data: list[ModelEntry]


class TokenCount(_Answer):
    """llama.cpp ``/tokenize`` (``tokens``), vLLM (``count``), tabbyAPI ``/v1/token/encode`` (``length``)."""

    count: Count | None = None
    length: Count | None = None
    tokens: list[Any] | None = None

    @property
    def value(self) -> int | None:
        if self.count is not None:
            return self.count
        if self.length is not None:
            return self.length
        return len(self.tokens) if self.tokens is not None else None


class SpeechHeaders(_Answer):
    """What labwright reads from a /v1/audio/speech answer's headers: the media type and the announced length (a
    whole number of bytes, 0 or more, when the server sends one; chunked answers send none)."""

    content_type: str | None = None
    content_length: Annotated[int, Field(ge=0)] | None = None

    @property
    def media_type(self) -> str:
        return (self.content_type or "").split(";")[0].strip().lower()


def problem(exc: ValidationError, doc: Any) -> str:
    """The first thing wrong, as "usage.completion_tokens = -4 (must be 0 or more)"."""
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "the answer"
    value = error.get("input", doc)
    shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    reason = error["msg"].lower()
    reason = (reason.replace("input should be greater than or equal to 0", "must be 0 or more")
              .replace("input should be a finite number", "must be a finite number")
              .replace("input should be a valid integer", "must be a whole number"))
    return f"{where} = {shown[:80]} ({reason})"


def parse(model: type[Model], doc: Any, what: str) -> Model:
    """``doc`` as ``model``, or BadAnswer naming ``what`` (e.g. "stream chunk 3") and the first bad field."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise BadAnswer(f"{what}: {problem(exc, doc)}") from None
