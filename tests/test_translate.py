"""The Translator and `aiayn translate`: one output line per input line, in order, with clear errors."""

from __future__ import annotations

import gc
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.cli import main
from aiayn.config import DecodeConfig, ModelConfig
from aiayn.data.vocab import Vocab
from aiayn.model import Transformer
from aiayn.translator import SentenceTooLong, Translator
from aiayn.weights import save_model

MAX_LEN = 96


def build_tiny_model_dir(directory: Path, data_dir: Path) -> Path:
    """Random tiny weights and a 200-piece vocabulary trained on 300 Multi30k sentence pairs."""
    lines = []
    for lang in ("en", "de"):
        with gzip.open(data_dir / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines += [next(f).strip() for _ in range(300)]
    vocab = Vocab.train(lines, 200)
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=len(vocab), max_len=MAX_LEN, final_logits_bias=True)
    model = Transformer(config)
    with torch.no_grad():
        model.logits_bias[config.eos_id] = 1.0  # random weights rarely stop; this ends some outputs early
    return save_model(model, directory, vocab.proto)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, data_dir) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), data_dir)


@pytest.fixture(scope="module")
def data_dir() -> Path:  # module scope, unlike conftest's
    path = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (path / "multi30k").is_dir():
        pytest.fail(f"the shared data folder is missing: {path}")
    return path


LINES = [
    "A man in a red shirt is riding a bicycle down the street while people watch.",
    "",
    "Zwei Hunde.",
    "   ",
    "Ein Mädchen ☃ springt über den Zaun — «schnell»!",
    "Dogs.",
    "A very long sentence about a group of people standing in front of an old building at night.",
]


def test_translator_api(model_dir):
    translator = Translator.load(model_dir, beam_size=3)
    assert translator.config == DecodeConfig(beam_size=3)
    out = translator.translate(LINES)
    assert len(out) == len(LINES) and out[1] == "" and out[3] == ""
    assert len({out[i] for i in (0, 2, 4, 5, 6)}) > 1
    # Each line alone gives the same translation as in the batch sorted by length.
    for line, text in zip(LINES, out):
        assert translator.translate([line]) == [text]
    n_best = translator.translate_n_best(LINES[:1], n_best=3)[0]
    assert len(n_best) == 3 and n_best[0].text == out[0]
    assert n_best[0].score >= n_best[1].score >= n_best[2].score
    assert translator.translate(LINES, beam_size=1) == [
        t[0].text if t else "" for t in ([translator.translate_n_best([line], beam_size=1)[0] for line in LINES])
    ]


def test_the_api_names_a_wrong_argument_instead_of_translating_it_somehow(model_dir):
    translator = Translator.load(model_dir, beam_size=2)
    with pytest.raises(TypeError, match="not one str: translate\\(\\[text\\]\\) for one sentence"):
        translator.translate("A man.")  # five characters would have been five sentences
    with pytest.raises(TypeError, match=r"sentences\[1\] = None: must be a string"):
        translator.translate(["A man.", None])
    with pytest.raises(TypeError, match="sentences must be a list of strings, not int"):
        translator.translate(5)
    assert translator.translate(line for line in LINES[:2]) == translator.translate(LINES[:2])  # any iterable
    for options, error in [
        ({"batch_size": "4"}, TypeError),
        ({"batch_size": True}, TypeError),
        ({"truncate": "no"}, TypeError),
        ({"max_tokens": 0}, ValueError),
    ]:
        with pytest.raises(error, match=next(iter(options))):
            Translator.load(model_dir, **options)
    with pytest.raises(TypeError, match="decode_config must be a DecodeConfig, not NoneType"):
        Translator(translator.model, translator.tokenizer, decode_config=None)
    with pytest.raises(ValueError, match="n_best 3 with sampling"):
        translator.translate(["A man."], sample=True, n_best=3)


def test_loaded_translator_is_laid_out_for_decoding_and_translates_the_same(model_dir):
    """With MKL's products Translator.load reads matrices column-major (aiayn.cpu.layout); the translations
    do not change. (On a host where oneDNN is faster, the default takes it and keeps the layout: test_backend.)"""
    from aiayn.cpu.layout import is_column_major
    from aiayn.weights import load_model

    loaded = Translator.load(model_dir, beam_size=3, gemm="mkl")
    assert all(is_column_major(p) for p in loaded.model.parameters() if p.dim() == 2)
    assert loaded.model.logits_bias is not None  # not all zeros here: kept
    plain = Translator(load_model(model_dir), loaded.tokenizer, DecodeConfig(beam_size=3))
    assert plain.model.decoder.embed.weight.is_contiguous()
    assert loaded.translate(LINES) == plain.translate(LINES)
    assert loaded.translate(LINES, beam_size=1) == plain.translate(LINES, beam_size=1)


def test_too_long_sentence_is_named_or_truncated(model_dir):
    translator = Translator.load(model_dir)
    long_line = "word " * 200
    with pytest.raises(SentenceTooLong, match="sentence 2: .* more than the model's maximum of 96"):
        translator.translate(["short", long_line])
    cut = Translator.load(model_dir, truncate=True)
    assert len(cut.translate(["short", long_line])) == 2
    assert len(cut.encode([long_line])[0]) == MAX_LEN


def run_cli(*argv: str) -> int:
    return main(["translate", *argv])


