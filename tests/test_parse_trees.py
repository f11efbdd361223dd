"""Penn Treebank reading, cleaning, linearisation (round trips on every tree) and repair rules."""

from __future__ import annotations

import pytest

from aiayn.parse.linearize import Repairs, delinearize, linearize, repair
from aiayn.parse.trees import (
    Tree,
    TreeError,
    base_label,
    clean,
    collapse_unary_repeats,
    file_range,
    parse_tree,
    parse_trees,
    read_treebank,
)
from conftest import DATA

ARCHIVE = DATA / "ptb-sample" / "treebank.zip"


@pytest.fixture(scope="module")
def sample() -> dict[str, list[Tree]]:
    if not ARCHIVE.is_file():
        pytest.fail(f"the Penn Treebank sample is missing: {ARCHIVE}")
    return {
        name: read_treebank(ARCHIVE, files)
        for name, files in (("train", "wsj_0001-0159"), ("valid", "wsj_0160-0179"), ("test", "wsj_0180-0199"))
    }


def test_the_splits_have_the_documented_sizes(sample):
    assert {k: len(v) for k, v in sample.items()} == {"train": 3396, "valid": 273, "test": 245}


def test_clean_removes_traces_their_empty_constituents_and_function_tags():
    mrg = (
        "( (S (NP-SBJ-1 (-NONE- *-2)) (VP (VBD rose) (NP-TMP=2 (NN yesterday)) (SBAR (-NONE- 0) "
        "(S (-NONE- *T*-1)))) (. .)) )"
    )
    assert str(clean(parse_tree(mrg))) == "(TOP (S (VP (VBD rose) (NP (NN yesterday))) (. .)))"
    assert clean(parse_tree("( (S (-NONE- *)) )")) is None
    assert [base_label(x) for x in ("NP-SBJ-1", "PP-LOC-CLR", "NP=2", "-NONE-", "-LRB-", "S")] == [
        "NP",
        "PP",
        "NP",
        "-NONE-",
        "-LRB-",
        "S",
    ]


def test_the_real_files_are_cleaned(sample):
    labels = {t.label for trees in sample.values() for tree in trees for t in _nodes(tree)}
    assert "-NONE-" not in labels and not any("-" in x[1:] or "=" in x for x in labels if not x.startswith("-"))
    assert all(tree.label == "TOP" for trees in sample.values() for tree in trees)
    first = sample["train"][0]
    assert str(first).startswith("(TOP (S (NP (NP (NNP Pierre) (NNP Vinken)) (, ,) (ADJP (NP (CD 61) (NNS years))")


def _nodes(tree: Tree) -> list[Tree]:
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(node.children)
    return out


def test_linearize_is_vinyals_brackets_with_tags_for_words():
    tree = parse_tree("(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))")
    assert " ".join(linearize(tree)) == "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"


def test_every_tree_of_the_sample_round_trips_exactly(sample):
    for trees in sample.values():
        for tree in trees:
            assert delinearize(linearize(tree), tree.words()) == tree
            assert parse_tree(str(tree)) == tree  # and the one-line form reads back


WORDS = ["John", "has", "a", "dog", "."]


@pytest.mark.parametrize(
    "tokens, expected, fixes",
    [
        # well formed: nothing to repair
        (
            "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S",
            "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))",
            Repairs(),
        ),
        # brackets still open at the end are closed
        (
            "(S (NP NNP )NP (VP VBZ (NP DT NN . ",
            "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog) (. .)))))",
            Repairs(unclosed=3),
        ),
        # a closing bracket with nothing open is dropped; one with the wrong label closes the innermost
        (
            ")NP (S (NP NNP )VP (VP VBZ (NP DT NN )NP )VP . )S",
            "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))",
            Repairs(unopened=1, mismatched=1),
        ),
        # a constituent without words is removed
        (
            "(S (NP NNP )NP (ADVP )ADVP (VP VBZ (NP DT NN )NP )VP . )S",
            "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))",
            Repairs(empty=1),
        ),
        # too few tags: the remaining words join the root, punctuation keeping its tag
        (
            "(S (NP NNP )NP (VP VBZ )VP )S",
            "(TOP (S (NP (NNP John)) (VP (VBZ has))) (NN a) (NN dog) (. .))",
            Repairs(missing_words=3),
        ),
        # too many tags: the surplus is dropped (and a constituent left empty by it removed)
        (
            "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S (NP NN NN )NP",
            "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))",
            Repairs(extra_tags=2, empty=1),
        ),
        # special tokens and bare brackets are dropped; several top-level constituents share TOP
        (
            "<unk> (NP NNP )NP ( (VP VBZ DT NN . )VP",
            "(TOP (NP (NNP John)) (VP (VBZ has) (DT a) (NN dog) (. .)))",
            Repairs(stray=2),
        ),
        # a punctuation word takes the tag the treebank fixes for it, and a word is never tagged as punctuation
        # (EVALB deletes words by tag: either would reject the sentence for its length)
        (
            "(S (NP NNP )NP (VP , (NP DT NN )NP )VP NN )S",
            "(TOP (S (NP (NNP John)) (VP (NN has) (NP (DT a) (NN dog))) (. .)))",
            Repairs(punctuation=2),
        ),
        # nothing but an end: every word attached to the root
        ("", "(TOP (NN John) (NN has) (NN a) (NN dog) (. .))", Repairs(missing_words=5)),
    ],
)
def test_repair_rules(tokens, expected, fixes):
    tree, found = repair(tokens.split(), WORDS)
    assert str(tree) == expected
    assert found == fixes
    assert tree.words() == WORDS  # every word, in order, whatever the sequence


