"""Tree-constrained search: whatever the model prefers, every finished output is a tree over the words."""

from __future__ import annotations

import pytest
import torch

from aiayn.config import DecodeConfig
from aiayn.decode.beam import beam_search
from aiayn.decode.greedy import greedy_hypotheses
from aiayn.parse.constrain import FREE, NO_PUNCTUATION, TreeConstrainedStep, TreeShape, word_rules
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
    for token, expected in [("(S", ["(S", "(NP", "(VP", "NN", "VB", "."]),  # no close right after an open
                            ("(NP", ["(S", "(NP", "(VP", "NN", "VB", "."]),
                            ("NN", ["(S", ")NP", "(NP", "(VP", "NN", "VB", "."]),  # only the innermost closes
                            (")NP", ["(S", "(NP", "(VP", "NN", "VB", "."]),  # the root stays open: a word is left
                            ("VB", [")S"]),  # every word has its tag: close
                            (")S", ["</s>"])]:
        _, state = step.step(torch.tensor([[SYMBOLS.index(token)]]), state)
        assert sorted(allowed()) == sorted(expected), token


def test_word_rules_name_fixed_tags_and_words_that_take_no_punctuation_tag():
    rules = word_rules([["Mr.", "Vinken", ",", "61", "&", "."], ["Yes"]], SYMBOLS)
    dot = SYMBOLS.index(".")
    assert rules.tolist() == [[NO_PUNCTUATION, NO_PUNCTUATION, FREE, NO_PUNCTUATION, FREE, dot],  # "," is not a symbol here
                              [NO_PUNCTUATION, FREE, FREE, FREE, FREE, FREE]]


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
    assert TreeShape.of([linearize(t) for t in trees]) == TreeShape(open_run=6, depth=28)
    assert TreeShape.of([["(S", "(NP", "NN", ")NP", "(VP", "VB", ")VP", ")S"]]) == TreeShape(open_run=2, depth=2)

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
    for h, n in zip(run(TreeConstrainedStep(Opener(1), SYMBOLS, words, config=config, shape=shape),
                        torch.full((2, 4), 5), config), words.tolist()):
        sequence = [SYMBOLS[i] for i in h[0].tokens][:-1]
        assert TreeShape.of([sequence]).open_run <= 3 and TreeShape.of([sequence]).depth <= 4, sequence
        assert repair(sequence, ["w"] * n, retag=False)[1] == Repairs()
