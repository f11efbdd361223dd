"""A tiny served model for the API and browser tests: uvicorn in a thread on a free local port."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from aiayn.serve.app import build_app
from aiayn.serve.limits import Limits
from aiayn.serve.models import ServedModel
from aiayn.translator import Translator
from test_translate import build_tiny_model_dir

RUN_RESULTS = {"test_bleu": 12.5, "matmul_flops": 3.2e15, "test": "test_2016_flickr", "steps": 10}


def make_run(root: Path, data_dir: Path) -> Path:
    """root/runs/tiny/model (random tiny weights, a Multi30k vocabulary) with the run's results.json beside it."""
    run = root / "runs" / "tiny"
    model = build_tiny_model_dir(run / "model", data_dir)
    (run / "results.json").write_text(json.dumps(RUN_RESULTS))
    return model


@contextlib.contextmanager
def serving(
    model_dir: Path,
    limits: Limits = Limits(),
    batching: bool = True,
    translator: Any = None,
    langs: tuple[str | None, str | None] = ("en", "de"),
    more: list[ServedModel] = (),
    neighbours: Path | None = None,
) -> Iterator[str]:
    """The app for model_dir (and the models of more after it) served on 127.0.0.1 (langs: as --source-lang and
    --target-lang; neighbours: as --neighbours); yields its base URL once every model is loaded."""
    translator = translator or Translator.load(model_dir)
    first = ServedModel.of(translator, model_dir, source_lang=langs[0], target_lang=langs[1], neighbours=neighbours)
    app = build_app([first, *more], limits, batching=batching, local_only=True)
    with served(app) as base:
        deadline = time.monotonic() + 60
        while request(f"{base}/api/health")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the test server's models did not load")
            time.sleep(0.02)
        yield base


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """app under uvicorn in a thread on a free local port; yields its base URL as soon as it listens."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def request(url: str, body: Any = None, raw: bytes | None = None, method: str | None = None) -> tuple[int, dict, Any]:
    """(status, headers, parsed JSON reply) of a GET, or of a POST of body as JSON (or of raw bytes)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, dict(reply.headers), json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())
