"""Bad input to every command: one or two lines naming the file, flag or line; no traceback; nothing changed.

Each case runs `aiayn.cli.main(argv)` (a subprocess for the closed pipe) and checks the exit status, the
message, and that every file under the test's folder is byte for byte what it was.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.cli import main
from aiayn.config import DecodeConfig, ModelConfig
from aiayn.data.vocab import Vocab
from aiayn.model import Transformer
from aiayn.weights import save_model

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def multi30k_lines(lang: str, n: int) -> list[str]:
    with gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab.train(multi30k_lines("en", 150) + multi30k_lines("de", 150), 120)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, vocab) -> Path:
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=len(vocab), max_len=64)
    return save_model(Transformer(config), tmp_path_factory.mktemp("model") / "model", vocab.proto)


@pytest.fixture
def work(tmp_path, model_dir) -> Path:
    """A folder with a copy of the model and a two-line input file."""
    shutil.copytree(model_dir, tmp_path / "model")
    (tmp_path / "in.txt").write_text("A man.\nTwo dogs.\n")
    return tmp_path


def snapshot(folder: Path, ignore: str | None = None) -> dict[str, bytes]:
    """Every file under folder and its bytes, but for those under folder/ignore."""
    files = (p for p in sorted(folder.rglob("*")) if p.is_file())
    kept = (p for p in files if not (ignore and p.is_relative_to(folder / ignore)))
    return {str(p.relative_to(folder)): p.read_bytes() for p in kept}


def fails(argv: list[str], capsys, folder: Path, *expected: str, ignore: str | None = None) -> str:
    """Run the command: exit status 2, at most two lines on stderr holding each expected text, folder unchanged
    (but for its subfolder ignore: a run folder the command made)."""
    before = snapshot(folder, ignore)
    assert before
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert "Traceback" not in err and 1 <= len(err.splitlines()) <= 2, err
    for text in expected:
        assert text in err, err
    assert snapshot(folder, ignore) == before
    return err


# -- corrupt model files -------------------------------------------------------------------------------------

LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"4d" * 32 + b"\nsize 994736\n"


def torch_pickle(path: Path) -> None:
    torch.save({"encoder.embed.weight": torch.zeros(2, 2)}, path)


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("model.safetensors", os.urandom(50_000), "not a safetensors file"),
        ("model.safetensors", LFS_POINTER, "a Git LFS pointer"),
        ("model.safetensors", torch_pickle, "a PyTorch pickle"),
        ("model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{}", "not a safetensors file"),
        ("spm.model", os.urandom(5_000), "not a SentencePiece model"),
        ("config.json", b'{"format": "aiayn"}', 'no "model" entry'),
        ("config.json", b'{"format": "aiayn", "model": {"d_model": "wide"}}', "model: d_model = 'wide': expected int"),
        ("config.json", b'{"format": "aiayn", "model": {"d_model": -64}}', "model: d_model = -64: must be at least 1"),
        ("config.json", b'{"format": "aiayn", "model": {"p_drop": 2}}', "p_drop = 2: must be at least 0 and at most 1"),
        ("config.json", b'{"format": "aiayn", "model": null}', '"model" must be a JSON object'),
        ("config.json", b"null", "expected a JSON object, not null"),
        ("config.json", b"[1, 2]", "expected a JSON object, not [1, 2]"),
        ("config.json", b'{"format": "aiayn", "model": ', "not valid JSON"),
        ("config.json", b"\xff\xfe{}", "not valid UTF-8"),
    ],
)
def test_corrupt_model_files(work, capsys, name, content, expected):
    path = work / "model" / name
    content(path) if callable(content) else path.write_bytes(content)
    fails(["translate", "--model", str(work / "model"), "-i", str(work / "in.txt")], capsys, work, str(path), expected)


def test_truncated_weights(work, capsys):
    path = work / "model" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    argv = ["translate", "--model", str(work / "model"), "-i", str(work / "in.txt")]
    fails(argv, capsys, work, str(path), "truncated")


# -- translate -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--beam-size", "0"], "argument --beam-size/-b: must be at least 1, got 0"),
        (["--beam-size", "500"], "--beam-size 500: more than the 120 tokens of the model's target vocabulary"),
        (["--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
        (["--max-tokens", "0"], "argument --max-tokens: must be at least 1"),
        (["--max-len", "0"], "argument --max-len: must be at least 1, got 0"),
        (["--n-best", "0"], "argument --n-best: must be at least 1, got 0"),
        (["--top-p", "0"], "argument --top-p: must be a finite number above 0"),
        (["--temperature", "nan"], "argument --temperature: must be a finite number"),
        (["--device", "gpu7"], "--device 'gpu7': not a device name"),
        (["--top-k", "5"], "--top-k only shape sampling: add --sample"),  # beam search would ignore it
        (["--top-p", "0.9", "--temperature", "2"], "--temperature, --top-p only shape sampling: add --sample"),
        (["--sample", "--n-best", "3"], "n_best 3 with sampling: sampling draws one translation a sentence"),
        (["--seed", str(2**64)], "argument --seed: must be at least 0 and at most 9223372036854775807"),
    ],
)
def test_translate_flags(work, capsys, flags, expected):
    out = work / "out.txt"
    fails(
        ["translate", "--model", str(work / "model"), "-i", str(work / "in.txt"), "-o", str(out), *flags],
        capsys,
        work,
        expected,
    )
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_translate_on_cuda_without_cuda(work, capsys):
    fails(
        ["translate", "--model", str(work / "model"), "-i", str(work / "in.txt"), "--device", "cuda"],
        capsys,
        work,
        "--device cuda: CUDA is not available",
    )


@pytest.mark.parametrize(
    "where, expected",
    [
        (["-i", "{dir}"], "argument --input/-i: {dir} is a directory, not a text file"),
        (["-i", "{dir}/none.txt"], "argument --input/-i: {dir}/none.txt: no such file"),
        (["-i", "{dir}/in.txt", "-o", "{dir}"], "argument --output/-o: {dir} is a directory"),
        (["-i", "{dir}/in.txt", "-o", "{dir}/no/out.txt"], "its folder {dir}/no does not exist"),
        (["-i", "{dir}/in.txt", "-o", "{dir}/in.txt/out.txt"], "its folder {dir}/in.txt is a file, not a folder"),
    ],
)
def test_translate_files_are_checked_before_the_model_loads(work, capsys, where, expected):
    # --model names no model: the file checks come first, before any loading or translating
    argv = ["translate", "--model", str(work / "no-model"), *(w.format(dir=work) for w in where)]
    fails(argv, capsys, work, expected.format(dir=work))


def test_translate_reads_a_pipe_given_as_input(work, capsys):
    """-i /dev/fd/N (bash's `-i <(cmd)`): not a regular file, still read, and read once."""
    read, write = os.pipe()
    os.write(write, b"A man.\n\nTwo dogs.\n")
    os.close(write)
    try:
        assert main(["translate", "--model", str(work / "model"), "-i", f"/dev/fd/{read}", "--max-len", "2"]) == 0
    finally:
        os.close(read)
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and out.splitlines()[1] == ""


def test_translate_into_a_closed_pipe_ends_quietly(work):
    """`aiayn translate ... | head -1`: the reader is gone; exit 141 (128 + SIGPIPE), nothing on stderr."""
    (work / "in.txt").write_text("A man.\n" * 50)
    code = "import sys; from aiayn.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [
        sys.executable,
        "-c",
        code,
        "translate",
        "--model",
        str(work / "model"),
        "-i",
        str(work / "in.txt"),
        "--max-len",
        "2",
        "-q",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the first write: Python takes a second just to import torch
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


# -- train -------------------------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path) -> Path:
    """tmp_path/c.en and c.de: 40 Multi30k pairs; and a recipe that reads them."""
    for lang in ("en", "de"):
        (tmp_path / f"c.{lang}").write_text("\n".join(multi30k_lines(lang, 40)) + "\n")
    (tmp_path / "r.yaml").write_text(
        f"data:\n  train: {tmp_path}/c\n  valid: {tmp_path}/c\n  vocab_size: 150\n"
        "model:\n  preset: tiny\ntrain:\n  max_steps: 1\n  threads: 1\n"
    )
    return tmp_path


def train_fails(corpus: Path, capsys, args: list[str], *expected: str) -> None:
    fails(["train", str(corpus / "r.yaml"), "--out", str(corpus / "run"), *args], capsys, corpus, *expected)


def test_recipe_with_a_yaml_syntax_error(corpus, capsys):
    (corpus / "r.yaml").write_text("data:\n  train: [c\nmodel:\n  preset: tiny\n")
    train_fails(corpus, capsys, [], f"{corpus / 'r.yaml'}:3:", "not valid YAML", "from line 2")
    assert not (corpus / "run").exists()


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["--train.seed=["], "override '--train.seed=[': not a valid YAML value"),
        (["--train.batch_tokens=0"], "train.batch_tokens = 0: must be at least 1"),
        (["--train.beta2=1"], "train.beta2 = 1.0: must be at least 0 and below 1"),
        (["--data.train=[a, b]"], "override '--data.train=[a, b]': expected str"),
        (["--model.d_model=30"], "model: d_model 30 is not divisible by n_heads 4"),
        (["--model.p_drop=-0.1"], "model: p_drop = -0.1: must be at least 0"),
        (["--data.max_subwords=2000"], "data.max_subwords 2000 is more than model.max_len 1024"),
    ],
)
def test_recipe_values_out_of_range(corpus, capsys, overrides, expected):
    train_fails(corpus, capsys, overrides, expected)
    assert not (corpus / "run").exists()


