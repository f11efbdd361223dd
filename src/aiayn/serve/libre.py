"""LibreTranslate's interface over the served models: POST /translate and GET /languages, as LibreTranslate
answers them, so that its existing clients work unchanged.

A request names its languages by code; the model that translates that pair answers it. `source: "auto"`
is taken where one source language is served for the target (the answer's `detectedLanguage` then says
which, confidence 100), and refused otherwise: this server detects no language. Only plain text is taken
(`format: "text"`); `api_key` is accepted and ignored.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .limits import ApiError
from .models import Models, ServedModel, same_lang
from .schemas import Detected, Language, LibreTranslateAnswer

# English names of the languages a served model most likely has (ISO 639-1); another code is its own name.
NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak",
    "sl": "Slovenian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def languages(models: Models) -> list[dict[str, Any]]:
    """GET /languages: each source language served, with the targets it is translated to."""
    targets: dict[str, list[str]] = {}
    for m in models.all:
        if m.source_lang and m.target_lang:
            targets.setdefault(m.source_lang, [])
            if m.target_lang not in targets[m.source_lang]:
                targets[m.source_lang].append(m.target_lang)
    return [Language(code=code, name=NAMES.get(code.lower(), code), targets=t).dump() for code, t in targets.items()]


def form_fields(body: bytes) -> dict[str, Any]:
    """An application/x-www-form-urlencoded body as LibreTranslate's fields: q repeated is a list, alternatives
    a number."""
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError) as err:
        raise ApiError(400, "body", f"the form is not valid UTF-8: {err}") from None
    fields: dict[str, Any] = {}
    for key, value in pairs:
        if key == "q" and key in fields:
            fields[key] = [*fields[key], value] if isinstance(fields[key], list) else [fields[key], value]
        else:
            fields[key] = int(value) if key == "alternatives" and value.isdigit() else value
    return fields


def model_for(models: Models, source: str, target: str) -> tuple[ServedModel, bool]:
    """The model translating source to target ("auto": the one source served for target), and whether it was
    auto."""
    models.check_ready()
    if source.lower() != "auto":
        return models.pick(None, source, target, fields=("model", "source", "target")), False
    sources = {m.source_lang for m in models.all if m.source_lang and same_lang(target, m.target_lang)}
    if len(sources) != 1:
        served = ", ".join(sorted(sources)) or "none"
        raise ApiError(
            400, "source", f'source "auto": this server detects no language; name the source (to {target}: {served})'
        )
    return models.pick(None, sources.pop(), target, fields=("model", "source", "target")), True


def answer(texts: list[str], results: list[list], single: bool, alternatives: int, detected: str | None) -> dict:
    """LibreTranslate's reply: translatedText (a string for a string q, a list for a list), the alternatives and
    detectedLanguage when asked for."""
    best = [h[0].text if h else "" for h in results]
    more = [[t.text for t in h[1 : 1 + alternatives]] for h in results] if alternatives else None
    found = Detected(confidence=100.0, language=detected) if detected is not None else None
    return LibreTranslateAnswer(
        translatedText=best[0] if single else best,
        alternatives=(more[0] if single else more) if more is not None else None,
        detectedLanguage=(found if single else [found] * len(texts)) if found is not None else None,
    ).dump()
