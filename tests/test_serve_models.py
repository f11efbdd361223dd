"""aiayn serve for real use: two models in one app, LibreTranslate's interface, the request models and their
schema, Prometheus metrics, readiness while the models load, and SIGTERM with requests in flight."""

from __future__ import annotations

import json
import math
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from aiayn.serve.app import build_app
from aiayn.serve.limits import Limits
from aiayn.serve.models import ServedModel
from aiayn.serve.schemas import ExplainRequest, LibreTranslateRequest, TranslateRequest
from aiayn.translator import Translator
from aiayn.weights import load_model
from serve_helpers import make_run, request, served, serving
from test_marian import build_marian
from test_translate import data_dir  # noqa: F401  (a fixture)

LINES = ["A man is riding a bike.", "Two dogs play in the snow.", ""]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, data_dir):
    return make_run(tmp_path_factory.mktemp("serve-models"), data_dir)


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return build_marian(tmp_path_factory.mktemp("marian") / "opus-mt-en-fr")


@pytest.fixture(scope="module")
def translators(model_dir, marian_dir):
    return Translator.load(model_dir), Translator.load(marian_dir)


class Turns:
    """Counts the model calls of the translators it wraps, and the most that ever ran at once."""

    def __init__(self):
        self.lock, self.running, self.most, self.calls = threading.Lock(), 0, 0, 0

    def wrap(self, translator: Translator):
        turns = self

        class Recorded:
            def __getattr__(self, name):
                return getattr(translator, name)

            def translate_n_best(self, *args, **kwargs):
                with turns.lock:
                    turns.running += 1
                    turns.calls += 1
                    turns.most = max(turns.most, turns.running)
                try:
                    time.sleep(0.01)  # a window in which another model's batch would overlap, were it let
                    return translator.translate_n_best(*args, **kwargs)
                finally:
                    with turns.lock:
                        turns.running -= 1

        return Recorded()


@pytest.fixture(scope="module")
def turns():
    return Turns()


@pytest.fixture(scope="module")
def url(model_dir, marian_dir, translators, turns):
    second = ServedModel.of(turns.wrap(translators[1]), marian_dir, name="en-fr", source_lang="en", target_lang="fr")
    limits = Limits(max_lines=8, max_beam=6)
    with serving(model_dir, limits, translator=turns.wrap(translators[0]), more=[second]) as base:
        yield base


def post_form(url: str, fields: list[tuple[str, str]]) -> tuple[int, dict, object]:
    data = urllib.parse.urlencode(fields).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, dict(reply.headers), json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def test_two_models_each_answer_with_their_own_translations(url, translators):
    tiny, marian = translators
    models = request(f"{url}/api/model")[2]["models"]
    assert [(m["name"], m["source_lang"], m["target_lang"], m["status"]) for m in models] == [
        ("model", "en", "de", "ready"),
        ("en-fr", "en", "fr", "ready"),
    ]
    assert models[1]["config"]["d_model"] == 32 and models[0]["config"]["d_model"] == 64
    for body, expected in [
        ({"lines": LINES}, tiny),  # the first model answers a request that names none
        ({"lines": LINES, "model": "model"}, tiny),
        ({"lines": LINES, "model": "en-fr"}, marian),
        ({"lines": LINES, "target_lang": "fr"}, marian),  # by its languages
        ({"lines": LINES, "source_lang": "EN", "target_lang": "de"}, tiny),
    ]:
        status, _, reply = request(f"{url}/api/translate", {**body, "beam_size": 3})
        assert status == 200 and reply["translations"] == expected.translate(LINES, beam_size=3), body
    assert tiny.translate(LINES) != marian.translate(LINES)  # the two are told apart
    status, _, e = request(f"{url}/api/explain", {"source": LINES[0], "model": "en-fr", "beam_size": 2})
    assert status == 200 and e["model"] == "en-fr" and e["translation"] == marian.translate(LINES[:1], beam_size=2)[0]
    _, _, pe = request(f"{url}/api/figures/positions?length=4&model=en-fr")
    assert pe["d_model"] == 32 and pe["layout"] == "halves"


