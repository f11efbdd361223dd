"""The ASGI app (Starlette): the JSON API, LibreTranslate's interface and the page over one or more models.

GET /api/health, GET /api/model, POST /api/translate, POST /api/explain, POST /api/{next,sample,step,neighbours}
(the page's views), GET /api/figures/{softmax,
positions,cost}; POST /translate and GET /languages (LibreTranslate's); GET /metrics (Prometheus);
GET /openapi.json; the page at / and its files under /static/. Every error is a JSON object
{"error", "field"} with a 4xx status (503 with Retry-After while the models load, when the queue is full,
and while the server stops), never a trace. The app answers from its start; the models load on a
thread of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..translator import SentenceTooLong, Translator
from . import figures, libre, openapi
from .http import Guard, JSONResponse, api_error, http_error, internal_error, read_bytes, read_json
from .limits import ApiError, Limits
from .metrics import Metrics
from .models import Models, ServedModel
from .schemas import (
    ExplainRequest,
    LibreTranslateRequest,
    NeighboursAnswer,
    NeighboursRequest,
    NextAnswer,
    NextRequest,
    SampleAnswer,
    SampleRequest,
    Scored,
    StepRequest,
    TranslateAnswer,
    TranslateRequest,
    checked,
)

STATIC = Path(__file__).parent / "static"


def build_app(
    models: list[ServedModel],
    limits: Limits = Limits(),
    batching: bool = True,
    local_only: bool = False,
) -> App:
    """The app serving models (the first answers requests that name none).

    local_only (`aiayn serve` on a loopback address): requests must name this machine in their Host header, so
    that a web page elsewhere cannot reach the server through a DNS name it points here ("DNS rebinding"). Off for
    an app served some other way (behind a proxy, whose requests name the proxy's host).
    """
    served = Models(models, limits, batching)
    api = Api(served, limits)
    routes = [
        Route("/", api.index),
        Route("/favicon.ico", api.favicon),
        Route("/api/health", api.health),
        Route("/api/model", api.model_info),
        Route("/api/translate", api.translate, methods=["POST"]),
        Route("/api/explain", api.explain, methods=["POST"]),
        Route("/api/next", api.next_tokens, methods=["POST"]),
        Route("/api/sample", api.sample, methods=["POST"]),
        Route("/api/step", api.step, methods=["POST"]),
        Route("/api/neighbours", api.neighbours, methods=["POST"]),
        Route("/api/figures/softmax", api.softmax_figure),
        Route("/api/figures/positions", api.positions_figure),
        Route("/api/figures/cost", api.cost_figure),
        Route("/translate", api.libre_translate, methods=["POST"]),
        Route("/languages", api.libre_languages),
        Route("/metrics", api.metrics_text),
        Route("/openapi.json", api.openapi),
    ]
    api.metrics.routes = {route.path for route in routes}
    app = Starlette(
        routes=[*routes, Mount("/static", StaticFiles(directory=STATIC))],
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: internal_error},
        lifespan=api.lifespan,
    )
    return App(app, api, local_only)


class App(Guard):
    """The guarded app, with its models (`drain` on SIGTERM) and metrics."""

    def __init__(self, app: Starlette, api: Api, local_only: bool):
        super().__init__(app, api.metrics, local_only)
        self.api, self.models = api, api.models
        api.counters = self.counters

    def drain(self) -> None:
        self.models.drain()


class Api:
    """The handlers: each checks its request, picks its model, then asks the model's worker or the figures."""

    def __init__(self, models: Models, limits: Limits):
        self.models, self.limits = models, limits
        self.metrics = Metrics()
        models.metrics = self.metrics
        self.counters: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette):
        self.models.start_loading(asyncio.get_running_loop())
        yield
        await self.models.stop()

    async def health(self, request: Request) -> Response:
        """200 once every model is loaded; 503 "loading" before (readiness), with Retry-After."""
        models = self.models
        workers = [m.worker for m in models.all if m.worker is not None]
        totals = {
            k: sum(w.counters[k] for w in workers)
            for k in ("model_batches", "sentences", "refused_overloaded", "failed")
        }
        status = "ok" if models.ready else "failed" if models.failure else "loading"
        reply = {
            "status": status,
            "model_loaded": models.ready,
            "batching": models.batching,
            "queued": sum(w.waiting for w in workers),
            **self.counters,
            **totals,
            "models": {m.name: m.status for m in models.all},
        }
        if models.ready:
            return JSONResponse(reply)
        return JSONResponse(reply, status_code=503, headers=None if models.failure else {"Retry-After": "5"})

    async def model_info(self, request: Request) -> Response:
        """Every served model: name, languages, configuration, decoding defaults, limits (see docs/serve.md)."""
        return JSONResponse(
            {"models": [m.describe(self.limits) for m in self.models.all], "ready": self.models.ready},
            status_code=200 if self.models.ready else 503,
            headers=None if self.models.ready else {"Retry-After": "5"},
        )

    async def translate(self, request: Request) -> Response:
        body = await read_json(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        model = self.pick(body)
        req = checked(TranslateRequest, body, self.limits, default_beam=model.translator.config.beam_size)
        encode_or_fail(model.translator, req.lines, "lines")
        n_best = req.n_best or 1
        results = await model.worker.translate(req.lines, req.beam_size, req.alpha, n_best)
        reply = TranslateAnswer(
            model=model.name,
            translations=[h[0].text if h else "" for h in results],
            scores=[h[0].score if h else 0.0 for h in results],
            n_best=[[Scored(text=t.text, score=t.score) for t in h] for h in results] if n_best > 1 else None,
        )
        return JSONResponse(reply.dump())

    async def explain(self, request: Request) -> Response:
        body = await read_json(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        model = self.pick(body)
        req = checked(ExplainRequest, body, self.limits, vocab_size=model.translator.model.config.target_vocab_size)
        src_ids = encode_or_fail(model.translator, [req.source], "source")[0]
        explained = await model.worker.run_alone(lambda: model.inspector.explain(req, src_ids))
        return JSONResponse({"model": model.name, **explained})

    async def next_tokens(self, request: Request) -> Response:
        """The most likely next pieces after a target prefix, under softmax(logits / temperature)."""
        model, req, src_ids = await self.model_request(request, NextRequest)
        found = await model.worker.run_alone(lambda: model.inspector.next_tokens(req, src_ids))
        return JSONResponse(NextAnswer(model=model.name, **found).dump())

    async def sample(self, request: Request) -> Response:
        """A continuation of a target prefix sampled with a seed: the same for the same seed."""
        model, req, src_ids = await self.model_request(request, SampleRequest)
        found = await model.worker.run_alone(lambda: model.inspector.sample(req, src_ids))
        return JSONResponse(SampleAnswer(model=model.name, **found).dump())

    async def step(self, request: Request) -> Response:
        """Every stage of §3's computation for one source or target position, in one layer (`model.trace`)."""
        model, req, src_ids = await self.model_request(request, StepRequest)
        traced = await model.worker.run_alone(lambda: model.inspector.step(req, src_ids))
        return JSONResponse({"model": model.name, **traced})

    async def neighbours(self, request: Request) -> Response:
        """The reference text's tokens nearest a source token by encoder state (404 when the model has no text)."""
        model, req, src_ids = await self.model_request(request, NeighboursRequest)
        inspector = model.inspector
        if req.position >= len(src_ids):
            raise ApiError(422, "position", f"position: {req.position}, but the source has {len(src_ids)} pieces")
        async with inspector.indexing:
            if inspector.index is None:
                if inspector.reference is None:
                    raise ApiError(404, "model", inspector.no_reference)
                try:  # the text is read off the model thread, which only encodes the sample
                    sample, lines = await asyncio.to_thread(inspector.reference.sample)
                    await model.worker.run_alone(lambda: inspector.build_index(sample, lines))
                except ApiError:  # busy or stopping: the build is tried again by the next request
                    raise
                except Exception as err:  # noqa: BLE001  an unreadable text: said now and by every later request
                    raise inspector.reference_failed(err) from None
        found = await model.worker.run_alone(lambda: inspector.neighbours(req, src_ids))
        return JSONResponse(NeighboursAnswer(model=model.name, **found).dump())

    async def model_request(self, request: Request, schema: type) -> tuple[ServedModel, Any, list[int]]:
        """The model a body names, the body checked, and its source's ids."""
        body = await read_json(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        model = self.pick(body)
        req = checked(schema, body, self.limits)
        return model, req, encode_or_fail(model.translator, [req.source], "source")[0]

    def pick(self, body: Any) -> ServedModel:
        """The model a JSON body names (the fields are checked again, with the rest, by the request's model)."""
        fields = body if isinstance(body, dict) else {}
        choice = [fields.get(k) for k in ("model", "source_lang", "target_lang")]
        if not all(v is None or isinstance(v, str) and len(v) <= 200 for v in choice):
            choice = [None, None, None]  # the request's check names the field of the wrong type or length
        return self.models.pick(*choice)

    async def libre_translate(self, request: Request) -> Response:
        """LibreTranslate's POST /translate: JSON or a form; 400 for a bad field, as LibreTranslate answers."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            body = await read_json(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        else:
            body = libre.form_fields(await read_bytes(request, self.limits.max_body_bytes, self.limits.body_timeout_s))
        req = checked(LibreTranslateRequest, body, self.limits, status=400)
        try:
            model, auto = libre.model_for(self.models, req.source, req.target)
        except ApiError as err:
            raise ApiError(400 if err.status == 422 else err.status, err.field, err.message, err.headers) from None
        texts = [req.q] if isinstance(req.q, str) else list(req.q)
        n_best = 1 + req.alternatives
        beam = max(n_best, model.translator.config.beam_size)
        if beam > self.limits.max_beam:
            raise ApiError(
                400, "alternatives", f"alternatives = {req.alternatives}: at most {self.limits.max_beam - 1}"
            )
        try:
            encode_or_fail(model.translator, texts, "q" if isinstance(req.q, str) else "q[]")
        except ApiError as err:
            raise ApiError(400, err.field, err.message) from None
        results = await model.worker.translate(texts, beam, None, n_best)
        return JSONResponse(
            libre.answer(texts, results, isinstance(req.q, str), req.alternatives, model.source_lang if auto else None)
        )

    async def libre_languages(self, request: Request) -> Response:
        self.models.check_ready()
        return JSONResponse(libre.languages(self.models))

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi.schema())

    def figure_model(self, request: Request) -> ServedModel:
        return self.models.pick(request.query_params.get("model"), None, None)

    async def softmax_figure(self, request: Request) -> Response:
        q = request.query_params
        d_k = figures.query_int(q, "d_k", 64, 1, 4096)
        raw_scale = figures.query_float(q, "raw_scale", 2.0, 0.0, 10.0)
        scaled = figures.query_bool(q, "scaled", True)
        return JSONResponse(figures.softmax_figure(d_k, raw_scale, scaled))

    async def positions_figure(self, request: Request) -> Response:
        config = self.figure_model(request).translator.model.config
        length = figures.query_int(request.query_params, "length", 50, 1, min(512, config.max_len))
        return JSONResponse(figures.positions_figure(config, length))

    async def cost_figure(self, request: Request) -> Response:
        return JSONResponse(figures.cost_figure(self.figure_model(request).folder))

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def favicon(self, request: Request) -> Response:
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


def encode_or_fail(translator: Translator, lines: list[str], field: str) -> list[list[int]]:
    """Source ids of lines; a line longer than the model takes is a 422 naming it (field "lines" or "q[]": the
    list's item, `lines[3]`)."""
    try:
        return translator.encode(lines)
    except SentenceTooLong as err:
        name = f"{field.removesuffix('[]')}[{err.index}]" if field in ("lines", "q[]") else field
        raise ApiError(422, name, f"{name}: {err.detail}") from None
