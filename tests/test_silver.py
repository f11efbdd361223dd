"""Silver trees for §6.3's semi-supervised setting (aiayn.parse.silver) and a parser trained on gold + silver."""

from __future__ import annotations

import pytest

from aiayn.cli import main
from aiayn.parse.constrain import TreeShape
from aiayn.parse.data import pairs
from aiayn.parse.lexicon import TagLexicon
from aiayn.parse.pcfg import PCFG
from aiayn.parse.silver import SilverReport, make_silver, ptb_tokens, read_trees, write_trees
from aiayn.parse.tokenizer import ParseTokenizer
from aiayn.parse.trees import read_treebank
from conftest import DATA, REPO
from test_parse_cli import ARCHIVE, TINY_PARSER

TEXT = DATA / "multi30k" / "train.en.gz"


@pytest.fixture(scope="module")
def grammar():
    return PCFG.train(read_treebank(ARCHIVE, "wsj_0001-0030"), vertical=2, horizontal=1, split_tags=True)


def test_sentences_are_tokenised_as_the_treebank_is():
    assert ptb_tokens('A man (in red) isn\'t "happy".') == [
        "A", "man", "-LRB-", "in", "red", "-RRB-", "is", "n't", "``", "happy", "''", ".",
    ]  # fmt: skip


def test_silver_trees_are_the_same_for_a_seed(tmp_path, grammar):
    trees, report = make_silver(grammar, TEXT, n=12, seed=3, log=lambda _: None)
    again, _ = make_silver(grammar, TEXT, n=12, seed=3, log=lambda _: None)
    assert [str(t) for t in trees] == [str(t) for t in again] and len(trees) == report.parsed > 0
    assert report.chosen == 12 == report.parsed + report.empty + report.too_long + report.no_parse
    other, _ = make_silver(grammar, TEXT, n=12, seed=4, log=lambda _: None)
    assert [t.words() for t in other] != [t.words() for t in trees]
    write_trees(tmp_path / "a.trees.gz", trees)
    write_trees(tmp_path / "b.trees.gz", again)
    assert (tmp_path / "a.trees.gz").read_bytes() == (tmp_path / "b.trees.gz").read_bytes()
    assert [str(t) for t in read_trees(tmp_path / "a.trees.gz")] == [str(t) for t in trees]
    assert len(read_trees(tmp_path / "a.trees.gz", limit=2)) == 2
    assert all(t.label == "TOP" and "^" not in str(t) and "@" not in str(t) for t in trees)  # plain treebank trees
    _, short = make_silver(grammar, TEXT, n=12, seed=3, max_words=5, log=lambda _: None)
    assert short == SilverReport(12, short.parsed, 0, short.too_long, short.no_parse) and short.too_long > 0


def test_the_silver_command_writes_the_trees_it_says(tmp_path, capsys):
    out = tmp_path / "silver.trees.gz"
    command = ["silver", "--treebank", str(ARCHIVE), "--train", "wsj_0001-0010", "--text", str(TEXT)]
    assert main([*command, "--sentences", "4", "--seed", "2", "--out", str(out)]) == 0
    trees = read_trees(out)
    assert f"{out}: {len(trees)} trees of 4 sentences drawn" in capsys.readouterr().err and 0 < len(trees) <= 4
    assert main([*command, "--out", str(TEXT)]) == 2  # never over its input
    assert "two files" in capsys.readouterr().err


def test_a_parser_trains_on_gold_and_silver_trees(tmp_path, capsys):
    silver = tmp_path / "silver.trees"
    write_trees(silver, read_treebank(ARCHIVE, "wsj_0020")[:5])
    gold = len(read_treebank(ARCHIVE, "wsj_0001-0010"))
    command = ["train", str(REPO / "recipes" / "ptb-parse.yaml"), f"--data.archive={ARCHIVE}", *TINY_PARSER]
    extra = [f"--data.silver={silver}", "--data.gold_copies=2"]
    assert main([*command, "--out", str(tmp_path / "run"), *extra]) == 0
    out = capsys.readouterr().out
    assert f"{2 * gold + 5:,} training trees" in out and f"the search's tables from the {gold:,} gold trees" in out
    assert_tables_are_the_gold_trees_once(ParseTokenizer.load(tmp_path / "run"), silver)
    assert main([*command, "--out", str(tmp_path / "copies"), "--data.gold_copies=2"]) == 0  # copies, no silver
    assert f"{2 * gold:,} training trees" in capsys.readouterr().out
    assert_tables_are_the_gold_trees_once(ParseTokenizer.load(tmp_path / "copies"))
    assert main([*command, "--out", str(tmp_path / "three"), *extra, "--data.silver_trees=3"]) == 0
    assert f"{2 * gold + 3:,} training trees" in capsys.readouterr().out

    silver.write_text(silver.read_text() + "(TOP (S (NP (DT a)\n")  # line 6 is not a tree
    assert main([*command, "--out", str(tmp_path / "bad"), *extra]) == 2
    err = capsys.readouterr().err
    assert f"{silver}:6" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
    assert main([*command, "--out", str(tmp_path / "none"), f"--data.silver={tmp_path / 'no.trees'}"]) == 2
    assert "data.silver" in capsys.readouterr().err and not (tmp_path / "none").exists()
    write_trees(silver, read_treebank(ARCHIVE, "wsj_0020")[:5])
    assert main([*command, "--out", str(tmp_path / "few"), *extra, "--data.silver_trees=9"]) == 2
    assert "data.silver_trees 9: " in capsys.readouterr().err and not (tmp_path / "few").exists()
    assert (
        main(["train", str(REPO / "recipes" / "multi30k-en-de.yaml"), "--data.silver=x", "--out", str(tmp_path / "t")])
        == 2
    )
    assert "data.silver and data.gold_copies are for parsing" in capsys.readouterr().err


def assert_tables_are_the_gold_trees_once(tokenizer: ParseTokenizer, silver=None) -> None:
    """The constrained search's tables read the gold trees alone, each once (the run's training trees: the gold
    ones twice, and the silver ones if given)."""
    gold = read_treebank(ARCHIVE, "wsj_0001-0010")  # TINY_SPLITS' training files
    sentences, sequences = pairs(gold)
    bound = [q.split() for q in sequences]
    assert tokenizer.lexicon == TagLexicon.of(sentences, bound) and tokenizer.shape == TreeShape.of(bound)
    every, every_sequences = pairs(gold * 2 + (read_trees(silver) if silver else []))
    assert tokenizer.lexicon != TagLexicon.of(every, [q.split() for q in every_sequences])  # the test can fail