def test_concurrent_requests_to_two_models_are_batched_take_turns_and_equal_their_translator(url, translators, turns):
    lines = [f"{w} dogs run in the park number {i}." for i, w in enumerate(["Two", "Three", "Many", "Small"] * 4)]
    asks = [(line, name) for line in lines for name in ("model", "en-fr")]
    calls = turns.calls
    with ThreadPoolExecutor(32) as pool:
        replies = list(pool.map(lambda a: request(f"{url}/api/translate", {"lines": [a[0]], "model": a[1]}), asks))
    assert turns.most == 1  # the two models' batches never ran at once
    assert 2 <= turns.calls - calls < len(asks)  # batched: fewer model calls than requests
    expected = {"model": translators[0].translate(lines), "en-fr": translators[1].translate(lines)}
    for (line, name), (status, _, reply) in zip(asks, replies):
        assert status == 200 and reply["model"] == name
        assert reply["translations"] == [expected[name][lines.index(line)]]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"lines": ["a"], "model": "en-es"}, "model"),
        ({"lines": ["a"], "model": 3}, "model"),
        ({"lines": ["a"], "target_lang": "es"}, "target_lang"),
        ({"lines": ["a"], "source_lang": "de"}, "source_lang"),
        ({"lines": ["a"], "model": "en-fr", "target_lang": "de"}, "target_lang"),
        ({"lines": ["a"], "n_best": 0}, "n_best"),
        ({"lines": ["a"], "alpha": 1e400}, "alpha"),
        ({"lines": [["a"]]}, "lines[0]"),
    ],
)
def test_a_bad_choice_of_model_or_field_is_a_422_naming_it(url, body, field):
    status, _, reply = request(f"{url}/api/translate", body)
    assert (status, reply["field"]) == (422, field), reply
    assert field.split("[")[0] in reply["error"] and "Traceback" not in reply["error"]


def test_libretranslate_clients_are_answered_as_libretranslate_answers(url, translators):
    tiny, marian = translators
    status, _, reply = request(f"{url}/translate", {"q": LINES, "source": "en", "target": "fr", "format": "text"})
    assert status == 200 and reply == {"translatedText": marian.translate(LINES)}
    status, _, reply = request(
        f"{url}/translate", {"q": LINES[0], "source": "en", "target": "de", "api_key": "", "secret": "x"}
    )
    assert status == 200 and reply == {"translatedText": tiny.translate(LINES[:1])[0]}
    # a form, as libretranslatepy sends it; "auto" where one source is served for the target
    status, _, reply = post_form(f"{url}/translate", [("q", LINES[1]), ("source", "auto"), ("target", "fr")])
    assert status == 200 and reply == {
        "translatedText": marian.translate(LINES[1:2])[0],
        "detectedLanguage": {"confidence": 100.0, "language": "en"},
    }
    status, _, reply = request(f"{url}/translate", {"q": [LINES[0]], "source": "en", "target": "de", "alternatives": 2})
    best = tiny.translate_n_best(LINES[:1], n_best=3, beam_size=4)[0]
    assert reply == {"translatedText": [best[0].text], "alternatives": [[t.text for t in best[1:]]]}
    assert request(f"{url}/languages")[2] == [{"code": "en", "name": "English", "targets": ["de", "fr"]}]
    for body, field in [
        ({"q": "a", "source": "en", "target": "es"}, "target"),
        ({"q": "a", "source": "de", "target": "fr"}, "source"),
        ({"q": "a", "source": "en", "target": "de", "format": "html"}, "format"),
        ({"q": 5, "source": "en", "target": "de"}, "q"),
        ({"q": ["a", 5], "source": "en", "target": "de"}, "q[1]"),
        ({"q": [], "source": "en", "target": "de"}, "q"),
        ({"source": "en", "target": "de"}, "q"),
        ({"q": "a", "source": "en", "target": "de", "alternatives": 9}, "alternatives"),
    ]:
        status, _, reply = request(f"{url}/translate", body)
        assert (status, reply["field"]) == (400, field) and reply["error"], (body, reply)
    status, _, reply = post_form(f"{url}/translate", [("q", "a"), ("source", "en")])
    assert (status, reply["field"]) == (400, "target")