def test_empty_training_files(corpus, capsys):
    for lang in ("en", "de"):
        (corpus / f"c.{lang}").write_text("")
    train_fails(corpus, capsys, [], f"{corpus / 'c.en'}: empty file (data.train)")
    assert not (corpus / "run").exists()


def test_missing_test_split_is_found_before_training(corpus, capsys):
    train_fails(corpus, capsys, [f"--data.test={corpus}/none"], f"data.test: no file {corpus}/none.en")


def test_every_pair_filtered_out(corpus, capsys):
    fails(
        ["train", str(corpus / "r.yaml"), "--out", str(corpus / "run"), "--data.max_subwords=2"],
        capsys,
        corpus,
        "no sentence pair is left after filtering (data.max_subwords is 2)",
        "dropped 40",
        ignore="run",
    )


def test_vocabulary_larger_than_the_text_allows(corpus, capsys):
    fails(
        ["train", str(corpus / "r.yaml"), "--out", str(corpus / "run"), "--data.vocab_size=20000"],
        capsys,
        corpus,
        "data.vocab_size 20,000 is more than the training text allows",
        ignore="run",
    )


@pytest.mark.parametrize("out", ["c.en", "c.en/run"])
def test_out_is_a_file_or_under_one(corpus, capsys, out):
    where = "it" if out == "c.en" else corpus / "c.en"
    fails(
        ["train", str(corpus / "r.yaml"), "--out", str(corpus / out)],
        capsys,
        corpus,
        f"--out {corpus / out}: {where} is a file, not a folder",
    )


