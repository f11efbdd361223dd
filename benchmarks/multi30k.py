"""Quality at a fixed budget: a Multi30k recipe trained for 30 and then 60 minutes of wall clock.

    .venv/bin/python benchmarks/multi30k.py --out runs/bench-multi30k     # the table: runs/bench-multi30k/report.md
    .venv/bin/python benchmarks/multi30k.py --recipe recipes/multi30k-en-fr.yaml --out runs/m30k-fr --minutes 60
    .venv/bin/python benchmarks/multi30k.py --out runs/seed3 --minutes 60 --set train.seed=3   # another seed

After 30 minutes of training the run stops, averages its last checkpoints, decodes
test_2016_flickr and scores it (sacreBLEU, cased, detokenised, with its signature); then the
same command resumes exactly where it stopped and trains to 60 minutes, and scores again.
Each budget's model is also scored on the validation set (the recipe's data.valid, its beam and
alpha): choose between recipes on that column, never on test (issue 17).
`--minutes 15 30 60 120` gives the curve; a later, longer budget on the same folder resumes it, and a
budget the folder has already passed is skipped: its model-Nmin copy and its row in the report stay.
A recipe with a cool-down (train.cooldown, which plans its steps for one budget) trains each
budget as a run of its own, in OUT/15min, OUT/30min, ...
Decoding time is not counted as training time. The peer (../shared/PEERS.md), En-De only:
fairseq, 37.48 BLEU after 60 minutes on the same kind of machine, 2 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import threading
import time
from pathlib import Path

import torch

FAIRSEQ_60_MIN_BLEU = 37.48  # PEERS.md, measured on this machine


def load_sampler(samples: list[float], stop: threading.Event) -> None:
    """One-minute load average every 30 s: how much the 2 cores were shared with other work."""
    while not stop.wait(30):
        samples.append(os.getloadavg()[0])


def decoder_name() -> str:
    try:
        from aiayn.translator import Translator  # noqa: F401

        return "beam search (Translator)"
    except ImportError:
        return "greedy search (beam search not yet available)"


def main() -> None:
    from aiayn.recipe import load_recipe
    from aiayn.train.loop import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/multi30k-en-de.yaml")
    parser.add_argument("--out", default="runs/bench-multi30k")
    parser.add_argument("--report", help="the table's Markdown file (default: OUT/report.md)")
    parser.add_argument("--minutes", type=float, nargs="+", default=[30, 60])
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="recipe overrides, as aiayn train takes them: --set train.seed=3 model.p_drop=0.15",
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    loads: list[float] = []
    stop = threading.Event()
    threading.Thread(target=load_sampler, args=(loads, stop), daemon=True).start()
    report = Path(args.report or Path(args.out) / "report.md")
    kept, rows = earlier_rows(report), []
    for minutes in args.minutes:
        overrides = [f"--{item.removeprefix('--')}" for item in args.set]
        recipe = load_recipe(args.recipe, [*overrides, f"--train.max_minutes={minutes}", "--train.threads=2"])
        decoder = decoder_name()
        began = time.perf_counter()
        # A recipe that cools down plans its steps for one budget and ends with the rate near zero: each budget is a
        # run of its own (OUT/15min, ...). Without a cool-down, one run resumes exactly from budget to budget.
        out = Path(args.out) / f"{minutes:g}min" if recipe.train.cooldown else Path(args.out)
        done = trained_minutes(out)
        if done >= minutes:  # train() would stop at once: the same model again, scored under the wrong budget
            print(
                f"{out} already holds {done:.1f} minutes of training: the {minutes:g}-minute budget is past, "
                f"skipped (left as it was: {Path(args.out) / f'model-{minutes:g}min'})"
            )
            rows += [kept[minutes]] if minutes in kept else []  # its row from the report's earlier run
            continue
        results = train(recipe, out)
        shutil.copytree(out / "model", Path(args.out) / f"model-{minutes:g}min", dirs_exist_ok=True)
        valid_bleu = validation_bleu(out / "model", recipe)
        rows.append(
            dict(
                results,
                valid_bleu=valid_bleu,
                budget_minutes=minutes,
                recipe=args.recipe,
                overrides=args.set,
                decoder=decoder,
                wall_s=time.perf_counter() - began,
                peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                mean_load=sum(loads) / max(len(loads), 1),
            )
        )
        write_report(report, rows, loads, recipe.data.src_lang, recipe.data.tgt_lang)
    stop.set()


def earlier_rows(report: Path) -> dict[float, dict]:
    """The rows an earlier run of this benchmark wrote to REPORT (its JSON block), by budget; {} if none."""
    try:
        text = report.read_text()
        rows = json.loads(text[text.index("```json") + len("```json") : text.rindex("```")])
    except (OSError, ValueError):
        return {}
    return {r["budget_minutes"]: r for r in rows if isinstance(r, dict) and "budget_minutes" in r}


def trained_minutes(out: Path) -> float:
    """Minutes of training the run folder OUT already holds (its latest checkpoint's clock); 0 for a new run."""
    from aiayn.train.checkpoint import latest_checkpoint, load_checkpoint

    last = latest_checkpoint(out / "checkpoints")
    return load_checkpoint(last)[0].elapsed / 60 if last is not None else 0.0


def validation_bleu(model_dir: Path, recipe) -> float | None:
    """sacreBLEU of the run's final model on the recipe's validation set, decoded as the test set is."""
    from aiayn.data.sources import Source
    from aiayn.train.validate import sacrebleu_score
    from aiayn.translator import Translator

    d = recipe.data
    if not d.valid:
        return None
    src, ref = Source(d.valid, d.src_lang, d.tgt_lang, "data.valid").read()
    translator = Translator.load(model_dir, beam_size=recipe.train.beam_size, alpha=recipe.train.alpha)
    bleu, _ = sacrebleu_score(translator.translate(src), ref)
    print(f"valid BLEU {bleu:.2f} on {len(src):,} sentences of {d.valid}")
    return bleu


def write_report(path: Path, rows: list[dict], loads: list[float], src: str = "en", tgt: str = "de") -> None:
    """The table; the fairseq column only for En-De, the one pair PEERS.md measured."""
    peer = (src, tgt) == ("en", "de")
    lines = [
        f"# Multi30k {src.capitalize()}-{tgt.capitalize()} at a fixed wall-clock budget, 2 threads",
        "",
        "| training minutes | steps | epochs | valid BLEU | test BLEU | "
        + (f"vs fairseq 60 min ({FAIRSEQ_60_MIN_BLEU}) | " if peer else "")
        + "tokens/s (src+tgt) | peak RSS MiB | decoder | mean load |",
        "| --- " * (10 if peer else 9) + "|",
    ]
    for r in rows:
        bleu = r.get("test_bleu", float("nan"))
        valid = "-" if r.get("valid_bleu") is None else f"{r['valid_bleu']:.2f}"
        lines.append(
            f"| {r['minutes']:.1f} | {r['steps']:,} | {r['epoch'] - 1} | {valid} | {bleu:.2f} | "
            + (f"{bleu - FAIRSEQ_60_MIN_BLEU:+.2f} | " if peer else "")
            + f"{r['tokens_per_s']:,.0f} | {r['peak_rss_mib']:,.0f} | {r['decoder']} | {r['mean_load']:.2f} |"
        )
    lines += [
        "",
        f"sacreBLEU signature: {rows[-1].get('signature', '-')}",
        f"averaged checkpoints: {', '.join(rows[-1].get('averaged', []))}",
        f"load average samples (1 min, every 30 s; 2 cores): min {min(loads, default=0):.2f}, "
        f"max {max(loads, default=0):.2f}, mean {rows[-1]['mean_load']:.2f} (this run alone holds about 2)",
        "",
        "```json",
        json.dumps(rows, indent=2),
        "```",
        "",
    ]
    from aiayn.weights import write_atomic

    write_atomic(path, "\n".join(lines).encode())  # whole or not at all
    print("\n".join(lines[: 4 + len(rows)]))


if __name__ == "__main__":
    main()
