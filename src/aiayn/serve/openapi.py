"""GET /openapi.json: the server's interface as OpenAPI 3.1, its request bodies the pydantic models that check
them (`serve.schemas`), so that the schema and the checks cannot drift apart."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from ..version import __version__
from .schemas import (
    ErrorAnswer,
    ExplainRequest,
    Language,
    LibreTranslateAnswer,
    LibreTranslateRequest,
    NeighboursAnswer,
    NeighboursRequest,
    NextAnswer,
    NextRequest,
    SampleAnswer,
    SampleRequest,
    StepRequest,
    TranslateAnswer,
    TranslateRequest,
)


def _json(name: str | None, array: bool = False) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{name}"} if name else {"type": "object"}
    return {"application/json": {"schema": {"type": "array", "items": ref} if array else ref}}


def _post(summary: str, body: str, answer: str | None, form: bool = False) -> dict[str, Any]:
    content = _json(body)
    if form:
        content["application/x-www-form-urlencoded"] = content["application/json"]
    error = {"description": "a bad field", "content": _json("ErrorAnswer")}
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": content},
            "responses": {
                "200": {"description": "the answer", "content": _json(answer)},
                "400" if form else "422": error,
                "503": {"description": "loading, busy or stopping (Retry-After)", "content": _json("ErrorAnswer")},
            },
        }
    }


def _get(summary: str, answer: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {"200": {"description": "the answer", "content": answer or _json(None)}},
        }
    }


@cache
def schema() -> dict[str, Any]:
    requests = (
        TranslateRequest,
        ExplainRequest,
        NextRequest,
        SampleRequest,
        StepRequest,
        NeighboursRequest,
        LibreTranslateRequest,
    )
    answers = (TranslateAnswer, NextAnswer, SampleAnswer, NeighboursAnswer, LibreTranslateAnswer, Language, ErrorAnswer)
    models = [(m, "validation") for m in requests] + [(m, "serialization") for m in answers]
    _, defs = models_json_schema(models, ref_template="#/components/schemas/{model}")
    return {
        "openapi": "3.1.0",
        "info": {"title": "aiayn serve", "version": __version__},
        "paths": {
            "/api/translate": _post("Translate lines", "TranslateRequest", "TranslateAnswer"),
            "/api/explain": _post("Attention and beam tree of one sentence", "ExplainRequest", None),
            "/api/next": _post("The next token's distribution after a target prefix", "NextRequest", "NextAnswer"),
            "/api/sample": _post("A continuation sampled with a seed", "SampleRequest", "SampleAnswer"),
            "/api/step": _post("Every stage of one position's computation (§3)", "StepRequest", None),
            "/api/neighbours": _post(
                "The reference tokens nearest a source token by encoder state", "NeighboursRequest", "NeighboursAnswer"
            ),
            "/translate": _post(
                "Translate (LibreTranslate)", "LibreTranslateRequest", "LibreTranslateAnswer", form=True
            ),
            "/languages": _get("Languages served (LibreTranslate)", _json("Language", array=True)),
            "/api/model": _get("The served models"),
            "/api/health": _get("Readiness: 200 once every model is loaded, 503 before"),
            "/api/figures/softmax": _get("Softmax scaling (§3.2.1)"),
            "/api/figures/positions": _get("Positional encoding (§3.5)"),
            "/api/figures/cost": _get("BLEU against training FLOPs (Table 2)"),
            "/metrics": _get("Prometheus metrics", {"text/plain": {"schema": {"type": "string"}}}),
        },
        "components": {"schemas": defs["$defs"]},
    }