def test_cli_files_one_line_per_line_in_order(model_dir, tmp_path, capsys):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert run_cli("--model", str(model_dir), "-i", str(src), "-o", str(out), "-b", "2", "--batch-size", "2") == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(LINES)  # one line each, newline-terminated
    expected = Translator.load(model_dir, beam_size=2).translate(LINES)
    assert lines[:-1] == expected
    assert len({line for line in expected if line}) >= 3  # real, different translations
    assert "translate" in capsys.readouterr().err  # the progress bar, on stderr


def test_cli_n_best(model_dir, tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("Zwei Hunde.\n\nDogs.\n", encoding="utf-8")
    assert run_cli("--model", str(model_dir), "-i", str(src), "-o", str(out), "--n-best", "2", "-q") == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r[0] for r in rows] == ["1", "1", "2", "2", "3", "3"]
    assert rows[2][1:] == ["0.0000", ""] and rows[3][1:] == ["0.0000", ""]
    assert float(rows[0][1]) >= float(rows[1][1])


def test_cli_long_line_error_names_the_line(model_dir, tmp_path, capsys):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("Dogs.\nTwo cats.\n" + "word " * 200 + "\nA dog.\n", encoding="utf-8")
    (tmp_path / "out.txt.tmp").write_text("the user's own file\n")  # never the temporary's name
    assert run_cli("--model", str(model_dir), "-i", str(src), "-o", str(out), "-q") == 2
    assert f"{src}: line 3: " in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out.txt.*"))  # no half-written output
    assert (tmp_path / "out.txt.tmp").read_text() == "the user's own file\n"
    assert run_cli("--model", str(model_dir), "-i", str(src), "-o", str(out), "-q", "--truncate") == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 4


def test_cli_invalid_utf8_names_the_line(model_dir, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(b"Dogs.\nZwei Hunde.\n" + b"caf\xe9\n")
    assert run_cli("--model", str(model_dir), "-i", str(src), "-q") == 2
    assert f"{src}: line 3: not valid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("dashes", [[], ["-i", "-", "-o", "-"]])
def test_cli_stdin_to_stdout(model_dir, dashes):
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}  # the output is UTF-8 whatever the locale says
    text = "Ein Mädchen ☃.\n\nDogs.\n"
    done = subprocess.run(
        [sys.executable, "-m", "aiayn", "translate", "--model", str(model_dir), "-b", "1", *dashes],
        input=text.encode(),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode("utf-8").split("\n")
    assert lines == Translator.load(model_dir, beam_size=1).translate(text.splitlines()) + [""]
    assert done.stderr == b""  # no progress bar for a stream


def test_int8_translator_loads_mapped_weights_into_the_same_model(model_dir):
    """Translator.load(int8=True) maps the weights and quantises layer by layer: same model, nothing left mapped."""
    from aiayn.cpu.quantize import quantize_int8
    from aiayn.weights import load_model

    src, tgt = torch.randint(4, 200, (3, 9)), torch.randint(4, 200, (3, 7))
    with torch.no_grad():
        expected = quantize_int8(load_model(model_dir))(src, tgt)
        translator = Translator.load(model_dir, int8=True)
        assert torch.equal(translator.model(src, tgt), expected)
    from aiayn.cpu.step import CpuStep

    assert CpuStep(translator.model).uses_layer_step  # its steps without training's wrappers (cpu/layer_step.py)
    gc.collect()
    maps = Path("/proc/self/maps")  # Linux: the file is unmapped once no tensor of the model views it
    assert not maps.exists() or str(model_dir / "model.safetensors") not in maps.read_text()


def test_int8_stays_close_to_float32(model_dir, tmp_path):
    """int8 linear layers (with the fused Q/K/V and the tied projection) change logits only a little."""
    from aiayn.cpu.quantize import quantize_int8
    from aiayn.weights import load_model

    model, src = load_model(model_dir), torch.randint(4, 200, (3, 9))
    tgt = torch.randint(4, 200, (3, 7))
    with torch.no_grad():
        reference = model(src, tgt)
        quantized = quantize_int8(load_model(model_dir))(src, tgt)
    assert not torch.equal(quantized, reference)  # it really is another computation
    assert (quantized - reference).abs().max() < 0.05 * reference.abs().max()
    assert quantized.argmax(-1).eq(reference.argmax(-1)).float().mean() > 0.9
    src_file, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src_file.write_text("Zwei Hunde.\n\nDogs.\n", encoding="utf-8")
    assert run_cli("--model", str(model_dir), "-i", str(src_file), "-o", str(out), "-q", "--int8") == 0
    assert len(out.read_text(encoding="utf-8").split("\n")) == 4 and out.read_text().split("\n")[1] == ""


def test_the_heap_is_given_back_once_the_last_batch_is_done(model_dir, monkeypatch):
    """translate ends by returning the C heap's free memory (`cpu.memory.trim_heap`), once no decoder state is left: a server
    between requests does not hold its last batch's caches."""
    from aiayn import translator as translate_module
    from aiayn.decode.state import DecoderState
    from aiayn.decode.step import TransformerStep

    translator = Translator.load(model_dir, batch_size=2)
    live = lambda: sum(type(o) is DecoderState for o in gc.get_objects())  # noqa: E731
    during, at_trim = [], []
    step = TransformerStep.step
    monkeypatch.setattr(
        TransformerStep, "step", lambda self, tokens, cache: (during.append(live()), step(self, tokens, cache))[1]
    )
    monkeypatch.setattr(translate_module, "trim_heap", lambda: at_trim.append(live()))
    translator.translate(["A man rides a bike.", "Two dogs play.", "A woman is reading a book."])
    assert during and min(during) >= 1  # the search held its state (its caches) ...
    assert at_trim == [0]  # ... and the heap was given back once, after the last one was gone
