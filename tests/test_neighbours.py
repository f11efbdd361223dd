"""The page's neighbours view (POST /api/neighbours): a source token's nearest tokens in a reference text by encoder
state, from --neighbours FILE or from the training text of the run the model was trained in."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from aiayn.serve.models import ServedModel
from aiayn.serve.neighbours import Reference
from aiayn.translator import Translator
from aiayn.weights import load_model
from serve_helpers import make_run, request, serving
from test_translate import data_dir  # noqa: F401  (a fixture)

SOURCE = "A man is riding a bike."


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
    """40 English sentences of Multi30k's validation set (and an empty line, which is not a sentence)."""
    with gzip.open(data_dir / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(40)]
    path = tmp_path_factory.mktemp("reference") / "reference.en"
    path.write_text("\n".join(lines[:20] + [""] + lines[20:]) + "\n", encoding="utf-8")
    return path, lines


@pytest.fixture(scope="module")
def models(tmp_path_factory, data_dir):
    """Two runs' tiny models: one whose run.json names Multi30k's training text, one without a run record."""
    root = tmp_path_factory.mktemp("neighbours")
    trained = make_run(root / "a", data_dir)
    recipe = {"data": {"train": str(data_dir / "multi30k" / "train"), "src_lang": "en", "tgt_lang": "de"}}
    (trained.parent / "run.json").write_text(json.dumps({"format": "aiayn-run", "recipe": recipe}))
    return trained, make_run(root / "b", data_dir)


@pytest.fixture(scope="module")
def url(models, reference):
    trained, plain = models
    given = ServedModel.of(Translator.load(plain), plain, name="given", neighbours=reference[0])
    bare = ServedModel.of(Translator.load(plain), plain, name="bare")
    with serving(trained, more=[given, bare]) as base:
        yield base


def brute_force(model_dir, sentences: list[str], query_ids: list[int], position: int, k: int):
    """The k nearest (sentence, position, cosine) by the paper's model's encoder, each sentence encoded alone."""
    translator, model = Translator.load(model_dir), load_model(model_dir).eval()
    with torch.no_grad():
        query = model.encode(torch.tensor([query_ids]))[0][0, position]
        found = []
        for i, sentence in enumerate(sentences):
            ids = translator.tokenizer.encode_source([sentence])[0]
            z = model.encode(torch.tensor([ids]))[0][0, :-1]  # every piece but </s>
            cosine = torch.nn.functional.cosine_similarity(z, query[None], dim=-1)
            found += [(c, i, p) for p, c in enumerate(cosine.tolist())]
    found.sort(reverse=True)
    return found[:k]


def test_the_neighbours_of_a_given_text_are_the_nearest_encoder_states(url, models, reference):
    path, sentences = reference
    status, _, reply = request(f"{url}/api/neighbours", {"source": SOURCE, "position": 1, "k": 6, "model": "given"})
    assert status == 200, reply
    index = reply["index"]
    assert (index["source"], index["lines"], index["sentences"], index["too_long"]) == (str(path), 40, 40, 0)
    translator = Translator.load(models[1])
    query_ids = translator.encode([SOURCE])[0]
    assert reply["source_tokens"] == translator.tokenizer.pieces(query_ids) and reply["position"] == 1
    assert reply["token"] == reply["source_tokens"][1]
    expected = brute_force(models[1], sentences, query_ids, 1, 6)
    got = reply["neighbours"]
    assert [(n["sentence"], n["position"]) for n in got] == [(sentences[i], p) for _, i, p in expected]
    assert [n["similarity"] for n in got] == pytest.approx([c for c, _, _ in expected], abs=1e-5)
    for n in got:
        assert n["token"] == n["tokens"][n["position"]]
        assert n["tokens"] == translator.tokenizer.pieces(translator.tokenizer.encode_source([n["sentence"]])[0])
    info = {m["name"]: m["neighbours"] for m in request(f"{url}/api/model")[2]["models"]}
    assert info["given"]["built"] and info["given"]["tokens"] == index["tokens"]


