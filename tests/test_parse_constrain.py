"""Tree-constrained search: whatever the model prefers, every finished output is a tree over the words."""

from __future__ import annotations

import pytest
import torch

from aiayn.config import DecodeConfig
from aiayn.decode.beam import beam_search
from aiayn.decode.greedy import greedy_hypotheses
from aiayn.parse.constrain import FREE, NO_PUNCTUATION, TreeConstrainedStep, TreeShape, word_rules
from aiayn.parse.lexicon import TagLexicon
from aiayn.parse.linearize import Repairs, repair

SYMBOLS = ["<pad>", "<s>", "</s>", "<unk>", "(S", ")S", "(NP", ")NP", "(VP", ")VP", "NN", "VB", "."]


class Rows:
    def __init__(self, n: int):
        self.n = n

    def index_select(self, index, sentences=None):
        return Rows(len(index))


class RandomModel:
    """A StepModel with random log-probabilities: it would write any sequence, trees or not."""

    bos_id, eos_id, pad_id, banned, max_len = 1, 2, 0, (0, 1), None

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def start(self, src):
        return Rows(src.size(0))

    def step(self, tokens, cache):
        return torch.randn(tokens.size(0), len(SYMBOLS), generator=self.generator).log_softmax(-1), cache


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_every_finished_hypothesis_is_one_well_formed_tree_over_the_words(search):
    words = torch.tensor([3, 1, 6])
    finished = 0
    for seed in range(12):
        src = torch.full((3, 4), 5)
        config = DecodeConfig(beam_size=4 if search == "beam" else 1, extra_len=60)
        step = TreeConstrainedStep(RandomModel(seed), SYMBOLS, words, config=config)
        hyps = beam_search(step, src, config) if search == "beam" else greedy_hypotheses(step, src, config)
        for n, h in zip(words.tolist(), hyps):
            sequence = [SYMBOLS[i] for i in h[0].tokens]
            assert sequence[-1] == "</s>" and len(sequence) <= 4 + 60  # the budget: every one ends in time
            finished += 1
            tree, fixes = repair(sequence[:-1], ["w"] * n, retag=False)  # the structure; tags are random
            assert fixes == Repairs() and len(tree.children) == 1 and not tree.children[0].is_preterminal
    assert finished == 36


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_the_length_budget_closes_the_tree_in_time(search):
    """A limit that leaves room for one bracket more than the flattest tree: every output is a tree
    that fits it, however much the model would rather open brackets; without the budget it is cut."""

    class Opener(RandomModel):  # prefers opening brackets above everything
        def step(self, tokens, cache):
            scores = torch.randn(tokens.size(0), len(SYMBOLS), generator=self.generator)
            scores[:, [SYMBOLS.index(s) for s in ("(S", "(NP", "(VP")]] += 10
            return scores.log_softmax(-1), cache

    words, src = torch.tensor([3, 2]), torch.full((2, 4), 5)
    config = DecodeConfig(beam_size=4 if search == "beam" else 1, extra_len=4)  # 8 symbols: (S t t t )S </s> is 6
    run = beam_search if search == "beam" else greedy_hypotheses
    for budget in (config, None):
        hyps = run(TreeConstrainedStep(Opener(0), SYMBOLS, words, config=budget), src, config)
        ended = [SYMBOLS[h[0].tokens[-1]] == "</s>" for h in hyps]
        if budget is None:
            assert not any(ended)  # brackets opened until the limit cut them
            continue
        for n, h in zip(words.tolist(), hyps):
            sequence = [SYMBOLS[i] for i in h[0].tokens]
            assert sequence[-1] == "</s>" and len(sequence) <= 8, sequence
            assert repair(sequence[:-1], ["w"] * n, retag=False)[1] == Repairs()
            assert sum(s.startswith("(") for s in sequence) == 2  # the root and the one bracket that fits


def test_a_row_the_search_extends_past_every_rule_stays_in_range():
    """A beam with fewer legal candidates than slots extends -inf rows with any token; the state
    of such a row stays in range (a 40-minute model's test parse once died at depth 129)."""
    step = TreeConstrainedStep(RandomModel(0), SYMBOLS, torch.tensor([2]))
    state = step.start(torch.full((1, 3), 5))
    for _ in range(200):
        _, state = step.step(torch.tensor([[SYMBOLS.index("(S")]]), state)
    for _ in range(300):
        log_probs, state = step.step(torch.tensor([[SYMBOLS.index(")S")]]), state)
    assert 0 <= int(state.depth) < 128 and log_probs.shape == (1, len(SYMBOLS))


