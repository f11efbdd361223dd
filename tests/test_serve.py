"""aiayn serve's JSON API against the Translator and the model: translations, attention, the beam tree,
forced prefixes, every bad input, the queue limit, and batching of concurrent requests."""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from aiayn import cpu
from aiayn.cli import main
from aiayn.config import DecodeConfig
from aiayn.decode.beam import beam_search
from aiayn.lab import cost, softmax
from aiayn.serve.limits import Limits
from aiayn.translator import Translator
from aiayn.weights import load_model
from serve_helpers import RUN_RESULTS, make_run, request, serving
from test_translate import data_dir  # noqa: F401  (a fixture)

LINES = ["A man is riding a bike.", "", "Two dogs play in the snow.", "A woman in a red dress sings on a stage."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, data_dir):
    return make_run(tmp_path_factory.mktemp("serve"), data_dir)


@pytest.fixture(scope="module")
def url(model_dir):
    with serving(model_dir, Limits(max_lines=8, max_chars=400, max_body_bytes=4096, max_beam=6)) as base:
        yield base


@pytest.fixture(scope="module")
def translator(model_dir):
    return Translator.load(model_dir)


def test_translate_equals_the_translator(url, translator):
    for beam in (1, 4):
        status, _, reply = request(f"{url}/api/translate", {"lines": LINES, "beam_size": beam})
        assert status == 200 and "n_best" not in reply
        assert reply["translations"] == translator.translate(LINES, beam_size=beam)
    status, _, reply = request(f"{url}/api/translate", {"lines": LINES, "n_best": 3, "alpha": 1.0})
    expected = translator.translate_n_best(LINES, n_best=3, alpha=1.0)
    assert [[h["text"] for h in hyps] for hyps in reply["n_best"]] == [[t.text for t in hyps] for hyps in expected]
    scores = [h["score"] for hyps in reply["n_best"] for h in hyps]
    assert scores == pytest.approx([t.score for hyps in expected for t in hyps], abs=1e-5)
    assert reply["scores"] == pytest.approx([h[0].score if h else 0.0 for h in expected], abs=1e-5)


def test_explain_attention_and_tree(url, model_dir, translator):
    source = LINES[0]
    status, _, e = request(f"{url}/api/explain", {"source": source})
    assert status == 200 and e["forced"] == 0
    config = translator.model.config
    S, T = len(e["source_tokens"]), len(e["target_tokens"])
    assert e["source_ids"] == translator.encode([source])[0] and len(e["target_in_tokens"]) == T
    for kind, layers, shape in (
        ("encoder", config.n_layers, (S, S)),
        ("decoder", config.decoder_layers, (T, T)),
        ("cross", config.decoder_layers, (T, S)),
    ):
        weights = torch.tensor(e["attention"][kind], dtype=torch.float64)  # (layers, h, T_q, T_k)
        assert weights.shape == (layers, config.n_heads, *shape)
        assert torch.allclose(weights.sum(-1), torch.ones((), dtype=torch.float64), atol=1e-4)
    model = load_model(model_dir).eval()  # its own copy, not the server's
    src = torch.tensor([e["source_ids"]])
    tgt_in = torch.tensor([[config.bos_id] + e["target_ids"][:-1]])
    with torch.no_grad():
        cross = torch.stack(model(src, tgt_in, return_attention=True).attention.cross)[:, 0]
    assert torch.allclose(torch.tensor(e["attention"]["cross"]).float(), cross, atol=1e-5)
    # The tree's best finished path is beam search's best hypothesis, and the translation.
    best = beam_search(cpu.step_model(model), src, DecodeConfig(beam_size=4))[0][0]  # the server's step
    assert e["target_ids"] == best.tokens and e["score"] == pytest.approx(best.score, abs=1e-5)
    assert e["translation"] == translator.translate([source])[0]
    nodes = e["tree"]["nodes"]
    finished = [n for n in nodes if n["finished"]]
    top = max(finished, key=lambda n: n["score"])
    path, node = [], top
    while node["parent"] is not None:
        path.append(node["token"])
        node = nodes[node["parent"]]
    assert path[::-1] == e["target_ids"]
    assert all(len(ids) <= 2 * 4 for ids in e["tree"]["steps"])  # the K kept and at most K finishing
    for n in nodes[1:]:  # each hypothesis extends its parent by one token
        assert n["step"] == nodes[n["parent"]]["step"] + 1 and n["log_prob"] <= nodes[n["parent"]]["log_prob"] + 1e-6


