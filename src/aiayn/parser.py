"""`Parser`: sentences in, trees out, with §6.3's search settings (alpha 0.3, input length + 300).

By default the search may write only well-formed trees over each sentence's words, held to the
training trees' tags and shapes (`aiayn.parse.constrain`; not in the paper, which trusts the model:
constrained=False), at beam 120 (chosen on dev; §6.3: 21), and a label repeated over its only child is
made one (`collapse_unary_repeats`). Either way `repair` makes each bracket sequence a tree over the sentence's own
words, and the repairs are counted (`Parser.repairs`), never hidden: every sentence gets a tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from .config import DecodeConfig
from .decode.beam import beam_search
from .decode.greedy import greedy_hypotheses
from .model import Transformer
from .parse.constrain import TreeConstrainedStep, word_rules
from .parse.linearize import Repairs, repair
from .parse.tokenizer import ParseTokenizer
from .parse.trees import Tree, collapse_unary_repeats, escape_word, map_words, unescape_word
from .translator import Translator, as_sentences

# §6.3: "we increased the maximum output length to input length + 300 ... beam size of 21 and alpha = 0.3"
PAPER_SEARCH = {"beam_size": 21, "alpha": 0.3, "extra_len": 300}
# The constrained search's default beam, chosen on the dev files (wsj_0160-0179): F1 72.00 at 21, 73.22 at 40,
# 74.77 at 80, 75.32 at 120 (docs/parsing.md); 1-2 s a sentence on 2 cores. Not in the paper.
CONSTRAINED_SEARCH = {**PAPER_SEARCH, "beam_size": 120}


def search_defaults(constrained: bool) -> dict[str, Any]:
    """The search settings a Parser starts from: CONSTRAINED_SEARCH, or §6.3's own with constrained=False."""
    return CONSTRAINED_SEARCH if constrained else PAPER_SEARCH


class Parser:
    """A sequence-to-sequence model over ParseTokenizer's vocabularies; `parse(sentences)` -> trees."""

    def __init__(self, translator: Translator, constrained: bool = True):
        if not isinstance(translator.tokenizer, ParseTokenizer):
            raise ValueError("not a parsing model: it has no parse-target.json (train one with recipes/ptb-parse.yaml)")
        self.translator = translator
        self.constrained = constrained  # deviation from §6.3 (False: the paper's search): aiayn.parse.constrain
        self.repairs = Repairs()  # summed over every sentence parsed so far
        self.sentences = self.repaired = 0

    @classmethod
    def load(
        cls, path: str | Path, device: str | torch.device = "cpu", constrained: bool = True, **options: Any
    ) -> Parser:
        """A model directory or a Hugging Face hub id (as Translator.load takes); options (beam_size, alpha, batch_size,
        ...) override the search's defaults (CONSTRAINED_SEARCH, or the paper's PAPER_SEARCH with constrained=False)."""
        options = {**search_defaults(constrained), **{k: v for k, v in options.items() if v is not None}}
        translator = Translator.load(path, device, **options)
        if not isinstance(translator.tokenizer, ParseTokenizer):
            raise ValueError(
                f"{path}: a translation model, not a parsing model: it has no parse-target.json "
                "(train one with recipes/ptb-parse.yaml)"
            )
        return cls(translator, constrained)

    @classmethod
    def from_model(
        cls,
        model: Transformer,
        tokenizer: ParseTokenizer,
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        constrained: bool = True,
        **search: Any,
    ) -> Parser:
        """A parser over a model in memory (training's test set); the translator puts it in eval mode."""
        config = DecodeConfig(**{**search_defaults(constrained), **search})
        return cls(Translator(model, tokenizer, config, device, batch_size), constrained)

    def parse(self, sentences: list[str]) -> list[Tree | None]:
        """One tree per sentence (words separated by spaces), None for an empty one. Brackets in words are read
        and written as the treebank spells them (escape_word: "(" is -LRB-), so that every tree reads back."""
        sentences = [" ".join(map(escape_word, s.split())) for s in as_sentences(sentences)]
        out: list[Tree | None] = []
        sequences = self.search_constrained(sentences) if self.constrained else self.translator.translate(sentences)
        for sentence, sequence in zip(sentences, sequences):
            words = sentence.split()
            if not words:
                out.append(None)
                continue
            tree, fixes = repair(sequence.split(), words)
            if self.constrained:  # held to the training trees, which almost never repeat a label over one child
                tree = collapse_unary_repeats(tree)
            self.sentences += 1
            self.repaired += fixes.total > 0
            self.repairs.add(fixes)
            out.append(tree)
        return out

    @torch.inference_mode()
    def search_constrained(self, sentences: list[str]) -> list[str]:
        """Bracket sequences from a search that may write only well-formed trees over each sentence's words."""
        t = self.translator
        ids, out = t.encode(sentences), [""] * len(sentences)
        for batch in t.batches(ids):
            S = max(len(ids[i]) for i in batch)
            src = torch.tensor([ids[i] + [t.model.config.pad_id] * (S - len(ids[i])) for i in batch], device=t.device)
            words = [sentences[i].split() for i in batch]
            step = TreeConstrainedStep(
                t.step_model(),
                t.tokenizer.symbols,
                torch.tensor([len(w) for w in words]),
                word_rules(words, t.tokenizer.symbols, t.tokenizer.lexicon),
                t.config,
                t.tokenizer.shape,
            )
            search = beam_search if t.config.beam_size > 1 else greedy_hypotheses
            for i, hyps in zip(batch, search(step, src, t.config)):
                out[i] = t.tokenizer.decode(hyps[0].tokens) if hyps else ""
        return out

    def parse_lines(self, sentences: list[str], unescape: bool = False) -> list[str]:
        """Trees as single lines `(TOP ...)`; "" for an empty sentence. unescape: brackets in words written as
        themselves ("(" rather than -LRB-), for reading by eye: such a line is no longer a tree EVALB can read."""
        trees = self.parse(sentences)
        if unescape:
            trees = [None if t is None else map_words(t, unescape_word) for t in trees]
        return ["" if t is None else str(t) for t in trees]

    def parse_stream(self, lines: Iterable[str], chunk: int = 2048, unescape: bool = False) -> Iterator[str]:
        block: list[str] = []
        for line in lines:
            block.append(line)
            if len(block) == chunk:
                yield from self.parse_lines(block, unescape)
                block = []
        if block:
            yield from self.parse_lines(block, unescape)

    def report(self) -> str:
        return f"{self.repaired:,} of {self.sentences:,} trees repaired ({self.repairs})"