def test_the_mask_of_a_partial_tree():
    step = TreeConstrainedStep(RandomModel(0), SYMBOLS, torch.tensor([2]))
    state = step.start(torch.full((1, 3), 5))
    allowed = lambda: [s for s, ok in zip(SYMBOLS, step.allowed(state)[0].tolist()) if ok]  # noqa: E731
    assert allowed() == ["(S", "(NP", "(VP"]  # a tree starts with its root bracket
    for token, expected in [
        ("(S", ["(S", "(NP", "(VP", "NN", "VB", "."]),  # no close right after an open
        ("(NP", ["(S", "(NP", "(VP", "NN", "VB", "."]),
        ("NN", ["(S", ")NP", "(NP", "(VP", "NN", "VB", "."]),  # only the innermost closes
        (")NP", ["(S", "(NP", "(VP", "NN", "VB", "."]),  # the root stays open: a word is left
        ("VB", [")S"]),  # every word has its tag: close
        (")S", ["</s>"]),
    ]:
        _, state = step.step(torch.tensor([[SYMBOLS.index(token)]]), state)
        assert sorted(allowed()) == sorted(expected), token


def allowed_tags(rules, b, k):
    return [SYMBOLS[i] for i in rules.sets[rules.rules[b, k]].nonzero()[:, 0].tolist()]


def test_word_rules_name_fixed_tags_and_words_that_take_no_punctuation_tag():
    rules = word_rules([["Mr.", "Vinken", ",", "61", "&", "."], ["Yes"]], SYMBOLS)
    assert rules.rules.tolist() == [
        [NO_PUNCTUATION, NO_PUNCTUATION, FREE, NO_PUNCTUATION, FREE, 2],  # "," is no symbol here
        [NO_PUNCTUATION, FREE, FREE, FREE, FREE, FREE],
    ]
    assert allowed_tags(rules, 0, 0) == ["NN", "VB"] and allowed_tags(rules, 0, 2) == ["NN", "VB", "."]
    assert allowed_tags(rules, 0, 5) == ["."]


def test_with_a_lexicon_a_word_takes_the_tags_training_saw_it_with():
    lexicon = TagLexicon.of(
        ["run run run fast", "a run"], [["(S", "VB", "NN", "VB", "NN", ")S"], ["(S", "NN", "VB", ")S"]]
    )
    assert lexicon.tags("run") == ("NN", "VB")  # seen 4 times: its own tags
    assert lexicon.tags("fast") == ("NN",) and lexicon.tags("a") == ("NN",)  # seen once: its own and its class's
    assert lexicon.tags("dog") == ("NN",)  # unknown: its class UNK, from the rare words
    assert lexicon.tags("Dogs") == ("NN",)  # class UNK-C-s never seen: backs off to UNK
    assert TagLexicon().tags("run") is None and TagLexicon.from_json(lexicon.to_json()) == lexicon
    rules = word_rules(
        [["run", "dog", ".", "&"]], SYMBOLS, TagLexicon({"run": ("VB",), "&": ("CC",)}, {"UNK": ("NN", ".")})
    )
    assert [allowed_tags(rules, 0, k) for k in range(4)] == [
        ["VB"],
        ["NN"],
        ["."],
        ["NN", "VB", "."],
    ]  # no CC here: free