def test_a_forced_prefix_comes_back_forced_and_continued(url, model_dir):
    source = LINES[2]
    _, _, free = request(f"{url}/api/explain", {"source": source})
    first_choices = [n for n in free["tree"]["nodes"] if n["parent"] == 0]
    prefix = [first_choices[-1]["token"], free["target_ids"][0]]  # a worse first token, then another
    status, _, e = request(f"{url}/api/explain", {"source": source, "target_ids": prefix})
    assert status == 200 and e["forced"] == 2 and e["target_ids"][:2] == prefix and len(e["target_ids"]) > 2
    model = load_model(model_dir).eval()
    src = torch.tensor([e["source_ids"]])
    with torch.no_grad():
        probs = model(src, torch.tensor([[model.config.bos_id] + prefix[:1]])).softmax(-1)[0]  # (2, V)
    forced = [n for n in e["tree"]["nodes"] if n["forced"]]
    assert [n["token"] for n in forced] == prefix
    for i, n in enumerate(forced):
        assert n["token_prob"] == pytest.approx(float(probs[i, prefix[i]]), abs=1e-5)
        top = probs[i].topk(len(n["alternatives"]))
        assert [a["token"] for a in n["alternatives"]] == top.indices.tolist()
    status, _, e = request(f"{url}/api/explain", {"source": source, "target": "Zwei Hunde"})
    assert status == 200 and e["translation"].startswith("Zwei Hunde")


BAD = [
    ("translate", None, b"{not json", 400, "body"),
    ("translate", None, b"\xff\xfe", 400, "body"),
    ("translate", [1, 2], None, 422, "body"),
    ("translate", {}, None, 422, "lines"),
    ("translate", {"lines": "A dog."}, None, 422, "lines"),
    ("translate", {"lines": []}, None, 422, "lines"),
    ("translate", {"lines": ["a"] * 9}, None, 422, "lines"),
    ("translate", {"lines": ["a", 3]}, None, 422, "lines[1]"),
    ("translate", {"lines": ["a" * 401]}, None, 422, "lines[0]"),
    ("translate", {"lines": ["x " * 150]}, None, 422, "lines[0]"),  # more tokens than the model's 96
    ("translate", {"lines": ["a"], "beam_size": 0}, None, 422, "beam_size"),
    ("translate", {"lines": ["a"], "beam_size": 7}, None, 422, "beam_size"),
    ("translate", {"lines": ["a"], "beam_size": "4"}, None, 422, "beam_size"),
    ("translate", {"lines": ["a"], "beam_size": True}, None, 422, "beam_size"),
    ("translate", {"lines": ["a"], "beam_size": 2, "n_best": 3}, None, 422, "n_best"),
    ("translate", {"lines": ["a"], "alpha": -1}, None, 422, "alpha"),
    ("translate", {"lines": ["a"], "file": "/etc/passwd"}, None, 422, "file"),
    ("translate", None, b'{"lines": ["a", "b\\ud800"]}', 422, "lines[1]"),  # a lone surrogate: no character
    ("translate", None, b'{"lines": ["' + b"a" * 5000 + b'"]}', 413, "body"),
    ("translate", None, b'{"lines": ["a"], "\\ud800": 1}', 422, "\ud800"),  # a field named by a lone surrogate
    ("explain", {"source": ""}, None, 422, "source"),
    ("explain", {"source": 5}, None, 422, "source"),
    ("explain", None, b'{"source": "a", "target": "\\udfff"}', 422, "target"),
    ("explain", {"source": "a", "target_ids": [1, -2]}, None, 422, "target_ids[1]"),
    ("explain", {"source": "a", "target_ids": "12"}, None, 422, "target_ids"),
    ("explain", {"source": "a", "target_ids": [5] * 90}, None, 422, "target_ids"),
    ("explain", {"source": "a", "target_ids": [5, 0]}, None, 422, "target_ids"),  # <pad>, never written
    ("explain", {"source": "a", "target_ids": [5, 2, 5]}, None, 422, "target_ids"),  # </s> before the end
    ("explain", {"source": "a", "target": "b", "target_ids": [5]}, None, 422, "target_ids"),
]


