"""The models one server serves, by name: each loaded once, with its own batching worker, all taking turns on the
cores.

The server answers while they load: `Models.load_all` runs on a thread of its own, one model after another,
and `ready` turns true when every one is loaded. A request picks its model by name, or by its language pair,
or gets the first one. The workers share one model thread (`ModelWorker`'s executor), so two models never
compute at once on the same cores: their batches take turns.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..model import Transformer
from ..translator import Translator
from .explain import Inspector
from .limits import ApiError, Limits
from .neighbours import reference_for
from .worker import ModelWorker


@dataclass
class ServedModel:
    """One model of the server: its name, the folder it comes from, how to load it, its languages (None: the
    folder's own), the text of its neighbours view (None: its run's training text, where there is one), and once
    loaded its translator, worker and inspector."""

    name: str
    folder: Path
    load: Callable[[], Translator]
    source_lang: str | None = None
    target_lang: str | None = None
    neighbours: Path | None = None
    translator: Translator | None = None
    worker: ModelWorker | None = None
    inspector: Inspector | None = None
    parameters: dict[str, int] = field(default_factory=dict)
    status: str = "loading"  # "loading", "ready", or "failed: why"

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)

    @classmethod
    def of(cls, translator: Translator, folder: str | Path, name: str | None = None, **options: Any):
        """A model already loaded (an app made in Python, tests); options: the languages, neighbours."""
        folder = Path(folder)
        return cls(name or folder.name, folder, lambda: translator, **options)

    def loaded(self, translator: Translator, worker: ModelWorker) -> None:
        config = translator.model.config
        reference = reference_for(self.folder, self.neighbours)
        self.translator, self.worker = translator, worker
        self.inspector = Inspector(translator, self.folder, reference)
        self.source_lang = self.source_lang or config.src_lang  # the options win over the directory
        self.target_lang = self.target_lang or config.tgt_lang
        with torch.device("meta"):  # counted on an empty copy: the served one may be int8
            shape = Transformer(config)
        self.parameters = {"total": shape.num_parameters(), **shape.parameter_counts()}
        self.status = "ready"

    def describe(self, limits: Limits) -> dict[str, Any]:
        """What GET /api/model says of this model."""
        if self.translator is None:
            return {"name": self.name, "status": self.status}
        config = self.translator.model.config
        return {
            "name": self.name,
            "status": self.status,
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "config": config.to_dict(),
            "decode": asdict(self.translator.config),
            "parameters": self.parameters["total"],
            "parameter_counts": self.parameters,
            "vocab_size": config.vocab_size,
            "target_vocab_size": config.target_vocab_size,
            "encoder": config.encoder._asdict(),
            "decoder": config.decoder._asdict(),
            "limits": asdict(limits),
            "gemm": self.translator.gemm,
            "neighbours": self.inspector.describe_reference(),
        }


class Models:
    """The served models in their order (the first answers requests that name none), loaded on a thread."""

    def __init__(self, models: list[ServedModel], limits: Limits, batching: bool):
        names = [m.name for m in models]
        if not models or len(set(names)) < len(names):
            raise ValueError(f"the served models need distinct names, got {names}")
        self.all, self.limits, self.batching = models, limits, batching
        self.by_name = {m.name: m for m in models}
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiayn-model")  # shared: turns
        self.turn = asyncio.Lock()  # which worker gathers and runs its batch now (ModelWorker.turn)
        self.failure: str | None = None
        self.closing = False  # set by stop(): a model loaded after it is not started
        self.metrics: Any = None  # the app's (serve.metrics.Metrics), given to each worker
        self.on_failure: Callable[[str], None] | None = None  # `aiayn serve` stops when a model cannot load

    @property
    def ready(self) -> bool:
        return all(m.status == "ready" for m in self.all)

    def start_loading(self, loop: asyncio.AbstractEventLoop) -> threading.Thread:
        """Load every model on a daemon thread (a SIGTERM while loading need not wait for it); each one's worker
        starts on loop as soon as it is loaded."""
        thread = threading.Thread(target=self._load_all, args=(loop,), name="aiayn-load", daemon=True)
        thread.start()
        return thread

    def _load_all(self, loop: asyncio.AbstractEventLoop) -> None:
        for model in self.all:
            try:
                translator = model.load()
            except Exception as err:  # noqa: BLE001  the server says why and stops (or, in Python, reports it)
                model.status = self.failure = f"failed: {model.name} ({model.folder}): {err}"
                if self.on_failure is not None:
                    self.on_failure(self.failure)
                else:
                    print(f"aiayn serve: {self.failure}", file=sys.stderr)
                return
            limits = self.limits
            worker = ModelWorker(
                translator,
                self.batching,
                limits.batch_window_ms / 1000,
                limits.max_queue,
                limits.max_batch_lines,
                executor=self.model_thread,
                name=model.name,
                metrics=self.metrics,
                turn=self.turn,
            )
            try:
                asyncio.run_coroutine_threadsafe(worker.start(), loop).result()
            except RuntimeError:  # the loop has closed: the server stopped while this model loaded
                return
            if self.metrics is not None:
                self.metrics.queue.labels(model.name).set_function(lambda worker=worker: worker.waiting)
            model.loaded(translator, worker)
            if self.closing:
                return

    async def stop(self) -> None:
        """Answer what waits (503), then end the workers and the model thread."""
        self.closing = True
        self.drain()
        for model in self.all:
            if model.worker is not None:
                await model.worker.stop()
        self.model_thread.shutdown(wait=True)

    def drain(self) -> None:
        """SIGTERM: every worker refuses what has not started (503, Retry-After); the batches in flight finish."""
        for model in self.all:
            if model.worker is not None:
                model.worker.drain()

    def check_ready(self) -> None:
        """An ApiError (503) while the models load, or once one has failed to."""
        if self.failure:
            raise ApiError(503, None, f"the server could not load its models: {self.failure}")
        if not self.ready:
            raise ApiError(503, None, "the server is loading its models; try again shortly", {"Retry-After": "5"})

    def pick(
        self,
        name: str | None,
        source: str | None,
        target: str | None,
        fields: tuple[str, str, str] = ("model", "source_lang", "target_lang"),
    ) -> ServedModel:
        """The model a request names, or whose languages it gives, or the first; else an ApiError naming the field
        (fields: what the request calls the name, the source and the target)."""
        self.check_ready()
        if name is not None and name not in self.by_name:
            raise ApiError(
                422, fields[0], f"{fields[0]}: no model named {name!r}; this server has {', '.join(self.by_name)}"
            )
        candidates = [self.by_name[name]] if name is not None else self.all
        for lang, named, attr in ((target, fields[2], "target_lang"), (source, fields[1], "source_lang")):
            if lang is not None:
                fit = [m for m in candidates if same_lang(lang, getattr(m, attr))]
                if not fit:
                    pairs = ", ".join(f"{m.name}: {m.source_lang} to {m.target_lang}" for m in candidates)
                    raise ApiError(
                        422,
                        named,
                        f"{named}: no model translates {'to' if attr == 'target_lang' else 'from'} {lang} ({pairs})",
                    )
                candidates = fit
        return candidates[0]


def same_lang(asked: str, served: str | None) -> bool:
    """Language codes compared without case: "EN" is "en"."""
    return served is not None and asked.lower() == served.lower()
