"""Beam search (§6.1) on hand-written probability tables, and on a tiny random Transformer."""

from __future__ import annotations

import math

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from aiayn.config import DecodeConfig, ModelConfig
from aiayn.decode.beam import beam_search, length_penalty
from aiayn.decode.greedy import greedy_hypotheses, greedy_search
from aiayn.decode.sampling import filter_log_probs, sample
from aiayn.decode.step import UncachedTransformerStep
from aiayn.model import Transformer

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4
V = 5
NO_EOS = 5  # the name of a third table, in which </s> never comes
# Next-token probabilities after each prefix, one table per sentence; any other prefix gets FALLBACK.
FALLBACK = {EOS: 0.5, A: 0.3, B: 0.2}
TABLES = {
    A: {  # sentence 1: both hypotheses end after two tokens; the lone </s> ranks third and never finishes
        (): {A: 0.5, B: 0.3, EOS: 0.2},
        (A,): {EOS: 0.6, A: 0.25, B: 0.15},
        (B,): {EOS: 0.9, A: 0.06, B: 0.04},
    },
    B: {  # sentence 2: "</s>" is the most probable, "a a </s>" wins once alpha rewards length
        (): {A: 0.55, EOS: 0.4, B: 0.05},
        (A,): {A: 0.7, EOS: 0.3},
        (A, A): {EOS: 0.95, A: 0.03, B: 0.02},
    },
    NO_EOS: {
        (): {A: 0.7, B: 0.3},
        (A,): {A: 0.6, B: 0.4},
        (B,): {A: 0.9, B: 0.1},
        (A, A): {A: 0.8, B: 0.2},
        (A, B): {A: 0.55, B: 0.45},
    },
}


class TableCache:
    def __init__(self, table: torch.Tensor, prefix: torch.Tensor):
        self.table, self.prefix = table, prefix  # (N,) which table, (N, t) tokens so far

    def index_select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> TableCache:
        return TableCache(self.table[index], self.prefix[index])


class TableModel:
    """The step interface over TABLES: the source's first token names the table."""

    bos_id, eos_id, pad_id, banned, max_len = BOS, EOS, PAD, (PAD, BOS), None

    def start(self, src: torch.Tensor) -> TableCache:
        return TableCache(src[:, 0], src.new_zeros(src.size(0), 0))

    def step(self, tokens: torch.Tensor, cache: TableCache) -> tuple[torch.Tensor, TableCache]:
        prefix = torch.cat([cache.prefix, tokens], dim=1)[:, 1:]  # drop the start token
        rows = []
        for table, seq in zip(cache.table.tolist(), prefix.tolist()):
            probs = TABLES[table].get(tuple(seq), FALLBACK)
            rows.append([math.log(probs[v]) if probs.get(v) else -math.inf for v in range(V)])
        return torch.tensor(rows), TableCache(cache.table, torch.cat([cache.prefix, tokens], dim=1))


def lp(length: int, alpha: float = 0.6) -> float:
    return ((5 + length) / 6) ** alpha


# Source [table, </s>]: 2 tokens, so outputs may have 2 + extra_len = 4 tokens.
SRC = torch.tensor([[A, EOS], [B, EOS]])
EXPECTED = {
    0.0: [
        [([A, EOS], math.log(0.5 * 0.6)), ([B, EOS], math.log(0.3 * 0.9))],
        [([EOS], math.log(0.4)), ([A, A, EOS], math.log(0.55 * 0.7 * 0.95))],
    ],
    0.6: [
        [([A, EOS], math.log(0.5 * 0.6) / lp(2)), ([B, EOS], math.log(0.3 * 0.9) / lp(2))],
        [([A, A, EOS], math.log(0.55 * 0.7 * 0.95) / lp(3)), ([EOS], math.log(0.4) / lp(1))],
    ],
}


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_on_probability_tables(alpha):
    config = DecodeConfig(beam_size=2, alpha=alpha, extra_len=2, n_best=2)
    result = beam_search(TableModel(), SRC, config)
    for hyps, expected in zip(result, EXPECTED[alpha]):
        assert [h.tokens for h in hyps] == [tokens for tokens, _ in expected]
        assert [h.score for h in hyps] == pytest.approx([score for _, score in expected], abs=1e-6)


def test_length_limit_ends_the_search():
    """Without </s>, the search stops at source length + extra_len and returns the best cut hypotheses."""
    (hyps,) = beam_search(
        TableModel(), torch.tensor([[NO_EOS, EOS]]), DecodeConfig(beam_size=2, alpha=0.0, extra_len=1, n_best=2)
    )
    # limit 3: "a a a" (0.7*0.6*0.8) and "a b a" (0.7*0.4*0.55) rank first among the last step's candidates
    assert [h.tokens for h in hyps] == [[A, A, A], [A, B, A]]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.336), math.log(0.154)], abs=1e-6)