@pytest.mark.parametrize("endpoint, body, raw, status, field", BAD)
def test_bad_input_gets_its_status_and_field_and_the_next_request_succeeds(url, endpoint, body, raw, status, field):
    got, _, reply = request(f"{url}/api/{endpoint}", body, raw=raw)
    assert (got, reply["field"]) == (status, field), reply
    assert "Traceback" not in reply["error"] and (field == "body" or ascii(field)[1:-1] in ascii(reply["error"]))
    assert request(f"{url}/api/translate", {"lines": ["A dog."]})[0] == 200


def test_wrong_routes_and_methods_are_json_errors(url):
    assert request(f"{url}/api/nothing")[0::2] == (404, {"error": "GET /api/nothing: Not Found", "field": None})
    assert request(f"{url}/api/translate")[0] == 405
    assert request(f"{url}/static/..%2fapp.py")[0] == 404  # nothing outside the page's own files
    status, headers, _ = request(f"{url}/api/health")
    assert headers["content-security-policy"] == "default-src 'self'"  # the page loads nothing from elsewhere


def test_what_another_site_could_send_is_refused(url):
    """A page elsewhere can POST a form or plain text here without asking (JSON needs this server's leave), or reach
    a local server through a DNS name of its own pointed at 127.0.0.1: both get a JSON error, and no model work."""
    import urllib.error
    import urllib.request

    def send(headers: dict[str, str], body: bytes | None = b'{"lines": ["A dog."]}') -> tuple[int, dict]:
        req = urllib.request.Request(
            f"{url}/api/translate" if body else f"{url}/api/health", data=body, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    before = request(f"{url}/api/health")[2]["model_batches"]
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, reply = send({"Content-Type": media})
        assert (status, reply["field"]) == (415, "content-type") and "application/json" in reply["error"]
    port = url.rsplit(":", 1)[1]
    status, reply = send({"Content-Type": "application/json", "Host": f"attacker.example:{port}"})
    assert (status, reply["field"]) == (421, "host") and "attacker.example" in reply["error"]
    assert send({"Host": "rebound.example"}, body=None)[0] == 421  # GETs too: the answers could be read
    assert request(f"{url}/api/health")[2]["model_batches"] == before  # none of them reached the model
    for host in (f"localhost:{port}", f"127.0.0.2:{port}", f"[::1]:{port}", "localhost."):  # this machine, by any name
        assert send({"Content-Type": "application/json; charset=utf-8", "Host": host})[0] == 200, host


def test_32_concurrent_requests_are_batched_and_give_the_sequential_outputs(url):
    lines = [f"{w} dogs run in the park number {i}." for i, w in enumerate(["Two", "Three", "Many", "Small"] * 8)]
    sequential = [request(f"{url}/api/translate", {"lines": [line]})[2]["translations"] for line in lines]
    before = request(f"{url}/api/health")[2]
    with ThreadPoolExecutor(32) as pool:
        replies = list(pool.map(lambda line: request(f"{url}/api/translate", {"lines": [line]}), lines))
    after = request(f"{url}/api/health")[2]
    assert all(status == 200 for status, _, _ in replies)
    assert [reply["translations"] for _, _, reply in replies] == sequential
    assert after["requests"] - before["requests"] == 33
    assert 1 <= after["model_batches"] - before["model_batches"] < 32
    assert after["sentences"] - before["sentences"] == 32


def test_without_batching_each_request_is_its_own_model_batch(model_dir, translator):
    with serving(model_dir, batching=False, translator=translator) as base:
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda i: request(f"{base}/api/translate", {"lines": [LINES[i % 4]]}), range(8)))
        assert all(r[0] == 200 for r in replies)
        health = request(f"{base}/api/health")[2]
        assert health["batching"] is False and health["model_batches"] == 8