def test_the_openapi_schema_is_the_request_models(url):
    status, _, schema = request(f"{url}/openapi.json")
    assert status == 200 and schema["openapi"].startswith("3.")
    schemas = schema["components"]["schemas"]
    for model in (TranslateRequest, ExplainRequest, LibreTranslateRequest):
        assert set(schemas[model.__name__]["properties"]) == set(model.model_fields)
    body = schema["paths"]["/api/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/TranslateRequest"}
    assert set(schema["paths"]) >= {"/api/translate", "/api/explain", "/translate", "/languages", "/metrics"}
    refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(schema))
    assert refs and set(refs) <= set(schemas)  # every reference resolves
    answer = schema["paths"]["/api/translate"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(schemas[answer["$ref"].rsplit("/", 1)[1]]["properties"]) == {"model", "translations", "scores", "n_best"}


def metric(url: str, name: str, default: float | None = None, **labels: str) -> float:
    """A sample's value in /metrics; one that is absent is default, or a failure where there is none."""
    status, text = 0, ""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as reply:
        status, text = reply.status, reply.read().decode()
    assert status == 200
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    assert default is not None, f"no {name} {labels} in /metrics"
    return default


def test_metrics_count_what_was_sent(url):
    before = {
        "ok": metric(url, "aiayn_http_requests_total", 0, route="/api/translate", status="200"),
        "bad": metric(url, "aiayn_http_requests_total", 0, route="/api/translate", status="422"),
        "other": metric(url, "aiayn_http_requests_total", 0, route="other", status="404"),
        "sentences": metric(url, "aiayn_sentences_total", 0, model="en-fr"),
        "tokens": metric(url, "aiayn_generated_tokens_total", 0, model="en-fr"),
        "batches": metric(url, "aiayn_batch_lines_count", 0, model="en-fr"),
        "latency": metric(url, "aiayn_http_request_duration_seconds_count", 0, route="/api/translate"),
    }
    for _ in range(3):
        assert request(f"{url}/api/translate", {"lines": LINES[:2], "model": "en-fr"})[0] == 200
    assert request(f"{url}/api/translate", {"lines": []})[0] == 422
    assert request(f"{url}/no/such/path/{time.time()}")[0] == 404
    assert metric(url, "aiayn_http_requests_total", route="/api/translate", status="200") == before["ok"] + 3
    assert metric(url, "aiayn_http_requests_total", route="/api/translate", status="422") == before["bad"] + 1
    assert metric(url, "aiayn_http_requests_total", route="other", status="404") == before["other"] + 1  # no path label
    assert metric(url, "aiayn_http_request_duration_seconds_count", route="/api/translate") == before["latency"] + 4
    assert metric(url, "aiayn_sentences_total", model="en-fr") == before["sentences"] + 6
    assert metric(url, "aiayn_batch_lines_count", model="en-fr") == before["batches"] + 3  # one at a time: 3 batches
    assert metric(url, "aiayn_generated_tokens_total", model="en-fr") > before["tokens"]
    assert metric(url, "aiayn_queue_depth", model="model") == 0


def test_the_app_answers_while_its_models_load_and_is_ready_after(model_dir, translators):
    loading = threading.Event()

    def slow_load():
        assert loading.wait(30)
        return translators[0]

    app = build_app([ServedModel("tiny", model_dir, slow_load, "en", "de")], local_only=True)
    with served(app) as base:
        status, headers, health = request(f"{base}/api/health")
        assert (status, health["status"], health["models"]) == (503, "loading", {"tiny": "loading"})
        assert headers["retry-after"] == "5"
        status, headers, reply = request(f"{base}/api/translate", {"lines": ["A dog."]})
        assert status == 503 and "loading" in reply["error"] and headers["retry-after"] == "5"
        assert request(f"{base}/api/model")[0] == 503
        loading.set()
        deadline = time.monotonic() + 30
        while request(f"{base}/api/health")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert request(f"{base}/api/translate", {"lines": ["A dog."]})[2]["translations"] == translators[0].translate(
            ["A dog."]
        )


def test_sigterm_with_requests_in_flight_answers_every_one_and_exits_0(model_dir, tmp_path):
    """SIGTERM while the model works through a queue: the batch in flight is answered 200, each request still
    waiting 503 with Retry-After, no connection goes unanswered, and the process exits 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "aiayn", "serve", "--model", str(model_dir), "--port", str(port)]
    with open(log, "wb") as out:
        server = subprocess.Popen([*command, "--max-beam", "64", "--gemm", "mkl"], stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            try:
                if request(f"{base}/api/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        lines = [f"A dog number {i} runs after a red ball in the park." for i in range(8)]

        def ask(beam: int):  # each beam size its own batch: they queue up behind one another
            try:
                return request(f"{base}/api/translate", {"lines": lines, "beam_size": beam})
            except OSError as err:
                return repr(err), {}, {}

        with ThreadPoolExecutor(12) as pool:
            replies = [pool.submit(ask, beam) for beam in range(8, 20)]
            deadline = time.monotonic() + 30
            while request(f"{base}/api/health")[2]["queued"] < 3:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            server.send_signal(signal.SIGTERM)
            answers = [r.result(timeout=60) for r in replies]
        assert server.wait(30) == 0, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
    statuses = [a[0] for a in answers]
    assert set(statuses) <= {200, 503}, statuses  # no connection error: every request answered
    assert 200 in statuses and 503 in statuses, statuses
    for status, headers, reply in answers:
        if status == 503:
            assert headers["retry-after"] == "5" and "stopping" in reply["error"]
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "a={m}", "--model", "a={f}"], "--model: two models are named 'a'; name them (--model NAME=DIR)"),
        (
            ["--model", "{m}", "--model", "{f}", "--source-lang", "en"],
            "--source-lang en: 2 models are served; say which",
        ),
        (["--model", "a={m}", "--target-lang", "b=de"], "--target-lang b=de: no model is named 'b' (the names: a)"),
        (["--model", "={m}"], "the name before '=' is empty"),
        (["--model", "a={m}", "--model", "b={m}/absent"], "absent: no such model directory"),
    ],
)
def test_the_serve_command_checks_its_models_before_it_serves(model_dir, marian_dir, capsys, argv, message):
    from aiayn.cli import main

    argv = [a.replace("{m}", str(model_dir)).replace("{f}", str(marian_dir)) for a in argv]
    assert main(["serve", *argv, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("aiayn serve: error: ") and message in err, err


def reference_next(model_dir, source_ids: list[int], prefix: list[int], temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) of the paper's model (model/, float32, teacher-forced) after prefix, with the
    tokens never written (padding, the start token) masked to -inf first: (V,)."""
    model = load_model(model_dir).eval()
    config = model.config
    with torch.no_grad():
        logits = model(torch.tensor([source_ids]), torch.tensor([[config.bos_id, *prefix]]))[0, -1]  # (V,)
    logits[[config.pad_id, config.bos_id]] = -math.inf
    return (logits / temperature).softmax(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_next_is_the_masked_softmax_of_the_models_logits(url, model_dir, translators, temperature):
    tiny = translators[0]
    source, prefix = LINES[0], "Ein Mann"
    status, _, reply = request(
        f"{url}/api/next", {"source": source, "prefix": prefix, "temperature": temperature, "top_k": 7}
    )
    assert status == 200 and reply["model"] == "model", reply
    prefix_ids = tiny.tokenizer.encode_target([prefix])[0][:-1]
    expected = reference_next(model_dir, tiny.encode([source])[0], prefix_ids, temperature)
    top = expected.topk(7)
    assert reply["ids"] == top.indices.tolist() and reply["tokens"] == tiny.tokenizer.pieces(top.indices.tolist())
    assert reply["probs"] == pytest.approx(top.values.tolist(), abs=1e-5)


def test_sampling_is_reproducible_and_top_1_is_greedy(url, translators):
    body = {"source": LINES[1], "temperature": 1.5, "seed": 7, "model": "en-fr"}
    first, again = (request(f"{url}/api/sample", body)[2] for _ in range(2))
    assert first == again and first["text"] == translators[1].tokenizer.decode(first["ids"])
    assert all(0 < p <= 1 for p in first["probs"]) and len(first["tokens"]) == len(first["ids"])
    others = {request(f"{url}/api/sample", {**body, "seed": seed})[2]["text"] for seed in range(8)}
    assert len(others) > 1  # another seed, another draw
    greedy = request(f"{url}/api/sample", {**body, "top_k": 1})[2]
    assert greedy["text"] == translators[1].translate(LINES[1:2], beam_size=1)[0]
    assert greedy["probs"] == [1.0] * len(greedy["ids"])
    short = request(f"{url}/api/sample", {**body, "max_len": 2})[2]
    assert len(short["ids"]) <= 2


@pytest.mark.parametrize(
    "endpoint, body, field",
    [
        ("next", {"source": "A dog.", "temperature": 0}, "temperature"),
        ("next", {"source": "A dog.", "top_k": 0}, "top_k"),
        ("next", {"source": "A dog.", "prefix": "x " * 150}, "prefix"),  # longer than this source allows
        ("sample", {"source": "A dog."}, "seed"),
        ("sample", {"source": "A dog.", "seed": -1}, "seed"),
        ("sample", {"source": "A dog.", "seed": 1, "temperature": "hot"}, "temperature"),
    ],
)
def test_bad_next_and_sample_requests_name_their_field(url, endpoint, body, field):
    status, _, reply = request(f"{url}/api/{endpoint}", body)
    assert (status, reply["field"]) == (422, field), reply


def test_step_through_is_the_papers_model_traced_and_ends_where_next_does(url, model_dir, translators):
    from aiayn.model.trace import trace

    tiny = translators[0]
    source, target = LINES[0], "Ein Mann fährt"
    status, _, reply = request(f"{url}/api/step", {"source": source, "position": 3, "layer": 1})
    assert status == 200 and reply["model"] == "model" and reply["side"] == "source", reply
    src_ids = tiny.encode([source])[0]
    tgt_in = [tiny.model.config.bos_id, *tiny.tokenizer.encode_target([target])[0][:-1]]
    expected = trace(load_model(model_dir).eval(), torch.tensor([src_ids]), torch.tensor([tgt_in[:1]]), "source", 3, 1)
    got, want = torch.tensor(reply["self_attention"]["weights"]), torch.tensor(expected["self_attention"]["weights"])
    assert torch.allclose(got, want, atol=1e-6)
    assert reply["output"] == pytest.approx(expected["output"], abs=1e-6)
    assert reply["source_tokens"] == tiny.tokenizer.pieces(src_ids)
    last = len(tgt_in) - 1
    body = {"source": source, "target": target, "side": "target", "position": last, "layer": 0}
    status, _, step = request(f"{url}/api/step", body)
    assert status == 200 and len(step["target_in_tokens"]) == len(tgt_in) and "cross_attention" in step
    _, _, after = request(f"{url}/api/next", {"source": source, "prefix": target, "top_k": 10})
    assert step["logits"]["ids"] == after["ids"]  # the served model's next token, by the fast path or the paper's
    assert step["logits"]["probs"] == pytest.approx(after["probs"], abs=1e-5)
    for bad, field in [({"position": 99}, "position"), ({"layer": 9}, "layer"), ({"side": "middle"}, "side")]:
        status, _, reply = request(f"{url}/api/step", {"source": source, **bad})
        assert (status, reply["field"]) == (422, field), reply
