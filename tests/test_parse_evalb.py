"""aiayn.parse.evalb against EVALB itself (evalb.c with COLLINS.prm), built with gcc in a fixture."""

from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest

from aiayn.parse.baselines import right_branching
from aiayn.parse.evalb import evalb, read_bracketing
from aiayn.parse.trees import Tree, read_treebank
from conftest import DATA

EVALB_DIR = DATA.parent / "tools" / "evalb"
ARCHIVE = DATA / "ptb-sample" / "treebank.zip"
LABELS = ["NP", "VP", "S", "PP", "ADJP", "SBAR", "ADVP", "PRT", "QP", "WHNP"]
TAGS = ["NN", "NNS", "VB", "VBD", "JJ", "IN", "DT", "RB", "NNP", "RP"]


@pytest.fixture(scope="module")
def evalb_binary(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build EVALB to compare against")
    binary = tmp_path_factory.mktemp("evalb") / "evalb"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(EVALB_DIR / "evalb.c")], check=True, capture_output=True)
    return binary


@pytest.fixture(scope="module")
def gold() -> list[Tree]:
    return read_treebank(ARCHIVE, "wsj_0160-0199")  # 518 trees (dev and test)


def run_evalb(binary, tmp_path, gold_lines: list[str], test_lines: list[str]) -> dict[str, dict[str, float]]:
    """EVALB's two summary blocks as {"all": {...}, "short": {...}}; -e after -p: count errors, never stop."""
    (tmp_path / "gold.txt").write_text("".join(g + "\n" for g in gold_lines))
    (tmp_path / "test.txt").write_text("".join(t + "\n" for t in test_lines))
    out = subprocess.run(
        [
            str(binary),
            "-p",
            str(EVALB_DIR / "COLLINS.prm"),
            "-e",
            "100000",
            str(tmp_path / "gold.txt"),
            str(tmp_path / "test.txt"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    blocks = out.split("=== Summary ===")[1].split("-- len<=40 --")
    keys = {
        "Number of Error sentence": "errors",
        "Number of Skip  sentence": "skipped",
        "Bracketing Recall": "recall",
        "Bracketing Precision": "precision",
        "Bracketing FMeasure": "f1",
        "Complete match": "complete_match",
        "Tagging accuracy": "tagging_accuracy",
    }
    result = {}
    for name, block in zip(("all", "short"), blocks):
        values = dict(re.findall(r"^(.+?)\s*=\s*(\S+)$", block, re.M))
        result[name] = {k: float(values[label]) for label, k in keys.items()}
    return result


def assert_agrees(binary, tmp_path, gold_lines, test_lines):
    ours, theirs = evalb(gold_lines, test_lines), run_evalb(binary, tmp_path, gold_lines, test_lines)
    for name, summary in (("all", ours.all), ("short", ours.short)):
        for key, value in theirs[name].items():
            assert abs(getattr(summary, key) - value) <= 0.01, (name, key, getattr(summary, key), value)
    return ours


def test_gold_against_gold_is_100_and_agrees(evalb_binary, tmp_path, gold):
    lines = [str(t) for t in gold]
    ours = assert_agrees(evalb_binary, tmp_path, lines, lines)
    assert ours.all.f1 == ours.all.precision == ours.all.recall == ours.all.complete_match == 100.0
    assert ours.all.errors == 0 and ours.all.sentences == len(gold) > 100


def test_right_branching_agrees_and_is_the_floor(evalb_binary, tmp_path, gold):
    test = gold[-245:]  # wsj_0180-0199
    ours = assert_agrees(
        evalb_binary, tmp_path, [str(t) for t in test], [str(right_branching(t.words(), t.tags())) for t in test]
    )
    assert 28.0 < ours.all.f1 < 32.0  # docs/parsing.md: about 30 F1


def _constituents(tree: Tree, path=()) -> list[tuple[int, ...]]:
    """Paths (child indices) of the constituents below the root, preterminals excluded."""
    out = []
    for i, child in enumerate(tree.children):
        if not child.is_preterminal:
            out.append(path + (i,))
            out.extend(_constituents(child, path + (i,)))
    return out


def _replace(tree: Tree, path: tuple[int, ...], new: list[Tree]) -> Tree:
    """tree with the node at path replaced by the nodes in new (none, one or several)."""
    i, children = path[0], list(tree.children)
    if len(path) == 1:
        children[i : i + 1] = new
    else:
        children[i] = _replace(children[i], path[1:], new)
    return Tree(tree.label, tuple(children))


def _node(tree: Tree, path: tuple[int, ...]) -> Tree:
    for i in path:
        tree = tree.children[i]
    return tree


def perturb(tree: Tree, rng: random.Random, kind: str) -> Tree:
    paths = _constituents(tree)
    if kind == "delete" and paths:
        path = rng.choice(paths)
        return _replace(tree, path, list(_node(tree, path).children))
    if kind == "relabel" and paths:
        path = rng.choice(paths)
        node = _node(tree, path)
        return _replace(tree, path, [Tree(rng.choice(LABELS), node.children)])
    if kind == "move" and paths:  # delete one bracket, add one around two neighbours elsewhere
        tree = perturb(tree, rng, "delete")
        wide = [p for p in [()] + _constituents(tree) if len(_node(tree, p).children) >= 3]
        if wide:
            path = rng.choice(wide)
            node = _node(tree, path)
            k = rng.randrange(len(node.children) - 1)
            kids = list(node.children)
            kids[k : k + 2] = [Tree(rng.choice(LABELS), tuple(kids[k : k + 2]))]
            return Tree(node.label, tuple(kids)) if not path else _replace(tree, path, [Tree(node.label, tuple(kids))])
        return tree
    if kind == "tag":  # change a few content words' tags (never to or from a deleted tag)
        leaves = [p for p in _leaf_paths(tree) if _node(tree, p).label not in {",", ".", ":", "``", "''"}]
        for path in rng.sample(leaves, min(3, len(leaves))):
            leaf = _node(tree, path)
            tree = _replace(tree, path, [Tree(rng.choice(TAGS), word=leaf.word)])
        return tree
    if kind == "advp_prt":
        return _swap(tree, {"ADVP": "PRT", "PRT": "ADVP"})
    if kind == "unary":  # a duplicated bracket: EVALB matches brackets one to one
        path = rng.choice(paths) if paths else None
        return tree if path is None else _replace(tree, path, [Tree(_node(tree, path).label, (_node(tree, path),))])
    return tree


def _leaf_paths(tree: Tree, path=()) -> list[tuple[int, ...]]:
    out = []
    for i, child in enumerate(tree.children):
        out.extend([path + (i,)] if child.is_preterminal else _leaf_paths(child, path + (i,)))
    return out


def _swap(tree: Tree, mapping: dict[str, str]) -> Tree:
    if tree.is_preterminal:
        return tree
    return Tree(mapping.get(tree.label, tree.label), tuple(_swap(c, mapping) for c in tree.children))


@pytest.mark.parametrize("kind", ["delete", "relabel", "move", "tag", "advp_prt", "unary", "mixed"])
def test_perturbed_trees_agree(evalb_binary, tmp_path, gold, kind):
    rng = random.Random(kind)
    test = []
    for tree in gold:
        for k in rng.sample(["delete", "relabel", "move", "tag", "unary"], 3) if kind == "mixed" else [kind]:
            tree = perturb(tree, rng, k)
        test.append(str(tree))
    ours = assert_agrees(evalb_binary, tmp_path, [str(t) for t in gold], test)
    if kind == "advp_prt":  # ADVP = PRT: the swap costs nothing
        assert ours.all.f1 == 100.0 and any("PRT" in t for t in test)
    elif kind == "tag":  # preterminals are not brackets: only the tagging accuracy drops
        assert ours.all.f1 == 100.0 and ours.all.tagging_accuracy < 95.0
    else:
        assert ours.all.f1 < 100.0 and ours.all.errors == 0


def test_rejected_and_skipped_sentences_are_counted_as_evalb_does(evalb_binary, tmp_path, gold):
    gold = gold[:120]
    test = [str(t) for t in gold]
    leaves = gold[3].preterminals()
    assert leaves[0].label not in ",.:``''" and leaves[1].label not in ",.:``''"
    test[3] = str(Tree("TOP", tuple(leaves[2:])))  # two words short: length mismatch
    test[7] = test[7].replace("(. .)", "(NN .)", 1)  # "." tagged NN is kept: one word more than the gold
    test[9] = ""  # no words: skipped
    test[11] = test[11].replace(gold[11].words()[0], "XYZ", 1)  # another word: words mismatch
    test[13] = test[13][:-1]  # unbalanced
    ours = assert_agrees(evalb_binary, tmp_path, [str(t) for t in gold], test)
    assert (ours.all.errors, ours.all.skipped) == (4 if "(. .)" in str(gold[7]) else 3, 1)
    assert [s.status for s in ours.sentences][3] == "error" and "length mismatch" in ours.sentences[3].reason


def test_read_bracketing_follows_evalb_rules():
    b = read_bracketing("(TOP (S (NP-SBJ (DT The) (NN cat)) (VP (VBZ sat) (PRT (RP down)) (, ,)) (. .)))")
    assert b.words == ["The", "cat", "sat", "down"] and b.length == 6
    assert b.spans == {(0, 4, "S"): 1, (0, 2, "NP"): 1, (2, 4, "VP"): 1, (3, 4, "ADVP"): 1}  # PRT = ADVP
    assert read_bracketing("(TOP (S (NP (-NONE- *)) (VP (VB go))))").spans == {(0, 1, "S"): 1, (0, 1, "VP"): 1}
    assert read_bracketing("(TOP (S (NN a) (NN b))").error.startswith("unbalanced")
