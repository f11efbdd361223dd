"""`aiayn evaluate`: the same BLEU and chrF as sacreBLEU's own command, the paper's tokenised BLEU, perplexity."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from aiayn import evaluate
from aiayn.cli import main
from aiayn.translator import Translator
from aiayn.weights import load_model
from test_translate import build_tiny_model_dir, data_dir  # noqa: F401  (a fixture)


def read_gz(path, n):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="module")
def files(tmp_path_factory, data_dir):  # noqa: F811
    """200 German references and a hypothesis file made from them by dropping and swapping words."""
    refs = read_gz(data_dir / "multi30k" / "val.de.gz", 200)
    hyps = []
    for i, ref in enumerate(refs):
        words = ref.split()
        if i % 3 == 0:
            words = words[:-2] + words[-1:]
        if i % 4 == 1 and len(words) > 3:
            words[1], words[2] = words[2], words[1]
        hyps.append(" ".join(words))
    directory = tmp_path_factory.mktemp("eval")
    (directory / "ref.de").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (directory / "hyp.de").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    return directory


def test_bleu_and_chrf_equal_sacrebleus_command(files, capsys):
    ref, hyp = files / "ref.de", files / "hyp.de"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            str(ref),
            "-i",
            str(hyp),
            "-m",
            "bleu",
            "chrf",
            "-w",
            "4",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    theirs = json.loads(done.stdout)
    assert main(["evaluate", "--ref", str(ref), "--hyp", str(hyp), "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert 20 < ours["sacreBLEU"]["score"] < 95
    assert ours["sacreBLEU"]["score"] == pytest.approx(theirs[0]["score"], abs=1e-4)
    assert ours["chrF"]["score"] == pytest.approx(theirs[1]["score"], abs=1e-4)
    assert ours["sacreBLEU"]["signature"] == theirs[0]["signature"]
    assert ours["chrF"]["signature"] == theirs[1]["signature"]


def test_compound_splitting_as_tensor2tensor():
    assert evaluate.split_compounds("ein rot-weißes Hemd") == "ein rot ##AT##-##AT## weißes Hemd"
    assert evaluate.split_compounds("a-b-c - d") == "a ##AT##-##AT## b-c - d"  # like perl's s///g


def test_tokenised_bleu_by_hand():
    # Moses splits the full stop; the compound splits into three tokens:
    # Ein rot ##AT##-##AT## weißes Hemd .   against   Ein rot ##AT##-##AT## weißes Kleid .
    # n-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths, no brevity penalty.
    score = evaluate.tokenized_bleu(["Ein rot-weißes Hemd."], ["Ein rot-weißes Kleid."], "de").score
    assert score == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-6)
    # Without splitting there is no matching 3-gram: the split is what gives credit for "rot" and "weißes".
    assert evaluate.sacre_bleu(["Ein rot-weißes Hemd."], ["Ein rot-weißes Kleid."]).score < score


def test_evaluate_reads_gzip_files_as_the_shared_data_holds_them(files, tmp_path, capsys):
    import gzip

    for name in ("ref.de", "hyp.de"):
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress((files / name).read_bytes()))
    assert main(["evaluate", "--ref", str(files / "ref.de"), "--hyp", str(files / "hyp.de"), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--ref", str(tmp_path / "ref.de.gz"), "--hyp", str(tmp_path / "hyp.de.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == plain
    (tmp_path / "cut.gz").write_bytes(gzip.compress((files / "hyp.de").read_bytes())[:-12])
    assert main(["evaluate", "--ref", str(files / "ref.de"), "--hyp", str(tmp_path / "cut.gz")]) == 2
    assert f"{tmp_path / 'cut.gz'}: not a valid gzip file" in capsys.readouterr().err


def test_perplexity_and_evaluate_with_a_model(tmp_path, files, data_dir, capsys):  # noqa: F811
    model_dir = build_tiny_model_dir(tmp_path / "model", data_dir)
    src = read_gz(data_dir / "multi30k" / "val.en.gz", 12)
    ref = read_gz(data_dir / "multi30k" / "val.de.gz", 12)
    (tmp_path / "src.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("\n".join(ref) + "\n", encoding="utf-8")
    translator = Translator.load(model_dir)
    model, vocab = load_model(model_dir), translator.tokenizer
    # Perplexity by hand, one sentence at a time: exp(total -log p of every reference piece and </s>).
    nll, n = 0.0, 0
    for s, r in zip(vocab.encode_source(src), vocab.encode_target(ref)):
        logits = model(torch.tensor([s]), torch.tensor([[model.config.bos_id] + r[:-1]]))[0]
        nll += F.cross_entropy(logits, torch.tensor(r), reduction="sum").item()
        n += len(r)
    ppl, count = evaluate.perplexity(model, vocab.encode_source(src), vocab.encode_target(ref), batch_size=5)
    assert count == n and ppl == pytest.approx(math.exp(nll / n), rel=1e-5)

    hyp_file = tmp_path / "hyp.de"
    argv = ["evaluate", "--model", str(model_dir), "--src", str(tmp_path / "src.en"), "--ref", str(tmp_path / "ref.de")]
    assert main([*argv, "--save-hyp", str(hyp_file), "--json", "--beam-size", "2"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["perplexity"] == pytest.approx(ppl, rel=1e-5)
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    assert hyps == translator.translate(src, beam_size=2)
    assert scores["sacreBLEU"]["score"] == pytest.approx(evaluate.sacre_bleu(hyps, ref).score)


def test_line_count_mismatch_is_an_error(files, tmp_path, capsys):
    short = tmp_path / "short.de"
    short.write_text("Ein Hund.\n", encoding="utf-8")
    assert main(["evaluate", "--ref", str(files / "ref.de"), "--hyp", str(short)]) == 2
    assert "1 lines but" in capsys.readouterr().err


def test_french_hyphens_stay_whole_german_compounds_split():
    # French: Moses keeps "arc-en-ciel" as one token and nothing is split, so it is one token on each side:
    # Il y a un arc-en-ciel rouge ici .   against   Il y a un arc-en-ciel bleu ici .
    # n-gram precisions 7/8, 5/7, 3/6, 2/5; equal lengths, no brevity penalty.
    hyp, ref = "Il y a un arc-en-ciel rouge ici.", "Il y a un arc-en-ciel bleu ici."
    tokenized = evaluate.tokenized_bleu([hyp], [ref], "fr")
    assert tokenized.score == pytest.approx(100 * (7 / 8 * 5 / 7 * 3 / 6 * 2 / 5) ** 0.25, abs=1e-6)
    assert "compound-split" not in tokenized.signature
    # German: "rot-weißes" becomes rot ##AT##-##AT## weißes (the hand count of test_tokenised_bleu_by_hand)
    german = evaluate.tokenized_bleu(["Ein rot-weißes Hemd."], ["Ein rot-weißes Kleid."], "de")
    assert german.score == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-6)
    assert "compound-split" in german.signature
    assert evaluate.tokenized_bleu(["Ein rot-weißes Hemd."], ["Ein rot-weißes Kleid."], "fr").score == 0  # no 4-gram


def test_unicode_punctuation_as_moses_replaces_it():
    assert (
        evaluate.replace_unicode_punctuation("“Ja”， sagte er… （gut）！ ５０％ l’homme。 Fin")
        == '"Ja", sagte er... (gut)! 50% l\'homme. Fin'
    )
    assert evaluate.replace_unicode_punctuation("„Ja“ «oui» – gut") == '„Ja" «oui» – gut'  # what the script leaves


def test_tokenised_bleu_replaces_the_hypothesis_punctuation_only():
    # get_ende_bleu.sh runs replace-unicode-punctuation on the decodes, not on the references
    curly, straight = "Er sagte “ja” und ging.", 'Er sagte "ja" und ging.'
    assert evaluate.tokenized_bleu([curly], [straight], "de").score == pytest.approx(100)
    assert evaluate.tokenized_bleu([straight], [curly], "de").score < 100


def test_lang_comes_from_the_model_unless_given(tmp_path, data_dir, capsys):  # noqa: F811
    model_dir = build_tiny_model_dir(tmp_path / "model", data_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["model"]["tgt_lang"] = "fr"  # a model that writes French
    (model_dir / "config.json").write_text(json.dumps(config))
    src = read_gz(data_dir / "multi30k" / "val.en.gz", 4)
    ref = read_gz(data_dir / "multi30k" / "val.fr.gz", 4)
    (tmp_path / "src.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "ref.fr").write_text("\n".join(ref) + "\n", encoding="utf-8")
    argv = [
        "evaluate",
        "--model",
        str(model_dir),
        "--src",
        str(tmp_path / "src.en"),
        "--ref",
        str(tmp_path / "ref.fr"),
        "--json",
        "--beam-size",
        "1",
    ]

    def signature(*extra: str) -> str:
        assert main([*argv, *extra]) == 0
        return json.loads(capsys.readouterr().out)["tokenised BLEU"]["signature"]

    assert signature() == "hyp replace-unicode-punctuation|moses -l fr|multi-bleu"  # the model's language
    assert signature("--lang", "de") == "hyp replace-unicode-punctuation|moses -l de|compound-split|multi-bleu"
    hyp = tmp_path / "hyp.fr"
    hyp.write_text("\n".join(ref) + "\n", encoding="utf-8")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(tmp_path / "ref.fr"), "--json"]) == 0
    assert "moses -l de" in json.loads(capsys.readouterr().out)["tokenised BLEU"]["signature"]  # no model: de