class BlockingTranslator:
    """The translator, whose translations wait until released: a worker that is busy."""

    def __init__(self, translator: Translator):
        self.inner, self.entered, self.release = translator, threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def translate_n_best(self, *args, **kwargs):
        self.entered.set()
        assert self.release.wait(30)
        return self.inner.translate_n_best(*args, **kwargs)


def test_a_full_queue_answers_503_with_retry_after(model_dir, translator):
    blocking = BlockingTranslator(translator)
    with (
        serving(model_dir, Limits(max_queue=1, batch_window_ms=0), translator=blocking) as base,
        ThreadPoolExecutor(2) as pool,
    ):
        first = pool.submit(request, f"{base}/api/translate", {"lines": ["A dog."]})
        assert blocking.entered.wait(30)  # the worker holds the first request
        second = pool.submit(request, f"{base}/api/translate", {"lines": ["A cat."]})
        deadline = time.monotonic() + 30
        while request(f"{base}/api/health")[2]["queued"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        status, headers, reply = request(f"{base}/api/translate", {"lines": ["A bird."]})
        assert status == 503 and headers["retry-after"] == "1" and "busy" in reply["error"]
        blocking.release.set()
        assert first.result()[0] == 200 and second.result()[0] == 200
        assert request(f"{base}/api/translate", {"lines": ["A bird."]})[0] == 200


def test_requests_set_aside_by_a_batching_window_never_overflow_the_queue_or_stop_the_worker(model_dir, translator):
    """A batch's window sets aside requests of other settings while new ones arrive: they wait at the front and count
    toward the queue's bound, so a burst gets answers or 503s, never a hang, and the server serves on (it once put
    them back past the bound, and the worker ended)."""
    blocking = BlockingTranslator(translator)
    limits = Limits(max_queue=4, batch_window_ms=300)
    with serving(model_dir, limits, translator=blocking) as base, ThreadPoolExecutor(9) as pool:
        ask = lambda beam: request(f"{base}/api/translate", {"lines": ["A dog runs."], "beam_size": beam})
        first = pool.submit(ask, 1)  # its window opens: 300 ms
        time.sleep(0.05)
        second = [pool.submit(ask, 2) for _ in range(4)]
        time.sleep(0.05)
        third = [pool.submit(ask, 3) for _ in range(4)]
        time.sleep(0.1)
        blocking.release.set()
        statuses = [f.result(timeout=60)[0] for f in [first, *second, *third]]
        assert set(statuses) <= {200, 503} and statuses[:5] == [200] * 5 and 503 in statuses
        assert ask(3)[0] == 200
        health = request(f"{base}/api/health")[2]
        assert health["queued"] == 0 and health["failed"] == 0


def test_model_and_figures(url):
    status, _, reply = request(f"{url}/api/model")
    m = reply["models"][0]
    assert status == 200 and (m["source_lang"], m["target_lang"]) == ("en", "de")
    assert (
        m["vocab_size"] == 200
        and m["encoder"] == {"layers": 2, "heads": 4, "d_k": 16, "d_v": 16, "d_ff": 256}
        and m["parameters"] > 0
    )
    _, _, f = request(f"{url}/api/figures/softmax?d_k=100&raw_scale=1.5&scaled=false")
    assert f["scores"] == pytest.approx([15.0, 7.5, 0.0])
    expected = [math.exp(s) / sum(math.exp(x) for x in f["scores"]) for s in f["scores"]]
    assert f["weights"] == pytest.approx(expected, rel=1e-9)
    assert f["jacobian_norm"] == pytest.approx(softmax.jacobian_norm(softmax.softmax(f["scores"])))
    assert request(f"{url}/api/figures/softmax?d_k=0")[0::2] == (
        422,
        {"error": "d_k = 0 is out of range: 1 to 4096", "field": "d_k"},
    )
    assert request(f"{url}/api/figures/softmax?d_k=100&raw_scale=1.5&scaled=No")[2] == f  # any case, yes/no too
    assert request(f"{url}/api/figures/softmax?scaled=False")[2] != request(f"{url}/api/figures/softmax?scaled=TRUE")[2]
    assert request(f"{url}/api/figures/softmax?scaled=maybe")[0::2] == (
        422,
        {"error": "scaled must be true or false, not 'maybe'", "field": "scaled"},
    )
    _, _, pe = request(f"{url}/api/figures/positions?length=20")
    assert pe["layout"] == "interleaved" and len(pe["values"]) == 20 and len(pe["values"][0]) == 64
    assert pe["values"][7][11] == pytest.approx(math.cos(7 / 10000 ** (10 / 64)), abs=1e-6)
    _, _, c = request(f"{url}/api/figures/cost")
    assert [tuple(r.values()) for r in c["table2"]] == [tuple(r) for r in cost.TABLE2]
    assert c["runs"] == [
        {
            "run": "tiny",
            "bleu": RUN_RESULTS["test_bleu"],
            "flops": RUN_RESULTS["matmul_flops"],
            "test": RUN_RESULTS["test"],
            "this_model": True,
        }
    ]


def test_an_unreadable_results_file_beside_the_model_is_skipped_with_its_reason(url, model_dir):
    runs = model_dir.parent.parent
    bad = {
        "nan-test": '{"test_bleu": 20.0, "matmul_flops": 1e15, "test": NaN}',
        "nan-bleu": '{"test_bleu": NaN, "matmul_flops": 1e15, "test": "t"}',
        "list-test": '{"test_bleu": 20.0, "matmul_flops": 1e15, "test": [Infinity]}',
        "not-an-object": "[1, 2]",
    }
    try:
        for name, text in bad.items():
            (runs / name).mkdir()
            (runs / name / "results.json").write_text(text)
        status, _, c = request(f"{url}/api/figures/cost")
        assert status == 200, c
        assert [r["run"] for r in c["runs"]] == ["tiny"]
        assert sorted(s["run"] for s in c["skipped"]) == sorted(bad) and all(s["why"] for s in c["skipped"])
    finally:
        for name in bad:
            shutil.rmtree(runs / name)


def test_serve_command_rejects_bad_limits(model_dir, capsys):
    for flags, message in [
        (["--max-lines", "0"], "argument --max-lines: must be at least 1, got 0"),
        (["--batch-window-ms", "nan"], "argument --batch-window-ms: must be a finite number"),
        (["--batch-window-ms", "inf"], "argument --batch-window-ms: must be a finite number"),
        (["--max-alpha", "nan"], "argument --max-alpha: must be a finite number"),
        (["--port", "70000"], "argument --port: must be at least 0 and at most 65535, got 70000"),
    ]:
        with pytest.raises(SystemExit) as exit_:  # as the options are read: before the model loads
            main(["serve", "--model", str(model_dir), *flags])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ValueError, match="--batch-window-ms must be a finite number"):
        Limits(batch_window_ms=float("nan"))  # the library's app is held to the same ranges
    for flags, message in [
        (["--beam-size", "40"], "--beam-size 40 is out of range: 1 to --max-beam (16)"),
        (["--beam-size", "8", "--max-beam", "6"], "--beam-size 8 is out of range: 1 to --max-beam (6)"),
        (["--alpha", "6"], "--alpha 6.0 is out of range: 0 to --max-alpha (5.0)"),
    ]:
        assert main(["serve", "--model", str(model_dir), *flags]) == 2
        err = capsys.readouterr().err
        assert err.strip() == f"aiayn serve: error: {message}" and "Traceback" not in err