def test_the_fixed_punctuation_tags_agree_with_the_treebank(sample):
    """Every word of FIXED_TAGS has that tag in the sample, and no word with a letter or digit has a
    punctuation tag, but for one annotation slip ("Wa" tagged ",")."""
    from aiayn.parse.linearize import FIXED_TAGS, PUNCTUATION

    pairs = [(w, t) for trees in sample.values() for tree in trees for w, t in zip(tree.words(), tree.tags())]
    assert len(pairs) > 90_000
    assert all(FIXED_TAGS[w] == t for w, t in pairs if w in FIXED_TAGS)
    slips = [(w, t) for w, t in pairs if w not in FIXED_TAGS and t in PUNCTUATION and any(c.isalnum() for c in w)]
    assert slips == [("Wa", ",")]


def test_delinearize_refuses_what_needs_repair_and_repair_survives_deep_nesting():
    with pytest.raises(ValueError, match="2 unclosed"):
        delinearize("(S (NP NNP NNP".split(), ["a", "b"])
    tree, found = repair(["(S"] * 3000 + ["NN"], ["a", "b"])
    assert found == Repairs(unclosed=3000, missing_words=1) and len(linearize(tree)) == 3000 * 2 + 2
    assert str(tree).count("(S") == 3000


def test_reader_errors_say_where():
    with pytest.raises(TreeError, match="x.mrg: tree 2: 1 bracket"):
        parse_trees("(S (NN a))\n(S (NN b)", "x.mrg")
    with pytest.raises(TreeError, match="x.mrg: tree 2: expected '\\(', got '\\)'"):
        parse_trees("(S (NN a)))", "x.mrg")
    assert file_range("wsj_0008-0010") == ["wsj_0008", "wsj_0009", "wsj_0010"]
    with pytest.raises(ValueError, match="comes before"):
        file_range("wsj_0010-0008")


@pytest.mark.parametrize(
    "tree, expected",
    [
        ("(TOP (NP (NP (DT a) (NN b))))", "(TOP (NP (DT a) (NN b)))"),
        (
            "(TOP (S (S (S (VP (VB go)))) (. .)))",
            "(TOP (S (S (VP (VB go))) (. .)))",
        ),  # the inner chain; S over two kept
        ("(TOP (S (NP (NP (NP (DT a) (NN b)))) (VP (VB go))))", "(TOP (S (NP (DT a) (NN b)) (VP (VB go))))"),
        ("(TOP (NP (NP (DT a)) (PP (IN of) (NP (NN b)))))", None),  # NP over NP and PP: two children
        ("(TOP (NP (NN x)))", None),  # over a tag, not a constituent
        ("(TOP (S (VP (VP (VB go)))) (TOP (NN x)))", "(TOP (S (VP (VB go))) (TOP (NN x)))"),  # TOP is never merged
    ],
)
def test_collapse_unary_repeats(tree, expected):
    out = collapse_unary_repeats(parse_tree(tree))
    assert str(out) == (expected or tree)
    assert collapse_unary_repeats(out) == out


def test_collapsing_the_test_files_removes_their_seven_repeats(sample):
    def brackets(tree: Tree) -> int:
        return sum(not t.is_preterminal for t in _nodes(tree))

    for trees, repeats in ((sample["valid"], 5), (sample["test"], 7)):
        collapsed = [collapse_unary_repeats(t) for t in trees]
        assert [(t.words(), t.tags()) for t in collapsed] == [(t.words(), t.tags()) for t in trees]
        assert sum(brackets(t) for t in trees) - sum(brackets(t) for t in collapsed) == repeats
