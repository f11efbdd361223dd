"""The bodies of the API as pydantic models: what a request may send, checked against the server's limits, and
what the answers hold.

`checked(Model, body, limits, ...)` validates a parsed JSON body strictly (no type is coerced: "4" is not a
beam size, true is not a number) and turns the first fault into an `ApiError` naming its field (`lines[2]`,
`beam_size`), 422 for the JSON API and 400 for LibreTranslate's, as LibreTranslate answers. The limits, the
served model's vocabulary and its default beam reach the checks through the validation context. No field
can name a file. The answers are built through their models too, and all of them give `/openapi.json`
its schemas.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from .limits import ApiError, Limits


def _limits(info: ValidationInfo) -> Limits:
    """The server's limits (a request made in Python without a context: the defaults)."""
    return (info.context or {}).get("limits") or Limits()


def _text(value: str, info: ValidationInfo) -> str:
    """A string within the server's max_chars that UTF-8 can encode (JSON's "\\ud800" is no character)."""
    limit = _limits(info).max_chars
    if len(value) > limit:
        raise ValueError(f"{len(value)} characters, more than this server's limit of {limit}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"not valid Unicode: a lone surrogate at character {err.start}") from None
    return value


Text = Annotated[str, AfterValidator(_text)]
Name = Annotated[str, Field(max_length=200), AfterValidator(_text)]


def _beam(value: int | None, info: ValidationInfo) -> int | None:
    high = _limits(info).max_beam
    if value is not None and not 1 <= value <= high:
        raise ValueError(f"{value} is out of range: 1 to {high}")
    return value


def _alpha(value: float | None, info: ValidationInfo) -> float | None:
    high = _limits(info).max_alpha
    if value is not None and not 0 <= value <= high:
        raise ValueError(f"{value} is out of range: 0.0 to {high}")
    return value


Beam = Annotated[int | None, AfterValidator(_beam)]
Alpha = Annotated[float | None, Field(allow_inf_nan=False), AfterValidator(_alpha)]


class Body(BaseModel):
    """Strict: a field of the wrong JSON type is refused, never converted; an unknown field is refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Choice(Body):
    """Which served model answers: by name, or by its language pair; neither: the first model served."""

    model: Name | None = Field(None, description="a served model's name (GET /api/model lists them)")
    source_lang: Name | None = Field(None, description="pick the model by its languages instead")
    target_lang: Name | None = None


class TranslateRequest(Choice):
    """POST /api/translate: lines translated in order, one translation each."""

    lines: list[Text] = Field(description="one sentence a line; an empty line translates to an empty one")
    beam_size: Beam = Field(None, description="beam width (§6.1); left out: the model's default")
    alpha: Alpha = Field(None, description="length penalty alpha (§6.1); left out: the model's default")
    n_best: int | None = Field(None, description="translations per line, best first (at most the beam size)")

    @model_validator(mode="after")
    def within_limits(self, info: ValidationInfo) -> TranslateRequest:
        limit = _limits(info).max_lines
        if not self.lines:
            raise ApiError(422, "lines", "lines is empty: send at least one line")
        if len(self.lines) > limit:
            raise ApiError(422, "lines", f"{len(self.lines)} lines, more than this server's limit of {limit}")
        if self.n_best is not None:
            beam = self.beam_size or (info.context or {}).get("default_beam") or 1
            if not 1 <= self.n_best <= beam:
                raise ApiError(422, "n_best", f"n_best = {self.n_best} is out of range: 1 to {beam} (the beam size)")
        return self


class ExplainRequest(Choice):
    """POST /api/explain: one sentence's attention and beam tree, optionally with a forced target prefix."""

    source: Text
    target: Text | None = Field(None, description="a target prefix, as text, to force")
    target_ids: list[int] | None = Field(None, description="a target prefix, as token ids, to force")
    beam_size: Beam = None
    alpha: Alpha = None

    @model_validator(mode="after")
    def consistent(self, info: ValidationInfo) -> ExplainRequest:
        if not self.source.strip():
            raise ApiError(422, "source", "source is empty")
        if self.target_ids is not None:
            if self.target is not None:
                raise ApiError(422, "target_ids", "give target or target_ids, not both")
            vocab = (info.context or {}).get("vocab_size")
            for i, token in enumerate(self.target_ids):
                if vocab is not None and not 0 <= token < vocab:
                    raise ApiError(
                        422, f"target_ids[{i}]", f"target_ids[{i}] = {token} is not a token id (0 to {vocab - 1})"
                    )
        return self


Temperature = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]


