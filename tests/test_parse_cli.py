"""aiayn parse (line rules), aiayn evaluate --task parse, training with format ptb, the PCFG baseline."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.model import Transformer
from aiayn.parse.baselines import right_branching
from aiayn.parse.evalb import evalb
from aiayn.parse.linearize import linearize
from aiayn.parse.pcfg import PCFG, transform, untransform
from aiayn.parse.tokenizer import WORDS_FILE, ParseTokenizer, WordVocab
from aiayn.parse.trees import parse_tree, read_treebank
from aiayn.parser import Parser
from aiayn.recipe import load_recipe
from aiayn.weights import save_model
from conftest import DATA, REPO

ARCHIVE = DATA / "ptb-sample" / "treebank.zip"


@pytest.fixture(scope="module")
def trees():
    return read_treebank(ARCHIVE, "wsj_0001-0030")


@pytest.fixture(scope="module")
def parser_dir(tmp_path_factory, trees):
    """A parsing model with random weights, saved as training saves one."""
    out = tmp_path_factory.mktemp("parser")
    tokenizer = ParseTokenizer.train([" ".join(t.words()) for t in trees], [" ".join(linearize(t)) for t in trees], 300)
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "tiny",
        vocab_size=len(tokenizer),
        tgt_vocab_size=tokenizer.target_size,
        share_embeddings=False,
        d_model=32,
        d_ff=64,
        n_layers=1,
        max_len=64,
    )
    save_model(Transformer(config), out)
    tokenizer.save(out)
    return out


def test_tokenizer_keeps_tree_symbols_whole_and_reads_back(parser_dir, trees):
    tokenizer = ParseTokenizer.load(parser_dir)
    sequence = " ".join(linearize(trees[0]))
    ids = tokenizer.encode_target([sequence])[0]
    assert len(ids) == len(sequence.split()) + 1 and tokenizer.unk_id not in ids
    assert tokenizer.decode(ids) == sequence
    assert Parser.load(parser_dir).translator.tokenizer.symbols == tokenizer.symbols
    assert tokenizer.shape.open_run >= 2 and tokenizer.shape.depth >= 2  # the training trees' bounds, read back
    assert tokenizer.shape.first["NP"] and tokenizer.lexicon.tags(trees[0].words()[0])  # edge tags, the tag lexicon


def test_a_word_source_gives_word_k_position_k_and_unknown_words_their_class(tmp_path):
    sentences = ["The cat sat .", "The dog sat on 1,000 mats .", "A Dog-like thing ran"]
    words = WordVocab.train(sentences, 100)
    assert words.words[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert {"The", "sat", "."} <= set(words.words) and "cat" not in words.words  # seen once: its class
    assert {"UNK", "UNK-C", "UNK-C-H", "UNK-D"} <= set(words.words)
    ids = words.encode_batch(["The quickly Zebras 42 <s> sat"])[0]
    assert len(ids) == 7 and ids[-1] == 2  # one id a word, then </s>
    name = lambda i: words.words[i]  # noqa: E731
    assert [name(i) for i in ids[:-1]] == ["The", "UNK", "UNK-C", "UNK-D", "UNK", "sat"]  # UNK-ly, UNK-C-s unseen
    classes = sum(w.startswith("UNK") for w in words.words)
    assert WordVocab.train(sentences, 4 + classes + 2).words[-2:] == [".", "The"]  # the most frequent fill the size
    trees = ["(S " + " ".join(["NN"] * len(s.split())) + " )S" for s in sentences]  # a tag a word
    tokenizer = ParseTokenizer.train(sentences, trees, 100, units="words")
    tokenizer.save(tmp_path)
    back = ParseTokenizer.load(tmp_path)
    assert back.source.words == words.words and back.encode_source(["The cat"]) == words.encode_batch(["The cat"])
    (tmp_path / WORDS_FILE).write_text('{"words": 3}')
    with pytest.raises(ValueError, match="parse-words.json: not a source word list"):
        ParseTokenizer.load(tmp_path)
    with pytest.raises(ValueError, match="data.source_units: words is for parsing"):
        load_recipe(None, ["--data.source_units=words"])


def test_cli_one_tree_per_line_in_order_with_empty_lines(parser_dir, tmp_path, capsys):
    lines = ["Mr. Vinken is chairman .", "", "The cat sat on the mat .", "Yes", "", "It rose 5 % ."]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "parse",
                "--model",
                str(parser_dir),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "out.txt"),
                "--beam-size",
                "1",
            ]
        )
        == 0
    )
    out = (tmp_path / "out.txt").read_text().split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""
    for line, tree in zip(lines, out):
        if not line:
            assert tree == ""
        else:  # the words come back from the source: each line's own tree, whatever the model wrote
            parsed = parse_tree(tree)
            assert parsed.label == "TOP" and parsed.words() == line.split()
    assert "0 of 4 trees repaired" in capsys.readouterr().err  # the default search writes only trees
    assert (
        main(
            [
                "parse",
                "--model",
                str(parser_dir),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "paper.txt"),
                "--beam-size",
                "1",
                "--search",
                "paper",
            ]
        )
        == 0
    )  # §6.3's own search: what it writes is repaired
    paper = (tmp_path / "paper.txt").read_text().split("\n")
    assert [parse_tree(t).words() if t else [] for t in paper[:-1]] == [line.split() for line in lines]
    assert "of 4 trees repaired" in capsys.readouterr().err


def test_brackets_in_words_are_written_as_the_treebank_writes_them(parser_dir, tmp_path, capsys):
    lines = ["He said ( quietly ) .", "f(x) is [ 1 ] and { 2 }", "-LRB- stays"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "parse",
                "--model",
                str(parser_dir),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "out.txt"),
                "-b",
                "1",
            ]
        )
        == 0
    )
    trees = [parse_tree(t) for t in (tmp_path / "out.txt").read_text().splitlines()]
    assert [t.words() for t in trees] == [
        ["He", "said", "-LRB-", "quietly", "-RRB-", "."],
        ["f-LRB-x-RRB-", "is", "-LSB-", "1", "-RSB-", "and", "-LCB-", "2", "-RCB-"],
        ["-LRB-", "stays"],
    ]
    assert (
        main(
            [
                "parse",
                "--model",
                str(parser_dir),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "raw.txt"),
                "-b",
                "1",
                "--unescape",
            ]
        )
        == 0
    )  # asked for: the words as they were
    raw = (tmp_path / "raw.txt").read_text().splitlines()
    assert "(-LRB- () " not in raw[0] and " ()" in raw[0] and "f(x)" in raw[1] and "({ " not in raw[1]
    assert [t.split(" ", 1)[0] for t in raw] == ["(TOP"] * 3
    capsys.readouterr()


def test_a_sentence_that_is_not_text_is_named(parser_dir):
    parser = Parser.load(parser_dir, beam_size=1)
    with pytest.raises(TypeError, match=r"sentences\[1\] = None: must be a string"):
        parser.parse_lines(["A dog .", None])
    with pytest.raises(ValueError, match=r"sentences\[0\] is not valid Unicode: a lone surrogate at character 2"):
        parser.parse_lines(["A \ud800 dog ."])


def test_cli_bad_lines_are_named_and_leave_no_output(parser_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_bytes(b"A dog .\nTwo dogs .\n\xff\xfe bad\n")
    assert (
        main(
            [
                "parse",
                "--model",
                str(parser_dir),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "o.txt"),
                "-b",
                "1",
            ]
        )
        == 2
    )
    assert "line 3: not valid UTF-8" in capsys.readouterr().err and not (tmp_path / "o.txt").exists()
    (tmp_path / "long.txt").write_text("A dog .\n\n" + " ".join(["word"] * 100) + "\n")
    assert main(["parse", "--model", str(parser_dir), "-i", str(tmp_path / "long.txt"), "-b", "1"]) == 2
    assert "line 3: " in capsys.readouterr().err


def test_a_translation_model_is_refused(tmp_path):
    from aiayn.data.vocab import Vocab

    save_model(
        Transformer(ModelConfig.preset("tiny", vocab_size=300)),
        tmp_path,
        Vocab.train(["a b c d e f g h"] * 50 + ["some other words here"] * 50, 40).proto,
    )
    with pytest.raises(ValueError, match="not a parsing model"):
        Parser.load(tmp_path)


def test_evaluate_task_parse_json(tmp_path, capsys, trees):
    gold = [str(t) for t in trees[:20]]
    hyp = [str(right_branching(t.words(), t.tags())) for t in trees[:20]]
    hyp[5] = str(parse_tree(hyp[5].replace("(. .)", "(NN .)")))  # kept punctuation: EVALB rejects it
    (tmp_path / "gold.txt").write_text("\n".join(gold) + "\n")
    (tmp_path / "hyp.txt").write_text("\n".join(hyp) + "\n")
    assert (
        main(
            [
                "evaluate",
                "--task",
                "parse",
                "--hyp",
                str(tmp_path / "hyp.txt"),
                "--ref",
                str(tmp_path / "gold.txt"),
                "--json",
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    expected = evalb(gold, hyp)
    assert got["f1"] == round(expected.all.f1, 4) and got["len<=40"]["f1"] == round(expected.short.f1, 4)
    assert {"precision", "recall", "f1", "complete_match", "errors"} <= got.keys() and got["errors"] == 1
    (tmp_path / "short.txt").write_text("\n".join(hyp[:-1]) + "\n")
    assert (
        main(["evaluate", "--task", "parse", "--hyp", str(tmp_path / "short.txt"), "--ref", str(tmp_path / "gold.txt")])
        == 2
    )
    assert "has 19 lines but" in capsys.readouterr().err


TINY_SPLITS = ["--data.train=wsj_0001-0010", "--data.valid=wsj_0160", "--data.test=wsj_0199"]
TINY_PARSER = [
    *TINY_SPLITS,
    "--data.vocab_size=300",
    "--data.max_subwords=90",
    "--model.d_model=32",
    "--model.d_ff=64",
    "--model.n_layers=1",
    "--model.n_heads=2",
    "--model.max_len=96",
    "--train.max_steps=2",
    "--train.save_every=1",
    "--train.beam_size=1",
    "--train.max_minutes=0",
    "--train.eval_every=0",
]


@pytest.mark.parametrize("units", ["subwords", "words"])
def test_training_a_parser_from_the_recipe(tmp_path, capsys, units):
    """`aiayn train recipes/ptb-parse.yaml`, as docs/parsing.md gives it, with a tiny model: the command itself, whose
    checks of the recipe's splits once took the treebank's file ranges for text files and refused the recipe."""
    assert (
        main(
            [
                "train",
                str(REPO / "recipes" / "ptb-parse.yaml"),
                "--out",
                str(tmp_path),
                f"--data.archive={ARCHIVE}",
                f"--data.source_units={units}",
                *TINY_PARSER,
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "results.json").read_text())
    test_trees = read_treebank(ARCHIVE, "wsj_0199")
    assert results["steps"] == 2 and 0.0 <= results["test_f1"] <= 100.0
    assert len((tmp_path / "test.trees").read_text().splitlines()) == len(test_trees)
    parser = Parser.load(tmp_path / "model", beam_size=1)  # the tokenizer is saved beside the averaged model
    assert parser.translator.model.config.share_embeddings is False
    assert isinstance(parser.translator.tokenizer.source, WordVocab) == (units == "words")
    assert [t.words() for t in parser.parse([" ".join(t.words()) for t in test_trees[:2]])] == [
        t.words() for t in test_trees[:2]
    ]

    # `aiayn average RUN`: a parser's tokenizer is kept beside the run, not in its checkpoints, and goes with the mean
    assert not ParseTokenizer.is_saved_in(tmp_path / "checkpoints" / "step-2")
    assert main(["average", str(tmp_path), "--last", "2", "--out", str(tmp_path / "avg")]) == 0
    averaged = Parser.load(tmp_path / "avg", beam_size=1)
    assert averaged.parse(["Mr. Vinken is chairman ."])[0].words() == "Mr. Vinken is chairman .".split()
    steps = [str(tmp_path / "checkpoints" / f"step-{n}") for n in (1, 2)]  # or its checkpoints named one by one
    assert main(["average", *steps, "--out", str(tmp_path / "avg-steps")]) == 0
    assert (tmp_path / "avg-steps" / "parse-target.json").read_bytes() == (
        tmp_path / "avg" / "parse-target.json"
    ).read_bytes()
    shutil.rmtree(tmp_path / "model")  # a run killed before its end has no final model; without its tokenizer too:
    shutil.rmtree(tmp_path / "avg")
    for name in averaged.translator.tokenizer.files():
        (tmp_path / name).unlink()
    assert main(["average", str(tmp_path), "--last", "2", "--out", str(tmp_path / "avg")]) == 2
    assert "no tokenizer" in capsys.readouterr().err and not (tmp_path / "avg").exists()  # refused before writing


@pytest.mark.parametrize(
    "command",
    [
        ["translate"],
        ["evaluate", "--src", "{words}", "--ref", "{words}"],
        ["serve", "--port", "0"],
        ["paper", "--out", "{words}.lab"],
    ],
)
def test_the_translation_commands_refuse_a_parsing_model_by_name(parser_dir, tmp_path, capsys, command):
    """Its outputs are tree symbols: `aiayn parse` runs it, as parse refuses a translation model."""
    words = tmp_path / "words.txt"
    words.write_text("Mr. Vinken is chairman .\n")
    name, *rest = [part.format(words=words) for part in command]
    assert main([name, "--model", str(parser_dir), *rest]) == 2
    err = capsys.readouterr().err
    assert f"{parser_dir}: a parsing model, not a translation model" in err and "aiayn parse --model" in err
    assert len(err.strip().splitlines()) == 1


def test_a_tokenizer_saved_over_another_kind_is_the_one_read_back(parser_dir, tmp_path, trees):
    """`aiayn average --force` into a folder that held another model: the loader reads a parser's files before an
    spm.model, and a parser's whole-word source before its subwords, so the other kind's files must go."""
    from aiayn.data.vocab import Vocab
    from aiayn.model_folder import load_tokenizer, save_tokenizer

    subwords = ParseTokenizer.load(parser_dir)
    words = ParseTokenizer.train(
        [" ".join(t.words()) for t in trees], [" ".join(linearize(t)) for t in trees], 100, units="words"
    )
    save_tokenizer(words, tmp_path)
    save_tokenizer(subwords, tmp_path)
    assert not isinstance(load_tokenizer(tmp_path).source, WordVocab)
    vocab = Vocab.train(["a b c d e f g h"] * 50 + ["some other words here"] * 50, 40)
    save_tokenizer(vocab, tmp_path)
    assert isinstance(load_tokenizer(tmp_path), Vocab) and sorted(p.name for p in tmp_path.iterdir()) == ["spm.model"]


def test_average_refuses_parsers_with_other_symbols(parser_dir, tmp_path, capsys):
    """Their weights mean other tree symbols: the mean is refused by name (spm.model's check covers translation)."""
    a, b = shutil.copytree(parser_dir, tmp_path / "a"), shutil.copytree(parser_dir, tmp_path / "b")
    target = json.loads((b / "parse-target.json").read_text())
    target["symbols"][-2:] = target["symbols"][-1:-3:-1]  # two symbols swapped
    (b / "parse-target.json").write_text(json.dumps(target))
    assert main(["average", str(a), str(b), "--out", str(tmp_path / "mean")]) == 2
    assert f"{b}: another tokenizer than {a}" in capsys.readouterr().err and not (tmp_path / "mean").exists()
    assert main(["average", str(a), str(a), "--out", str(tmp_path / "mean")]) == 0
    assert ParseTokenizer.is_saved_in(tmp_path / "mean")


def test_a_parsing_runs_tokenizer_is_aiayns_own_in_its_run_folder(tmp_path):
    """A failed start's tokenizer is built anew with the fixed recipe (as spm.model is); a folder aiayn did not make
    that holds a parser's tokenizer is not taken for a run."""
    from aiayn.train.run_folder import RunFolderError, check, start_over

    mine = tmp_path / "notes.txt"
    mine.write_text("the user's")
    for name in ("parse-source.spm", "parse-target.json"):
        (tmp_path / name).write_text("{}")
    recipe = load_recipe(REPO / "recipes" / "ptb-parse.yaml", [])
    with pytest.raises(RunFolderError, match="holds parse-source.spm"):
        check(tmp_path, recipe, None)
    start_over(tmp_path, recipe.to_dict())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    "setting, message",
    [
        ("--data.archive=missing.zip", "data.archive: missing.zip: no such treebank archive or folder"),
        ("--data.archive={readme}", "not a zip archive"),
        ("--data.archive=", "data.archive is not set"),
        ("--data.train=wsj_x", "data.train: file range 'wsj_x': expected PREFIXNNNN"),
        ("--data.valid=wsj_0900-0910", "data.valid: {archive} has no .mrg files in the range wsj_0900-0910"),
        ("--data.test=wsj_0199-0180", "data.test: file range 'wsj_0199-0180': 0180 comes before 0199"),
    ],
)
def test_a_parsing_recipe_with_a_bad_treebank_is_refused_by_name(tmp_path, capsys, setting, message):
    """Before any work: one line naming the setting, and no run folder."""
    fill = {"readme": REPO / "README.md", "archive": ARCHIVE}
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                str(REPO / "recipes" / "ptb-parse.yaml"),
                "--out",
                str(out),
                f"--data.archive={ARCHIVE}",
                *TINY_PARSER,
                setting.format(**fill),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message.format(**fill) in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_pcfg_transform_round_trips_and_parses_its_own_training_trees(trees):
    for tree in trees:
        assert untransform(transform(tree)) == tree
        for vertical, horizontal in ((2, 1), (3, 2), (2, 0), (1, 99)):  # Klein and Manning's orders of Markovisation
            assert untransform(transform(tree, vertical, horizontal)) == tree
            assert untransform(transform(tree, vertical, horizontal, split_tags=True)) == tree  # and their tag splits
    annotated = transform(parse_tree("(TOP (S (NP (DT the) (JJ big) (JJ red) (NN dog)) (VP (VBD ran)) (. .)))"), 3, 2)
    assert str(annotated) == (
        "(TOP+S (NP^S (DT the) (@NP|JJ|JJ^S (JJ big) (@NP|JJ|NN^S (JJ red) (NN dog)))) "
        "(@S|VP|. (VP^S (VBD ran)) (. .)))"
    )
    split = transform(
        parse_tree(
            "(TOP (S (NP (NN Profit)) (VP (VBD was) (ADJP (CD 5) (NN %)) (SBAR (IN because) (S (NP (DT that)) "
            "(VP (VBZ has) (PP (IN of) (NP (NNS sales)))))) (CC but) (VP (VBD fell))) (. .)))"
        ),
        2,
        1,
        split_tags=True,
    )
    preterminals = [p.label for p in split.preterminals()]
    assert preterminals == [
        "NN^NP",  # TAG-PA: the parent phrase
        "VBD^VP^BE",  # SPLIT-AUX
        "CD^ADJP",
        "NN^ADJP^%",  # SPLIT-%
        "IN^SBAR^VP",  # SPLIT-IN: parent and grandparent
        "DT^NP^U",  # UNARY-DT
        "VBZ^VP^HAVE",
        "IN^PP^VP",
        "NNS^NP",
        "CC^VP^BUT",  # SPLIT-CC
        "VBD^VP",
        ".^S",
    ]
    first_order = transform(parse_tree("(TOP (S (VP (VBD sat) (PP (IN on) (NP (PRP it))))))"), 1, 1, split_tags=True)
    assert [p.label for p in first_order.preterminals()] == ["VBD^VP", "IN^PP^VP", "PRP^NP"]  # SPLIT-IN at v = 1 too
    small = [
        parse_tree("(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .)))"),
        parse_tree("(TOP (S (NP (NNP John)) (VP (VBD slept)) (. .)))"),
    ]
    grammar = PCFG.train(small)
    assert [grammar.parse(t.words()) for t in small] == small
    annotated = PCFG.train(small, vertical=2, horizontal=2)
    assert [annotated.parse(t.words()) for t in small] == small
    assert any("^" in s for s in annotated.symbols)
    with_tags = PCFG.train(small, vertical=2, horizontal=1, split_tags=True)
    assert [with_tags.parse(t.words()) for t in small] == small  # the splits undone on output
    assert "DT^NP" in with_tags.tag_count and "DT" not in with_tags.tag_count
    alone = [*small, parse_tree("(TOP (S (NP (DT that)) (VP (VBD sat)) (. .)))")]  # "that" only as DT^NP^U
    split = PCFG.train(alone, vertical=2, horizontal=1, split_tags=True)
    assert split._parse("that dog sat .".split(), lenient=False) is None  # its own tag admits no tree here
    assert str(split.parse("that dog sat .".split())) == "(TOP (S (NP (DT that) (NN dog)) (VP (VBD sat)) (. .)))"
    lenient = split.tag_scores("that", lenient=True)
    assert "DT^NP" in lenient and lenient["DT^NP^U"] == split.tag_scores("that")["DT^NP^U"]  # its own split kept
    assert not any(t.split("^")[0] in (".", ",", ":") for t in lenient)  # a word never takes a punctuation tag
    assert split.tag_scores(".", lenient=True) == split.tag_scores(".")  # nor a punctuation word a word's tag
    assert str(grammar.parse("the cat saw John .".split())) == (
        "(TOP (S (NP (DT the) (NN cat)) (VP (VBD saw) (NP (NNP John))) (. .)))"
    )