def test_length_penalty():
    assert length_penalty(0.6, 1.0) == 1.0
    assert length_penalty(0.6, 7.0) == pytest.approx(2**0.6)
    assert length_penalty(1.0, 7.0, "power") == 7.0
    with pytest.raises(ValueError):
        length_penalty(0.6, 3.0, "nope")


def tiny_model(seed: int = 0, max_len: int = 64) -> Transformer:
    """A random tiny Transformer whose logits bias makes </s> likely enough to end some hypotheses early."""
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40, max_len=max_len, final_logits_bias=True)).eval()
    with torch.no_grad():
        model.logits_bias[model.config.eos_id] = 2.5
    return model


def random_source(n: int, seed: int = 1) -> torch.Tensor:
    """n sentences of 3..10 random tokens and </s>, padded: (n, 11)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(n, 11, dtype=torch.long)
    for i in range(n):
        length = int(torch.randint(3, 11, (1,), generator=g))
        src[i, :length] = torch.randint(4, 40, (length,), generator=g)
        src[i, length] = 2
    return src[:, : int((src != 0).sum(1).max())]


@pytest.mark.parametrize("alpha, penalty", [(0.0, "gnmt"), (0.6, "power"), (1.0, "power")])
def test_beam_size_one_equals_greedy(alpha, penalty):
    """With one beam, the search keeps the argmax path and stops at its </s>, as greedy search does."""
    model, src = tiny_model(), random_source(12)
    config = DecodeConfig(beam_size=1, alpha=alpha, length_penalty=penalty)
    beam, greedy = beam_search(model, src, config), greedy_hypotheses(model, src, config)
    lengths = {len(g[0].tokens) for g in greedy}
    assert len(lengths) > 2 and min(lengths) < src.size(1) + 50  # some end early, at different lengths
    for (b,), (g,) in zip(beam, greedy):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)
    legacy = greedy_search(model, src)  # the tensor form: pad after the hypothesis
    for row, (g,) in zip(legacy.tolist(), greedy):
        assert row[: len(g.tokens)] == g.tokens and set(row[len(g.tokens) :]) <= {0}


@pytest.mark.parametrize("penalty", ["gnmt", "power"])
def test_batched_equals_one_sentence_at_a_time(penalty):
    model, src = tiny_model(), random_source(10)
    config = DecodeConfig(beam_size=4, alpha=0.6, length_penalty=penalty, n_best=4)
    batched = beam_search(model, src, config)
    assert {len(h[0].tokens) for h in batched} != {src.size(1) + 50}  # </s> ends some of them
    for i, hyps in enumerate(batched):
        alone = beam_search(model, src[i : i + 1, : int((src[i] != 0).sum())], config)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


# 80: past the cache's first 64 positions, so it grows. 12 sentences x 3 beams = 36 rows: cached
# self-attention takes the written-out one-query path (32+ rows) until sentences finish.
@pytest.mark.parametrize("extra_len, sentences", [(12, 6), (80, 6), (12, 12)])
def test_cached_equals_uncached(extra_len, sentences):
    """Incremental decoding (cached keys/values) and recomputing the whole prefix agree."""
    model, src = tiny_model(seed=3, max_len=128), random_source(sentences, seed=4)
    if extra_len > 64:
        with torch.no_grad():
            model.logits_bias[model.config.eos_id] = -10.0  # no </s>: every hypothesis runs to the limit
    config = DecodeConfig(beam_size=3, n_best=3, extra_len=extra_len)
    cached = beam_search(model, src, config)
    uncached = beam_search(UncachedTransformerStep(model), src, config)
    assert max(len(h[0].tokens) for h in cached) > (64 if extra_len > 64 else 3)
    for c, u in zip(cached, uncached):
        assert [h.tokens for h in c] == [h.tokens for h in u]
        # float32 sums of up to 90 log-probabilities: equal to a few parts in 10^7
        assert [h.score for h in c] == pytest.approx([h.score for h in u], rel=1e-6, abs=1e-5)
        assert [h.log_prob for h in c] == pytest.approx([h.log_prob for h in u], rel=1e-6, abs=1e-5)


def test_filters_for_sampling():
    log_probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    top2 = filter_log_probs(log_probs, top_k=2).exp()
    assert top2.tolist()[0] == pytest.approx([0.625, 0.375, 0, 0])
    nucleus = filter_log_probs(log_probs, top_p=0.8).exp()  # 0.5 + 0.3 reach 0.8: two tokens
    assert nucleus.tolist()[0] == pytest.approx([0.625, 0.375, 0, 0])
    hot = filter_log_probs(log_probs, temperature=2.0).exp()
    expected = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    assert hot.tolist()[0] == pytest.approx((expected / expected.sum()).tolist())


def test_sampling_top_k_one_is_greedy_and_sampling_is_seeded():
    model, src = tiny_model(), random_source(5)
    greedy = greedy_hypotheses(model, src)
    config = DecodeConfig(sample=True, top_k=1)
    assert [h[0].tokens for h in sample(model, src, config)] == [g[0].tokens for g in greedy]
    free = DecodeConfig(sample=True, temperature=1.5)
    draw = lambda seed: [h[0].tokens for h in sample(model, src, free, torch.Generator().manual_seed(seed))]  # noqa: E731
    assert draw(7) == draw(7) and draw(7) != draw(8)


def test_sampling_forces_eos_at_the_limit_as_greedy_search_does():
    """With forced_eos (opus-mt's), a sample that reaches its length limit ends in </s> there; without, it is cut."""
    model, src = tiny_model(), random_source(5)
    with torch.no_grad():
        model.logits_bias[model.config.eos_id] = -30.0  # </s> is never drawn on its own
    eos = model.config.eos_id
    for forced in (True, False):
        config = DecodeConfig(sample=True, temperature=1.5, extra_len=2, forced_eos=forced)
        drawn = [h[0].tokens for h in sample(model, src, config, torch.Generator().manual_seed(3))]
        limits = (src != model.config.pad_id).sum(dim=1) + 2
        assert [len(t) for t in drawn] == limits.tolist()
        assert all((t[-1] == eos) == forced for t in drawn) and all(eos not in t[:-1] for t in drawn)
        greedy = greedy_hypotheses(model, src, config.replace(sample=False))
        top1 = sample(model, src, config.replace(temperature=1.0, top_k=1))
        assert [h[0].tokens for h in top1] == [g[0].tokens for g in greedy]


def all_hypotheses(table: int, limit: int, alpha: float) -> list[tuple[list[int], float]]:
    """Every hypothesis of TABLES[table] up to `limit` tokens (ending at </s> or cut at the limit), best first."""
    out, todo = [], [([], 0.0)]
    while todo:
        seq, logp = todo.pop()
        for v, p in TABLES[table].get(tuple(seq), FALLBACK).items():
            nxt, lp_ = seq + [v], logp + math.log(p)
            if v == EOS or len(nxt) == limit:
                out.append((nxt, lp_ / lp(len(nxt), alpha)))
            else:
                todo.append((nxt, lp_))
    return sorted(out, key=lambda h: -h[1])


@pytest.mark.parametrize("beam_size", [6, 12, 40])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_beam_wider_than_the_vocabulary_searches_every_hypothesis(beam_size, alpha):
    """At the first step there are V continuations, fewer than the beam (V = 5): the search still runs and,
    wide enough to hold every prefix (at most 8 live here), finds the best hypotheses of an exhaustive search."""
    result = beam_search(TableModel(), SRC, DecodeConfig(beam_size=beam_size, alpha=alpha, extra_len=2, n_best=3))
    for (table, _), hyps in zip(SRC.tolist(), result):
        best = all_hypotheses(table, 4, alpha)[:3]
        assert [h.tokens for h in hyps] == [tokens for tokens, _ in best]
        assert [h.score for h in hyps] == pytest.approx([score for _, score in best], abs=1e-6)


@pytest.mark.parametrize("beam_size", [3, 4, 5])
def test_an_ended_hypothesis_never_goes_on(beam_size):
    """With fewer live continuations than beams (banned tokens, a short table), a hypothesis that ended at
    </s> is not revived as a live one: none of the n-best holds </s> before its last token."""
    for hyps in beam_search(
        TableModel(), SRC, DecodeConfig(beam_size=beam_size, alpha=0.6, extra_len=2, n_best=beam_size)
    ):
        assert hyps and all(EOS not in h.tokens[:-1] for h in hyps)


class FreshLogitsModel(TableModel):
    """TableModel whose every step returns a new log-probability tensor, as oneDNN's products do, and records
    whether the memory of the step before was still held (by the tensor or any view of it) when the next one
    was asked for."""

    def __init__(self):
        self.last = None  # weak reference to the memory of the tensor the last step returned
        self.alive_at_next_step = []

    def step(self, tokens, cache):
        if self.last is not None:
            self.alive_at_next_step.append(not self.last.expired())
        log_probs, cache = super().step(tokens, cache)
        self.last = StorageWeakRef(log_probs.untyped_storage())
        return log_probs, cache


@pytest.mark.parametrize("search", ["beam", "greedy", "sample"])
def test_a_step_s_log_probs_are_let_go_before_the_next_step(search):
    """Each search drops a step's (N, V) log-probabilities before asking for the next step's, so that fresh
    logits (7-28 MiB a step with opus-mt at batch 32) never make two vocabulary-sized tensors at once."""
    model = FreshLogitsModel()
    src = torch.tensor([[NO_EOS, EOS], [A, EOS]])
    if search == "beam":
        beam_search(model, src, DecodeConfig(beam_size=2, extra_len=2))
    elif search == "greedy":
        greedy_hypotheses(model, src, DecodeConfig(extra_len=2))
    else:
        sample(model, src, DecodeConfig(extra_len=2, sample=True), torch.Generator().manual_seed(0))
    assert len(model.alive_at_next_step) >= 2
    assert not any(model.alive_at_next_step)