def test_a_run_beside_its_model_gives_its_training_text(url, data_dir):
    before = {m["name"]: m["neighbours"] for m in request(f"{url}/api/model")[2]["models"]}["model"]
    assert before["available"] and "training text" in before["source"]
    status, _, reply = request(f"{url}/api/neighbours", {"source": SOURCE, "position": 2})
    assert status == 200 and len(reply["neighbours"]) == 5, reply
    index = reply["index"]
    assert index["lines"] == 29_000 and index["sentences"] + index["too_long"] == 2_000
    with gzip.open(data_dir / "multi30k" / "train.en.gz", "rt", encoding="utf-8") as f:
        train = {line.rstrip("\n") for line in f}
    assert all(n["sentence"] in train for n in reply["neighbours"])
    sims = [n["similarity"] for n in reply["neighbours"]]
    assert sims == sorted(sims, reverse=True) and all(-1 - 1e-6 <= s <= 1 + 1e-6 for s in sims)


def test_without_a_text_the_answer_says_how_to_give_one_and_bad_fields_are_named(url):
    info = {m["name"]: m["neighbours"] for m in request(f"{url}/api/model")[2]["models"]}["bare"]
    assert not info["available"] and "--neighbours FILE" in info["why"]
    status, _, reply = request(f"{url}/api/neighbours", {"source": SOURCE, "model": "bare"})
    assert (status, reply["field"]) == (404, "model") and "--neighbours FILE" in reply["error"]
    for bad, field in [({"position": 99}, "position"), ({"k": 0}, "k"), ({"k": "3"}, "k")]:
        status, _, reply = request(f"{url}/api/neighbours", {"source": SOURCE, "model": "given", **bad})
        assert (status, reply["field"]) == (422, field), reply


def test_the_sample_is_uniform_and_the_same_every_time():
    lines = [f"line {i}" if i % 7 else "" for i in range(1000)]
    reference = Reference("lines", lambda: iter(lines))
    first, count = reference.sample(50)
    assert count == sum(1 for line in lines if line) and len(set(first)) == 50 and all(first)
    assert reference.sample(50) == (first, count)
    assert sorted(Reference("few", lambda: iter(lines[:30])).sample(50)[0]) == sorted(
        line for line in lines[:30] if line
    )
    early = sum(int(line.split()[1]) < 500 for line in first)
    assert 15 <= early <= 35  # both halves of the text are drawn from


def test_a_text_that_cannot_be_indexed_is_said_once_and_not_read_again(models, tmp_path):
    bad, long = tmp_path / "bad.en", tmp_path / "long.en"
    bad.write_bytes(b"A dog runs.\n\xff\xfe not UTF-8\n")
    long.write_text(" ".join(["word"] * 400) + "\n", encoding="utf-8")
    plain = models[1]
    served = [
        ServedModel.of(Translator.load(plain), plain, name=name, neighbours=path)
        for name, path in (("bad", bad), ("long", long))
    ]
    with serving(plain, more=served) as base:
        for name, why, path in (("bad", "not valid UTF-8", bad), ("long", "longer than the model takes", long)):
            for _ in range(2):
                status, _, reply = request(f"{base}/api/neighbours", {"source": SOURCE, "model": name})
                assert (status, reply["field"]) == (404, "model") and why in reply["error"], reply
                path.unlink(missing_ok=True)  # the second answer comes from what the first learnt, not the file
            info = {m["name"]: m["neighbours"] for m in request(f"{base}/api/model")[2]["models"]}[name]
            assert not info["available"] and why in info["why"]


def test_a_marian_model_finds_neighbours_in_its_own_source_pieces(tmp_path, reference):
    from test_marian import build_marian

    marian = build_marian(tmp_path / "opus-mt-en-de")
    translator = Translator.load(marian)
    with serving(marian, translator=translator, neighbours=reference[0]) as base:
        status, _, reply = request(f"{base}/api/neighbours", {"source": SOURCE, "position": 1, "k": 3})
    assert status == 200 and len(reply["neighbours"]) == 3, reply
    source = {i: p for p, i in translator.tokenizer.vocab.items()}
    assert reply["source_tokens"] == [source[i] for i in translator.encode([SOURCE])[0]]
    assert all(n["token"] == n["tokens"][n["position"]] for n in reply["neighbours"])


def test_the_serve_command_checks_the_neighbours_option(models, capsys, tmp_path):
    from aiayn.cli import main

    for argv, message in [
        (["--model", str(models[0]), "--neighbours", str(tmp_path / "absent.en")], "absent.en: no file"),
        (["--model", f"a={models[0]}", "--neighbours", f"b={tmp_path}"], "no model is named 'b'"),
        (["--model", f"a={models[0]}", "--model", f"b={models[1]}", "--neighbours", "x.en"], "say which"),
    ]:
        assert main(["serve", *argv, "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