def test_pcfg_learns_more_than_right_branching(trees):
    grammar = PCFG.train(read_treebank(ARCHIVE, "wsj_0001-0060"))
    test = [t for t in read_treebank(ARCHIVE, "wsj_0180-0185") if len(t.words()) <= 20][:15]
    gold = [str(t) for t in test]
    pcfg = evalb(gold, [str(grammar.parse(t.words()) or "") for t in test]).all.f1
    floor = evalb(gold, [str(right_branching(t.words(), t.tags())) for t in test]).all.f1
    assert pcfg > floor + 15


def test_parse_refuses_to_write_over_its_input_and_a_zero_beam(tmp_path, capsys):
    """The line rules of `aiayn translate` hold for `aiayn parse` too: the input is never replaced."""
    from aiayn.cli import main

    words = tmp_path / "words.txt"
    words.write_text("Mr. Vinken is chairman .\n")
    before = words.read_bytes()
    assert main(["parse", "--model", str(tmp_path), "-i", str(words), "-o", str(words)]) == 2
    assert "the same file as -i" in capsys.readouterr().err and words.read_bytes() == before
    with pytest.raises(SystemExit):
        main(["parse", "--model", str(tmp_path), "--beam-size", "0"])
    assert "--beam-size" in capsys.readouterr().err