def test_the_lexicon_of_the_training_files_allows_the_gold_tag_of_almost_every_dev_word():
    from aiayn.parse.linearize import linearize
    from aiayn.parse.trees import read_treebank
    from conftest import DATA

    archive = DATA / "ptb-sample" / "treebank.zip"
    train = read_treebank(archive, "wsj_0001-0159")
    lexicon = TagLexicon.of([" ".join(t.words()) for t in train], [linearize(t) for t in train])
    pairs = [(w, g) for t in read_treebank(archive, "wsj_0160-0179") for w, g in zip(t.words(), t.tags())]
    covered = sum(g in (lexicon.tags(w) or (g,)) for w, g in pairs) / len(pairs)
    mean_allowed = sum(len(lexicon.tags(w) or ()) for w, _ in pairs) / len(pairs)
    assert covered >= 0.99 and mean_allowed < 6, (covered, mean_allowed)


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_the_words_anchor_the_tags(search):
    """A full stop gets its tag "." and no other word does, whatever the model prefers."""
    sentences = [["It", ".", "ran", "."], ["Go", "home", "."]]
    words, rules = torch.tensor([len(w) for w in sentences]), word_rules(sentences, SYMBOLS)
    finished = 0
    for seed in range(8):
        step = TreeConstrainedStep(RandomModel(seed), SYMBOLS, words, rules)
        config = DecodeConfig(beam_size=4 if search == "beam" else 1, extra_len=300)
        src = torch.full((2, 4), 5)
        hyps = beam_search(step, src, config) if search == "beam" else greedy_hypotheses(step, src, config)
        for sentence, h in zip(sentences, hyps):
            sequence = [SYMBOLS[i] for i in h[0].tokens]
            if sequence[-1] != "</s>":
                continue
            finished += 1
            tags = [s for s in sequence if s in ("NN", "VB", ".")]
            assert [t == "." for t in tags] == [w == "." for w in sentence], sequence
            assert repair(sequence[:-1], sentence)[1] == Repairs()  # nothing left to retag
    assert finished >= 12


def test_the_training_trees_bound_runs_of_opening_brackets_and_depth():
    from aiayn.parse.linearize import linearize
    from aiayn.parse.trees import read_treebank
    from conftest import DATA

    trees = read_treebank(DATA / "ptb-sample" / "treebank.zip", "wsj_0001-0159")
    shape = TreeShape.of([linearize(t) for t in trees])
    assert (shape.open_run, shape.depth) == (6, 28)
    assert TreeShape.of([["(S", "(NP", "NN", ")NP", "(VP", "VB", ")VP", ")S"]]) == TreeShape(
        open_run=2,
        depth=2,
        first={"NP": ("NN",), "S": ("NN",), "VP": ("VB",)},
        last={"NP": ("NN",), "S": ("VB",), "VP": ("VB",)},
        children={"NP": ("NN",), "S": ("(NP", "(VP"), "TOP": ("(S",), "VP": ("VB",)},
    )

    shape = TreeShape(open_run=2, depth=4)
    step = TreeConstrainedStep(RandomModel(0), SYMBOLS, torch.tensor([4]), shape=shape)
    state = step.start(torch.full((1, 3), 5))
    opens = lambda: [t for t, ok in zip(SYMBOLS, step.allowed(state)[0].tolist()) if ok and t.startswith("(")]  # noqa: E731
    for token, may_open in [("(S", True), ("(NP", False), ("NN", True), ("(VP", True), ("(NP", False), ("NN", False)]:
        _, state = step.step(torch.tensor([[SYMBOLS.index(token)]]), state)  # run 1, 2, 0, 1, 2; depth 4 at the end
        assert bool(opens()) == may_open, token


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_a_model_that_keeps_opening_brackets_writes_trees_of_the_training_shape(search):
    class Opener(RandomModel):
        def step(self, tokens, cache):
            scores = torch.randn(tokens.size(0), len(SYMBOLS), generator=self.generator)
            scores[:, [SYMBOLS.index(s) for s in ("(S", "(NP", "(VP")]] += 10
            return scores.log_softmax(-1), cache

    shape, words = TreeShape(open_run=3, depth=4), torch.tensor([5, 2])
    config = DecodeConfig(beam_size=4 if search == "beam" else 1, extra_len=300)
    run = beam_search if search == "beam" else greedy_hypotheses
    for h, n in zip(
        run(TreeConstrainedStep(Opener(1), SYMBOLS, words, config=config, shape=shape), torch.full((2, 4), 5), config),
        words.tolist(),
    ):
        sequence = [SYMBOLS[i] for i in h[0].tokens][:-1]
        assert TreeShape.of([sequence]).open_run <= 3 and TreeShape.of([sequence]).depth <= 4, sequence
        assert repair(sequence, ["w"] * n, retag=False)[1] == Repairs()


def constituents(sequence: list[str]) -> list[tuple[str, str, str, int]]:
    """(label, first tag, last tag, index of the last word) of every bracket of a well-formed sequence."""
    out, stack, tags = [], [], []
    for symbol in sequence:
        if symbol.startswith("("):
            stack.append((symbol[1:], len(tags)))
        elif symbol.startswith(")"):
            label, begin = stack.pop()
            out.append((label, tags[begin], tags[-1], len(tags) - 1))
        else:
            tags.append(symbol)
    return out