def test_train_recipe_help_prints_the_help(corpus, capsys):
    assert main(["train", str(corpus / "r.yaml"), "--help"]) == 0
    assert "--out OUT" in capsys.readouterr().out
    assert not (corpus / "run").exists() and not Path("runs/r").exists()


# -- evaluate, convert ---------------------------------------------------------------------------------------------


def test_recipe_giving_a_key_twice(corpus, capsys):
    (corpus / "r.yaml").write_text(
        (corpus / "r.yaml").read_text() + "  max_steps: 5\n"
    )  # YAML keeps the last, silently
    train_fails(corpus, capsys, [], f"{corpus / 'r.yaml'}:", "'max_steps' is given twice")
    assert not (corpus / "run").exists()


def test_a_recipe_that_is_a_folder_or_empty(corpus, capsys):
    from aiayn.recipe import read_yaml

    fails(
        ["train", str(corpus), "--out", str(corpus / "run")], capsys, corpus, f"{corpus}: a folder, not a recipe file"
    )
    (corpus / "empty.yaml").write_text("# nothing yet\n")
    fails(
        ["train", str(corpus / "empty.yaml"), "--out", str(corpus / "run")],
        capsys,
        corpus,
        "data.train is not set: give it in the recipe (recipes/*.yaml) or as --data.train=PREFIX",
    )
    (corpus / "merged.yaml").write_text(
        (corpus / "r.yaml")
        .read_text()
        .replace("train:\n", "base: &b\n  max_steps: 3\ntrain:\n  <<: *b\n", 1)
        .replace("data:", "data:", 1)
    )
    assert read_yaml(corpus / "merged.yaml")["train"]["max_steps"] == 1  # YAML's merge key, overridden: not a repeat


