"""Training a parser (§6.3): the tokenizer built once from the training trees (its search tables from the gold
ones alone), a model with a target vocabulary of its own, and the test set parsed and scored with EVALB's rules at
the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..model import Transformer
from ..parse.data import gold_pairs, read_split, sentences
from ..parse.evalb import evalb
from ..parse.tokenizer import ParseTokenizer
from ..parse.trees import read_treebank
from ..parser import Parser
from ..recipe import Recipe
from ..weights import write_atomic
from . import distributed

Log = Callable[[str], None]


def start_parser(recipe: Recipe, out: Path, log: Log) -> tuple[Transformer, ParseTokenizer]:
    """The tokenizer (built once into OUT) and a fresh model with a separate target vocabulary."""
    if not ParseTokenizer.is_saved_in(out):
        if distributed.is_main():
            d = recipe.data
            src, tgt = read_split(d, d.train)
            gold = gold_pairs(d)
            tokenizer = ParseTokenizer.train(src, tgt, d.vocab_size, d.source_units, tables=gold)
            note = f"; the search's tables from the {len(gold[0]):,} gold trees" if len(gold[0]) != len(src) else ""
            log(
                f"{d.archive}: {len(src):,} training trees; {len(tokenizer):,} source {d.source_units}, "
                f"{tokenizer.target_size:,} target symbols{note}"
            )
            tokenizer.save(out)
        distributed.wait_for_rank_0()
    tokenizer = ParseTokenizer.load(out)
    config = recipe.model_config(len(tokenizer)).replace(tgt_vocab_size=tokenizer.target_size, share_embeddings=False)
    torch.manual_seed(recipe.train.seed)
    return Transformer(config).train(), tokenizer


def test_parser(
    model: Transformer, tokenizer: ParseTokenizer, recipe: Recipe, out: Path, device: torch.device, log: Log
) -> dict:
    """Parse the test trees' sentences (the constrained search with §6.3's beam, alpha and limit) and score
    them with EVALB's rules."""
    d, t = recipe.data, recipe.train
    gold = read_treebank(d.archive, d.test)
    parser = Parser.from_model(model, tokenizer, device, beam_size=t.beam_size, alpha=t.alpha)
    began = time.perf_counter()
    hyp = parser.parse_lines(sentences(gold))
    score = evalb([str(g) for g in gold], hyp)
    write_atomic(out / "test.trees", "".join(h + "\n" for h in hyp).encode("utf-8"))
    a, s = score.all, score.short
    log(
        f"test F1 {a.f1:.2f} (<= 40 words: {s.f1:.2f}) on {len(gold):,} trees of {d.test}, constrained search, EVALB's rules; "
        f"{a.errors} rejected; {parser.report()}; parsed in {time.perf_counter() - began:.0f} s"
    )
    return {
        "test": d.test,
        "test_f1": a.f1,
        "test_f1_40": s.f1,
        "test_precision": a.precision,
        "test_recall": a.recall,
        "test_complete_match": a.complete_match,
        "test_rejected": a.errors,
        "test_repaired": parser.repaired,
    }