def random_trees(shape: TreeShape, search: str, all_finish: bool = False):
    """(sequence, words) of every finished output of random models searched under shape's tables,
    each checked to be a tree over its words that needs no repair; all_finish: every output must finish."""
    words = torch.tensor([4, 3, 5])
    config = DecodeConfig(beam_size=4 if search == "beam" else 1, extra_len=300)
    run = beam_search if search == "beam" else greedy_hypotheses
    for seed in range(6):
        step = TreeConstrainedStep(RandomModel(seed), SYMBOLS, words, config=config, shape=shape)
        for h, n in zip(run(step, torch.full((3, 4), 5), config), words.tolist()):
            if not h or SYMBOLS[h[0].tokens[-1]] != "</s>":
                assert not all_finish, h
                continue
            sequence = [SYMBOLS[i] for i in h[0].tokens][:-1]
            assert repair(sequence, ["w"] * n, retag=False)[1] == Repairs(), sequence
            yield sequence, n


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_constituents_begin_and_end_with_tags_their_label_began_and_ended_with_in_training(search):
    shape = TreeShape(first={"S": ("NN", "VB"), "NP": ("NN",), "VP": ("VB",)}, last={"NP": ("NN",), "VP": ("NN", "VB")})
    checked = 0
    for sequence, n in random_trees(shape, search, all_finish=True):
        for label, first, last, end in constituents(sequence):
            assert first in shape.first[label], sequence
            if label in shape.last and end < n - 1:  # once every word has its tag, any bracket may close
                assert last in shape.last[label], sequence
            checked += 1
    assert checked > 50


def test_the_edge_tables_of_the_training_files_fit_almost_every_test_constituent():
    from aiayn.parse.linearize import linearize
    from aiayn.parse.trees import read_treebank
    from conftest import DATA

    archive = DATA / "ptb-sample" / "treebank.zip"
    shape = TreeShape.of([linearize(t) for t in read_treebank(archive, "wsj_0001-0159")])
    test = [c for t in read_treebank(archive, "wsj_0180-0199") for c in constituents(linearize(t))]
    misfits = [c for c in test if c[1] not in shape.first[c[0]] or c[2] not in shape.last[c[0]]]
    assert len(test) == 4592 and len(misfits) <= 4, misfits
    held = [c for t in read_treebank(archive, "wsj_0180-0199") for c in children(linearize(t))]
    unseen = [c for c in held if c[1] not in shape.children[c[0]]]
    assert len(held) > 10000 and len(unseen) <= 10, unseen
    assert TreeShape.from_json(shape.to_json()) == shape
    assert TreeShape.from_json({"open_run": 6, "depth": 28}).to_json() == {"open_run": 6, "depth": 28}  # older files


def children(sequence: list[str]) -> list[tuple[str, str]]:
    """(parent label, symbol) for every opening bracket and tag a constituent (or the root, TOP) holds directly."""
    out, stack = [], ["TOP"]
    for symbol in sequence:
        if symbol.startswith(")"):
            stack.pop()
            continue
        out.append((stack[-1], symbol))
        if symbol.startswith("("):
            stack.append(symbol[1:])
    return out


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_constituents_hold_only_what_their_label_held_in_training(search):
    shape = TreeShape(children={"TOP": ("(S",), "S": ("(NP", "(VP", "."), "NP": ("NN",), "VP": ("(NP", "VB")})
    finished = 0
    for sequence, _ in random_trees(shape, search):
        assert all(child in shape.children[parent] for parent, child in children(sequence)), sequence
        finished += 1
    assert finished >= 12


def test_a_row_the_tables_leave_no_token_falls_back_to_the_other_rules():
    """An NP that may hold only NPs never reaches a tag; the search still finishes every tree."""
    shape = TreeShape(open_run=4, depth=6, children={"TOP": ("(S",), "S": ("(NP",), "NP": ("(NP",)})
    words, config = torch.tensor([3, 2]), DecodeConfig(beam_size=1, extra_len=300)
    for seed in range(4):
        step = TreeConstrainedStep(RandomModel(seed), SYMBOLS, words, config=config, shape=shape)
        for h, n in zip(greedy_hypotheses(step, torch.full((2, 4), 5), config), words.tolist()):
            sequence = [SYMBOLS[i] for i in h[0].tokens]
            assert sequence[-1] == "</s>" and repair(sequence[:-1], ["w"] * n, retag=False)[1] == Repairs(), sequence