def test_evaluate_flags_that_would_be_ignored(work, capsys):
    text = str(work / "in.txt")
    fails(
        ["evaluate", "--hyp", text, "--ref", text, "--model", str(work / "model"), "--src", text],
        capsys,
        work,
        "give --hyp (translations to score) or --model with --src",
    )
    fails(
        ["evaluate", "--hyp", text, "--ref", text, "--save-hyp", str(work / "h.txt")],
        capsys,
        work,
        "--save-hyp saves the translations of --model",
    )


def test_evaluate_empty_files(tmp_path, capsys):
    (tmp_path / "hyp").write_text("")
    (tmp_path / "ref").write_text("")
    fails(
        ["evaluate", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref")],
        capsys,
        tmp_path,
        f"{tmp_path / 'ref'}: empty file",
    )


def test_evaluate_save_hyp_into_a_directory_is_refused_before_translating(work, capsys):
    src = str(work / "in.txt")
    fails(
        ["evaluate", "--model", str(work / "no-model"), "--src", src, "--ref", src, "--save-hyp", str(work)],
        capsys,
        work,
        f"argument --save-hyp: {work} is a directory",
    )


@pytest.mark.parametrize("out", ["in.txt", "in.txt/hf"])
def test_convert_into_a_file(work, capsys, out):
    err = fails(
        ["convert", str(work / "model"), str(work / out), "--to", "marian"], capsys, work, "is a file, not a folder"
    )
    assert err.endswith(f"output {work / out}: {'it' if out == 'in.txt' else work / 'in.txt'} is a file, not a folder")


# -- the Python API and the top-level handler ----------------------------------------------------------------------


def test_translator_is_importable_from_the_package():
    from aiayn import ModelConfig as config
    from aiayn import Transformer as model
    from aiayn import Translator
    from aiayn.translator import Translator as translator

    assert Translator is translator and config is ModelConfig and model is Transformer


def test_the_api_refuses_what_the_cli_refuses(model_dir):
    from aiayn import Translator

    with pytest.raises(ValueError, match="beam_size = 0: must be at least 1"):
        DecodeConfig(beam_size=0)
    with pytest.raises(ValueError, match="n_best = 0"):
        DecodeConfig(n_best=0)
    translator = Translator.load(model_dir)
    with pytest.raises(ValueError, match="beam_size 121 is more than the 120 tokens"):
        translator.translate(["A man."], beam_size=121)
    assert len(translator.translate(["A man."], beam_size=120, max_len=2)) == 1  # the largest beam works
    with pytest.raises(ValueError, match="batch_size = 0"):
        Translator(translator.model, translator.tokenizer, batch_size=0)


@pytest.mark.parametrize(
    "error, expected",
    [
        (PermissionError(13, "Permission denied", "/x/y"), "aiayn info: error: /x/y: Permission denied"),
        (IsADirectoryError(21, "Is a directory", "/x"), "aiayn info: error: /x: Is a directory"),
    ],
)
def test_expected_errors_are_one_line(monkeypatch, capsys, error, expected):
    import aiayn.cli.info

    def run(args):
        raise error

    monkeypatch.setattr(aiayn.cli.info, "run", run)
    assert main(["info"]) == 2
    assert capsys.readouterr().err.strip() == expected


def test_a_bug_keeps_its_traceback(monkeypatch):
    import aiayn.cli.info

    def run(args):
        raise TypeError("a bug")

    monkeypatch.setattr(aiayn.cli.info, "run", run)
    with pytest.raises(TypeError, match="a bug"):
        main(["info"])


def test_a_byte_order_mark_is_not_text(tmp_path, capsys):
    """Editors on Windows start a UTF-8 file with U+FEFF; scored as text, identical files gave chrF 97.69."""
    (tmp_path / "hyp").write_bytes("\ufeffEin Mann fährt Rad.\nZwei Hunde.\n".encode())
    (tmp_path / "ref").write_text("Ein Mann fährt Rad.\nZwei Hunde.\n")
    assert main(["evaluate", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["chrF"]["score"] == 100.0 and scores["sacreBLEU"]["score"] == 100.0


def test_sizes_no_machine_could_hold_are_refused_by_name(work, capsys):
    """A mistyped size once asked the allocator for 256 GB (max_len) or 17 GB (d_model) and ended in a traceback."""
    for field, value, expected in [
        ("max_len", 1_000_000_000, "max_len = 1000000000: must be at least 1 and at most 1048576"),
        ("vocab_size", 2_000_000_000, "vocab_size = 2000000000: must be at least 1 and at most"),
    ]:
        model = work / f"big-{field}"
        shutil.copytree(work / "model", model)
        meta = json.loads((model / "config.json").read_text())
        meta["model"][field] = value
        (model / "config.json").write_text(json.dumps(meta))
        fails(
            ["translate", "--model", str(model), "-i", str(work / "in.txt")], capsys, work, expected, ignore=model.name
        )
    model = work / "wide"
    shutil.copytree(work / "model", model)
    meta = json.loads((model / "config.json").read_text())
    meta["model"].update(d_model=65536, d_k=None, d_v=None)
    (model / "config.json").write_text(json.dumps(meta))
    fails(
        ["translate", "--model", str(model), "-i", str(work / "in.txt")],
        capsys,
        work,
        str(model / "model.safetensors"),
        ignore=model.name,
    )  # the weights' shapes, named, before any matrix of that width is made


def numeric_options() -> list[tuple[str, str, object]]:
    """(command, flag, argparse type) of every option of every command that takes a number."""
    from aiayn.cli import COMMANDS, build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == set(COMMANDS)
    found = []
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings and (action.type in (int, float) or hasattr(action.type, "bounds")):
                found.append((name, action.option_strings[0], action.type))
    return found


def test_every_numeric_option_declares_its_range():
    bare = [(command, flag) for command, flag, kind in numeric_options() if kind in (int, float)]
    assert not bare, f"options with a bare int or float type (no range, NaN and infinity let through): {bare}"
    assert len(numeric_options()) >= 30


@pytest.mark.parametrize("command, flag, kind", numeric_options(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_option_refuses_nan_infinity_and_a_value_below_its_range(command, flag, kind, capsys):
    low, _ = kind.bounds
    for value in ("nan", "inf", "-inf") + (() if low is None else (str(low - 1),)):
        with pytest.raises(SystemExit) as exit_:
            main([command, f"{flag}={value}"])  # refused as it is read, before any other check or any work
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and f"argument {flag}" in err and "Traceback" not in err, (value, err)
        assert len(err.splitlines()) == 2, err


def test_translator_load_checks_its_search_options_before_reading_anything(tmp_path):
    from aiayn import Translator

    missing = tmp_path / "no-model"  # the options are checked first: no folder is read, no backend measured
    with pytest.raises(ValueError, match="beam_size = -1: must be at least 1"):
        Translator.load(missing, beam_size=-1)
    with pytest.raises(ValueError, match="alpha"):
        Translator.load(missing, alpha=float("nan"))
    with pytest.raises(TypeError, match="unknown option 'beam'"):
        Translator.load(missing, beam=4)


def test_a_sentence_that_is_not_text_is_named(model_dir):
    from aiayn import Translator

    translator = Translator.load(model_dir)
    with pytest.raises(ValueError, match=r"sentences\[1\] is not valid Unicode: a lone surrogate at character 2"):
        translator.translate(["A man.", "A \ud800 dog."])
    with pytest.raises(TypeError, match=r"sentences\[0\] = None: must be a string"):
        translator.translate([None])