class NextRequest(Choice):
    """POST /api/next: the most likely next target pieces after a prefix, under softmax(logits / temperature)."""

    source: Text
    prefix: Text = Field("", description="the target text so far, tokenised as the model's tokenizer does")
    temperature: Temperature = 1.0
    top_k: int = Field(10, ge=1, le=1000, description="how many pieces to return, most likely first")


class SampleRequest(Choice):
    """POST /api/sample: a continuation of the prefix sampled token by token, the same for the same seed."""

    source: Text
    prefix: Text = ""
    temperature: Temperature = 1.0
    top_k: int | None = Field(None, ge=1, description="sample only among the k most likely (left out: all)")
    seed: int = Field(ge=0, le=2**63 - 1)
    max_len: int | None = Field(None, ge=1, le=1024, description="at most this many tokens after the prefix")


class StepRequest(Choice):
    """POST /api/step: every stage of §3's computation for one position, in one layer (`model.trace`)."""

    source: Text
    target: Text = Field("", description="the target text (the page sends its translation); traced after <s>")
    side: Literal["source", "target"] = "source"
    position: int = Field(0, ge=0, description="0-based: a source piece, or a target position (0 reads <s>)")
    layer: int = Field(0, ge=0, description="0-based, in the side's stack")


class NeighboursRequest(Choice):
    """POST /api/neighbours: the reference text's tokens whose encoder states are nearest a source piece's."""

    source: Text
    position: int = Field(0, ge=0, description="0-based: which piece of the source (its </s> included)")
    k: int = Field(5, ge=1, le=50, description="how many neighbours, nearest first")