def test_serve_says_a_port_in_use_before_loading_the_model(model_dir, capsys, monkeypatch):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(Translator, "load", lambda *a, **k: pytest.fail("the model was loaded"))
        assert main(["serve", "--model", str(model_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aiayn serve: error: cannot listen on 127.0.0.1:{port}: ") and "in use" in err
    assert "Traceback" not in err and "http://" not in err  # no banner for a server that never started


def test_serve_forces_the_gemm_backend_and_reports_it(model_dir, monkeypatch):
    import uvicorn

    import aiayn.serve.app as app_module
    from aiayn.cli.translate import GEMM_CHOICES
    from aiayn.cpu.backend import BACKENDS
    from aiayn.cpu.vocabulary import is_packed

    assert GEMM_CHOICES == ("auto", *BACKENDS)  # the CLI offers every backend
    served, build_app = {}, app_module.build_app

    def capture(models, *args, **kwargs):
        served["translator"] = models[0].load()  # what the server would load
        return build_app(models, *args, **kwargs)

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # no server: what it would serve
    monkeypatch.setattr(app_module, "build_app", capture)
    assert main(["serve", "--model", str(model_dir), "--gemm", "mkl+packed", "--port", "0"]) == 0
    monkeypatch.undo()  # uvicorn's own again, for the server below
    translator = served["translator"]
    assert translator.gemm == "mkl+packed" and is_packed(translator.model)
    with serving(model_dir, translator=translator) as base:
        assert request(f"{base}/api/model")[2]["models"][0]["gemm"] == "mkl+packed"


def test_an_int8_model_is_served_with_its_parameter_count_and_the_languages_it_records(model_dir, url):
    int8 = Translator.load(model_dir, int8=True)
    int8.model.config = int8.model.config.replace(src_lang="fr", tgt_lang="en")  # as training records them
    with serving(model_dir, translator=int8, langs=(None, None)) as base:
        m = request(f"{base}/api/model")[2]["models"][0]
        assert m["parameters"] == request(f"{url}/api/model")[2]["models"][0]["parameters"]
        assert (m["source_lang"], m["target_lang"]) == ("fr", "en")
        status, _, e = request(f"{base}/api/explain", {"source": LINES[0], "beam_size": 2})
        assert status == 200 and len(e["attention"]["cross"]) == 2


def test_idle_connections_never_take_the_server_down(model_dir, tmp_path):
    """More idle connections than the process may open files: each is answered 503 or closed at its header deadline,
    a real client is served within seconds, and the log stays a few lines (no accept() tracebacks)."""
    import resource
    import socket
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path / "serve.log"

    def low_file_limit() -> None:  # a common default, and the hard limit too: aiayn cannot raise it
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aiayn",
                "serve",
                "--model",
                str(model_dir),
                "--port",
                str(port),
                "--header-timeout-s",
                "1",
                "--gemm",
                "mkl",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=low_file_limit,
        )
    base, idle = f"http://127.0.0.1:{port}", []

    def translate(timeout: float) -> int:
        req = urllib.request.Request(
            f"{base}/api/translate",
            data=json.dumps({"lines": ["A dog."]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as reply:
                return reply.status
        except urllib.error.HTTPError as err:
            return err.code

    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
            try:
                if translate(5) == 200:
                    break
            except OSError:
                time.sleep(0.2)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(400)]
        statuses, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                statuses.append(translate(3))
            except OSError as err:
                statuses.append(repr(err))
            if statuses[-1] == 200:
                break
            time.sleep(0.2)
        assert statuses[-1] == 200, statuses
        for sock in idle:  # every idle connection has its answer: a 503, or the end of the connection
            sock.settimeout(10)
            data = sock.recv(200)
            assert data == b"" or data.startswith(b"HTTP/1.1 503"), data
        assert server.poll() is None
    finally:
        for sock in idle:
            sock.close()
        server.terminate()
        server.wait(30)
    text = log_path.read_text()
    assert "--max-connections 1000 lowered to 192" in text and "Traceback" not in text, text[:2000]
    assert len(text) < 5000, text[:2000]


def test_a_body_that_never_finishes_is_answered_408_and_frees_its_connection(model_dir):
    """A client that sends its headers and part of its body, then nothing: 408 naming the body, within
    --body-timeout-s, and the server goes on answering."""
    import socket

    with serving(model_dir, Limits(body_timeout_s=0.5)) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"lines": ['
            )
            began, reply = time.monotonic(), b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        assert time.monotonic() - began < 5, reply
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408") and json.loads(body)["field"] == "body", reply
        assert request(f"{base}/api/translate", {"lines": ["A dog."]})[0] == 200
