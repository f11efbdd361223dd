"""Table 3 rerun at small scale (§6.2): the Multi30k model and each variation trained for M minutes.

The small base (recipes/multi30k-en-de.yaml: N=3, d_model=256, d_ff=1024, h=4, so d_k=64 as in the
paper) takes each row's change in the same direction as the paper's. Perplexity per word piece depends
on the vocabulary, so each row is compared with the base by direction, not by value.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .variations import TABLE3, TRAIN_FIELDS, has_d_k_field

SMALL = {  # paper row -> the change to the small base (None: the small base itself)
    "h=1": {"n_heads": 1}, "h=4": None, "h=16": {"n_heads": 16}, "h=32": {"n_heads": 32},
    "d_k=16": {"d_k": 16}, "d_k=32": {"d_k": 32},
    "N=2": {"n_layers": 1}, "N=4": {"n_layers": 2}, "N=8": {"n_layers": 4},
    "d_model=256": {"d_model": 128}, "d_model=1024": {"d_model": 512},
    "d_ff=1024": {"d_ff": 512}, "d_ff=4096": {"d_ff": 2048},
    "P_drop=0.0": {"p_drop": 0.0}, "P_drop=0.2": {"p_drop": 0.2},
    "eps_ls=0.0": {"label_smoothing": 0.0}, "eps_ls=0.2": {"label_smoothing": 0.2},
    "learned positions": {"positions": "learned"},
}


def overrides(changes: dict[str, Any]) -> list[str]:
    """Recipe overrides for a row's changes (label smoothing is the train section's)."""
    return [f"--{'train' if k in TRAIN_FIELDS else 'model'}.{k}={v}" for k, v in changes.items()]


def direction(delta: float, tolerance: float) -> int:
    """-1, 0 or +1: the sign of a change, 0 within the tolerance."""
    return 0 if abs(delta) <= tolerance else (1 if delta > 0 else -1)


def score_run(run: Path, valid: str, src_lang: str, tgt_lang: str, bleu_sentences: int) -> dict[str, float]:
    """Dev perplexity (all pairs) and BLEU (beam 4, the first bleu_sentences) of run/model."""
    from ..data.corpus import find_file, read_parallel
    from ..decode.translate import Translator
    from ..evaluate import perplexity, sacre_bleu

    translator = Translator.load(run / "model")
    src, ref = read_parallel(find_file(valid, src_lang), find_file(valid, tgt_lang))
    ppl, _ = perplexity(translator.model, translator.tokenizer.encode_source(src), translator.tokenizer.encode_target(ref))
    n = bleu_sentences or len(src)
    bleu = sacre_bleu(translator.translate(src[:n], beam_size=4), ref[:n]).score
    return {"ppl": ppl, "bleu": bleu}


def run_table3(out: Path, minutes: float, labels: list[str] | None = None, bleu_sentences: int = 500,
               log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Train the small base and each chosen row for `minutes`, score them, compare directions with the paper."""
    from ..train.loop import train
    from .trained import multi30k_recipe

    chosen = [r for r in TABLE3 if r.label in SMALL and (labels is None or r.label in labels)]
    unknown = sorted(set(labels or ()) - set(SMALL))
    if unknown:
        raise ValueError(f"unknown Table 3 rows: {', '.join(unknown)}; choose from {', '.join(SMALL)}")
    common = [f"--train.max_minutes={minutes}", "--train.average_last=1", "--train.save_every=100000",
              "--train.eval_every=0", "--data.test="]

    def trained(name: str, changes: dict[str, Any]) -> dict[str, float]:
        recipe = multi30k_recipe(common + overrides(changes))
        run = out / name
        if run.name != "base" and (out / "base" / "spm.model").is_file() and not (run / "spm.model").exists():
            run.mkdir(parents=True, exist_ok=True)  # the base run's vocabulary and encoded data: trained once
            shutil.copy(out / "base" / "spm.model", run / "spm.model")
            shutil.copytree(out / "base" / "data", run / "data", dirs_exist_ok=True)
        log(f"== {name}: {' '.join(overrides(changes)) or 'the small base'}, {minutes} min")
        results = train(recipe, run, log=lambda _: None)
        d = recipe.data
        return {**score_run(run, d.valid, d.src_lang, d.tgt_lang, bleu_sentences), "steps": results.get("steps", 0)}

    base_paper = TABLE3[0]
    base = trained("base", {})
    rows = [{"label": "base", "group": "base", "change": "", **base, "paper_ppl": base_paper.ppl,
             "paper_bleu": base_paper.bleu}]
    for row in chosen:
        changes = SMALL[row.label]
        if changes is not None and "d_k" in changes and not has_d_k_field():
            log(f"== {row.label}: skipped, ModelConfig has no d_k field yet")
            continue
        measured = base if changes is None else trained(row.label.replace("=", "-").replace(" ", "-"), changes)
        same = [direction(measured["ppl"] - base["ppl"], 0.01 * base["ppl"]) == direction(row.ppl - base_paper.ppl, 0.005),
                direction(measured["bleu"] - base["bleu"], 0.3) == direction(row.bleu - base_paper.bleu, 0.05)]
        rows.append({"label": row.label, "group": row.group, "change": " ".join(overrides(changes or {})) or "(the small base)",
                     **measured, "paper_ppl": row.ppl, "paper_bleu": row.bleu, "ppl_same_way": same[0],
                     "bleu_same_way": same[1]})
        log(f"   ppl {measured['ppl']:.2f} (base {base['ppl']:.2f}), BLEU {measured['bleu']:.2f} (base {base['bleu']:.2f})")
    return rows



def table_markdown(rows: list[dict[str, Any]], minutes: float) -> str:
    """The rerun beside the paper's: perplexity and BLEU, and whether each moves the same way."""
    mark = {True: "same", False: "opposite", None: ""}
    lines = [f"Table 3 at small scale: Multi30k En-De, {minutes} min of training a row; dev perplexity per word "
             "piece and BLEU (beam 4). 'same' = the change moves the metric the same way as in the paper.", "",
             "| group | row | change here | steps | ppl | BLEU | paper ppl | paper BLEU | ppl direction | BLEU direction |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['group']} | {r['label']} | {r['change']} | {r['steps']:,} | {r['ppl']:.2f} | {r['bleu']:.2f} | "
                     f"{r['paper_ppl']:.2f} | {r['paper_bleu']:.1f} | {mark[r.get('ppl_same_way')]} | "
                     f"{mark[r.get('bleu_same_way')]} |")
    return "\n".join(lines) + "\n"