class LibreTranslateRequest(Body):
    """POST /translate as LibreTranslate takes it: q a string or a list, source (or "auto") and target codes. Other
    fields are ignored, as LibreTranslate ignores them (its clients send some, such as `secret`)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    q: str | list[str] = Field(description="the text, or a list of texts")
    source: Name = Field(description='the source language code, or "auto" where one source serves the target')
    target: Name = Field(description="the target language code")
    format: Literal["text"] = Field("text", description="only plain text: HTML is not translated")
    alternatives: int = Field(0, ge=0, le=16, description="more translations of each text, next best first")
    api_key: str | None = Field(None, description="accepted and ignored: this server has no keys")

    @model_validator(mode="after")
    def within_limits(self, info: ValidationInfo) -> LibreTranslateRequest:
        limits = _limits(info)
        if isinstance(self.q, list) and not 1 <= len(self.q) <= limits.max_lines:
            raise ApiError(400, "q", f"q has {len(self.q)} texts: send 1 to {limits.max_lines}")
        for i, text in enumerate([self.q] if isinstance(self.q, str) else self.q):
            field = "q" if isinstance(self.q, str) else f"q[{i}]"
            try:
                _text(text, info)
            except ValueError as err:
                raise ApiError(400, field, f"{field}: {err}") from None
        return self


class Answer(BaseModel):
    """A reply's body: fields left None are left out (`dump`)."""

    def dump(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class Scored(Answer):
    text: str
    score: float = Field(description="length-penalised log-probability, what the search ranked by (§6.1)")


class TranslateAnswer(Answer):
    """POST /api/translate's answer: one translation and score per line, in order."""

    model: str
    translations: list[str]
    scores: list[float]
    n_best: list[list[Scored]] | None = Field(None, description="with n_best > 1: each line's translations, best first")


class NextAnswer(Answer):
    """POST /api/next's answer: pieces (the tokenizer's own strings), their ids and probabilities, most likely first."""

    model: str
    tokens: list[str]
    ids: list[int]
    probs: list[float]


class SampleAnswer(NextAnswer):
    """POST /api/sample's answer: the continuation's text, and its pieces with the probability each was drawn at."""

    text: str


class Neighbour(Answer):
    sentence: str = Field(description="the reference sentence")
    tokens: list[str] = Field(description="its pieces, as the model's tokenizer cuts it")
    position: int = Field(description="which of its pieces is the neighbour")
    token: str
    similarity: float = Field(description="cosine similarity of the two encoder states")


class ReferenceIndex(Answer):
    source: str = Field(description="where the reference sentences come from")
    lines: int = Field(description="non-empty lines in that text")
    sentences: int = Field(description="sentences in the index: a sample of the lines")
    tokens: int = Field(description="pieces in the index (each sentence's </s> left out)")
    too_long: int = Field(description="sampled sentences left out: longer than the model takes")
    build_seconds: float


class NeighboursAnswer(Answer):
    """POST /api/neighbours's answer: the source's pieces, the one asked for, and its nearest reference pieces."""

    model: str
    source_tokens: list[str]
    position: int
    token: str
    index: ReferenceIndex
    neighbours: list[Neighbour]


class ErrorAnswer(Answer):
    """Every error: what went wrong, and the request's field at fault (null when none is)."""

    error: str
    field: str | None


class Detected(Answer):
    confidence: float
    language: str


class LibreTranslateAnswer(Answer):
    """POST /translate's answer, as LibreTranslate gives it: a string for a string q, a list for a list."""

    translatedText: str | list[str]  # noqa: N815  (LibreTranslate's names)
    alternatives: list[str] | list[list[str]] | None = None
    detectedLanguage: Detected | list[Detected] | None = None  # noqa: N815


class Language(Answer):
    """One entry of GET /languages: a source language and the targets it is translated to."""

    code: str
    name: str
    targets: list[str]


def checked(model: type[Body], body: Any, limits: Limits, status: int = 422, **context: Any) -> Any:
    """body validated as model under limits (context: default_beam, vocab_size), else an ApiError naming the field."""
    if isinstance(body, dict):
        for key in body:  # a name UTF-8 cannot write: pydantic would not say which
            if not _encodable(key):
                raise ApiError(status, key, f"unknown field {key!r}; the fields are {', '.join(model.model_fields)}")
    try:
        return model.model_validate(body, context={"limits": limits, **context})
    except ApiError as err:
        raise ApiError(status, err.field, err.message) from None
    except ValidationError as err:
        raise _first_fault(err, model, status) from None


def _first_fault(err: ValidationError, model: type[Body], status: int) -> ApiError:
    faults = err.errors(include_url=False, include_context=False, include_input=False)
    # The first field's fault; of a union's branches (q: a string or a list), the one that went deepest.
    same_field = [f for f in faults if f["loc"][:1] == faults[0]["loc"][:1]]
    fault = max(same_field, key=lambda f: sum(isinstance(p, int) for p in f["loc"]))
    loc = fault["loc"][:1] + tuple(p for p in fault["loc"][1:] if isinstance(p, int))  # less the branches' names
    if not loc:
        if fault["type"] == "model_type":
            return ApiError(status, "body", "the body must be a JSON object")
        return ApiError(status, "body", f"the body: {fault['msg']}")
    field = str(loc[0]) + "".join(f"[{p}]" for p in loc[1:])
    if fault["type"] == "extra_forbidden":
        return ApiError(status, field, f"unknown field {field!r}; the fields are {', '.join(model.model_fields)}")
    if fault["type"] == "missing":
        return ApiError(status, field, f"{field} is missing")
    message = fault["msg"].removeprefix("Value error, ")
    return ApiError(status, field, f"{field}: {message}")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
