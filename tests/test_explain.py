"""The beam-search tree (aiayn.decode.explain) against beam_search: the same best hypothesis, with
the paper's penalty and Hugging Face's, with and without forced </s>, and after a forced prefix."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.config import DecodeConfig
from aiayn.decode.beam import beam_search
from aiayn.decode.explain import beam_tree
from aiayn.serve.explain import Inspector
from aiayn.serve.schemas import ExplainRequest
from aiayn.translator import Translator
from test_marian import build_marian
from test_translate import build_tiny_model_dir, data_dir  # noqa: F401  (a fixture)

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "Rain."]


class ForcedPrefix:
    """A StepModel whose first steps allow only the prefix's tokens, at their own log-probability:
    beam_search over it is the reference for a search that continues a forced prefix."""

    def __init__(self, inner, prefix: list[int]):
        self.inner, self.prefix, self.t = inner, prefix, 0
        self.bos_id, self.eos_id, self.pad_id = inner.bos_id, inner.eos_id, inner.pad_id
        self.banned, self.max_len = inner.banned, inner.max_len

    def start(self, src):
        self.t = 0
        return self.inner.start(src)

    def step(self, tokens, cache):
        log_probs, cache = self.inner.step(tokens, cache)
        if self.t < len(self.prefix):
            token = self.prefix[self.t]
            keep = log_probs[:, token].clone()
            log_probs.fill_(-math.inf)
            log_probs[:, token] = keep
        self.t += 1
        return log_probs, cache


@pytest.fixture(scope="module")
def translator(tmp_path_factory, data_dir):
    return Translator.load(build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), data_dir))


def check_tree(model, src, config: DecodeConfig) -> None:
    tree = beam_tree(model, src, config)
    best = beam_search(model, src, config)[0][0]
    assert tree.best == best.tokens and tree.best_score == pytest.approx(best.score, abs=1e-5)
    for ids in tree.steps[:-1]:  # K live ones at every step but the last, and at most K finishing
        live = [i for i in ids if not tree.nodes[i].finished]
        assert len(live) == config.beam_size and len(ids) <= 2 * config.beam_size
    for node in tree.nodes[1:]:
        if node.finished:
            length = len(tree.path(node.id))
            penalty = ((5 + length) / 6) ** config.alpha if config.length_penalty == "gnmt" else length**config.alpha
            assert node.score == pytest.approx(node.log_prob / penalty)


@pytest.mark.parametrize("beam, alpha", [(1, 0.6), (3, 1.2), (4, 0.6)])
def test_tree_best_path_is_beam_searchs_best(translator, beam, alpha):
    for line in SENTENCES:
        src = torch.tensor([translator.encode([line])[0]])
        check_tree(translator.model, src, DecodeConfig(beam_size=beam, alpha=alpha))


def test_tree_on_a_marian_model_with_its_defaults(tmp_path):
    marian = Translator.load(build_marian(tmp_path / "m", forced_eos=True))
    assert marian.config.length_penalty == "power" and marian.config.forced_eos
    for line in SENTENCES:
        src = torch.tensor([marian.encode([line])[0]])
        for beam, forced_eos in ((1, True), (3, True), (3, False)):
            check_tree(marian.model, src, marian.config.replace(beam_size=beam, forced_eos=forced_eos))
    # What /api/explain shows of a Marian model: its source and target pieces (vocab.json ids).
    line = SENTENCES[1]
    ids = marian.encode([line])[0]
    e = Inspector(marian).explain(ExplainRequest(source=line, beam_size=3), ids)
    assert e["source_tokens"] == marian.tokenizer.source_sp.encode(line, out_type=str) + ["</s>"]
    assert e["target_in_tokens"] == ["<pad>"] + e["target_tokens"][:-1]  # Marian starts from <pad>
    assert "".join(e["target_tokens"]).replace("\u2581", " ").replace("</s>", "").strip() == e["translation"]


def test_a_forced_prefix_continues_as_beam_search_over_that_prefix(translator):
    config = DecodeConfig(beam_size=4)
    for line in SENTENCES[:2]:
        src = torch.tensor([translator.encode([line])[0]])
        free = beam_tree(translator.step_model(), src, config)
        runner_up = [n.token for n in free.nodes if n.parent == 0][-1]
        for prefix in ([runner_up, free.best[0]], free.best[:3]):
            tree = beam_tree(translator.step_model(), src, config, prefix)
            reference = beam_search(ForcedPrefix(translator.step_model(), prefix), src, config)[0][0]
            assert tree.best[: len(prefix)] == prefix and tree.best == reference.tokens
            assert tree.best_score == pytest.approx(reference.score, abs=1e-5)
            forced = [n for n in tree.nodes if n.forced]
            assert [n.token for n in forced] == prefix and all(0 < n.token_prob <= 1 for n in forced)
            assert forced[-1].log_prob == pytest.approx(sum(math.log(n.token_prob) for n in forced), abs=1e-4)


def test_a_prefix_ending_in_eos_is_the_whole_translation_and_a_long_one_is_refused(translator):
    src = torch.tensor([translator.encode(["A dog."])[0]])
    tree = beam_tree(translator.step_model(), src, DecodeConfig(beam_size=4), [7, 8, 2])
    assert tree.best == [7, 8, 2] and [n.finished for n in tree.nodes] == [False, False, False, True]
    with pytest.raises(ValueError, match="forced prefix has 60 tokens"):
        beam_tree(translator.step_model(), src, DecodeConfig(beam_size=4), [7] * 60)
