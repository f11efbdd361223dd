"""Table 4 at small scale (§6.3): the parsing recipe trained WSJ-only and semi-supervised, beside the baselines.

    .venv/bin/python benchmarks/parse.py --minutes 100 --seeds 1 2 --silver runs/silver/multi30k.trees.gz \
        --out runs/bench-parse --report parse-benchmark.md

Rows as Table 4's: right-branching trees over the gold tags, the treebank PCFG, Klein and Manning's annotated PCFG
(aiayn.parse.pcfg.BEST), then recipes/ptb-parse.yaml trained on wsj_0001-0159 alone (WSJ only) and, with --silver,
on those trees plus silver ones (semi-supervised: `aiayn silver` writes them; --silver-trees and --gold-copies set
the mix). Each Transformer setting trains once per --seeds seed for --minutes on 2 threads (a rerun on the same
--out resumes it; --minutes is the total) and parses the test files (wsj_0180-0199, 245 trees) with both searches:
§6.3's own (beam 21, alpha 0.3, input length + 300; outputs that are not trees repaired) and the constrained search
`aiayn parse` uses (trees held to the training trees' tags and shapes, beam 120; not in the paper). Columns: EVALB's
F1 (all, <= 40 words), precision, recall, complete match, the mean over the seeds with its spread.
`--baselines-only valid --pcfg-orders 1,1 2,1 2,1,splits ...` scores the baselines alone (no training), on the
test or the development files: how BEST was chosen. `--searches constrained` leaves out §6.3's search (slow on an
undertrained model, which writes up to input length + 300 symbols in every beam).

The silver mix is chosen on the development files, one --out per candidate, the semi-supervised setting alone:

    .venv/bin/python benchmarks/parse.py --split valid --settings semi-supervised --seeds 1 --searches constrained \
        --silver runs/silver/multi30k.trees.gz --gold-copies 3 --out runs/parse-dev/gold3 --report dev-gold3.md

The chosen candidate's run folder (OUT/semi-supervised-seed1) then serves the test table: copied into the table's
--out and run with the same --silver, --silver-trees, --gold-copies and --minutes, it is read back (its last
checkpoints averaged again), not trained again; a larger --minutes trains it on.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import torch


def load_sampler(samples: list[float], stop: threading.Event) -> None:
    """One-minute load average every 30 s: how much the 2 cores were shared with other work."""
    while not stop.wait(30):
        samples.append(os.getloadavg()[0])


def row(name: str, result, seconds: float, note: str = "") -> dict:
    a, s = result.all, result.short
    return {
        "system": name,
        "f1": a.f1,
        "f1_40": s.f1,
        "precision": a.precision,
        "recall": a.recall,
        "complete_match": a.complete_match,
        "rejected": a.errors,
        "seconds": seconds,
        "note": note,
    }


def baselines(recipe, test: list, orders: list[dict] | None = None) -> list[dict]:
    """Right-branching, the plain treebank PCFG and a PCFG at each of `orders`, scored on the gold trees `test`
    (the recipe's test or development files)."""
    from aiayn.parse.baselines import right_branching
    from aiayn.parse.evalb import evalb
    from aiayn.parse.pcfg import BEST, PCFG
    from aiayn.parse.trees import read_treebank

    orders = orders or [BEST]
    d = recipe.data
    gold = [str(t) for t in test]
    began = time.perf_counter()
    rows = [
        row(
            "right-branching (gold tags)",
            evalb(gold, [str(right_branching(t.words(), t.tags())) for t in test]),
            time.perf_counter() - began,
        )
    ]
    train = read_treebank(d.archive, d.train)
    named = [("treebank PCFG", {})] + [(order_name(o), o) for o in orders]
    for name, order in named:
        began = time.perf_counter()
        grammar = PCFG.train(train, **order)
        parses = [grammar.parse(t.words()) for t in test]
        failed = sum(p is None for p in parses)
        rows.append(
            row(
                f"{name}, CKY ({len(grammar.b_lhs):,} binary rules)",
                evalb(gold, [str(p) if p else "" for p in parses]),
                time.perf_counter() - began,
                f"{failed} without a parse" if failed else "",
            )
        )
    return rows


def order_name(order: dict) -> str:
    splits = ", tag splits" if order.get("split_tags") else ""
    return f"PCFG, v = {order['vertical']}, h = {order['horizontal']}{splits}"


def parse_order(text: str) -> dict:
    """ "2,1" -> v = 2, h = 1; "2,1,splits" adds Klein and Manning's tag splits."""
    parts = text.split(",")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "splits"):
        raise argparse.ArgumentTypeError(f"{text!r}: give V,H or V,H,splits")
    return {"vertical": int(parts[0]), "horizontal": int(parts[1]), "split_tags": len(parts) == 3}


SETTINGS = ("WSJ only", "semi-supervised")  # Table 4's two training settings


def recipe_overrides(args: argparse.Namespace) -> list[str]:
    return [f"--train.max_minutes={args.minutes}", "--train.threads=2", *args.overrides]


def setting_overrides(args: argparse.Namespace, setting: str, seed: int) -> list[str]:
    """One training run's recipe overrides: the budget, the seed, and the silver trees for semi-supervised."""
    common = [*recipe_overrides(args), f"--train.seed={seed}", "--data.test="]  # the test trees parsed here
    if setting == "semi-supervised":
        common += [f"--data.silver={args.silver}", f"--data.gold_copies={args.gold_copies}"]
        common += [f"--data.silver_trees={args.silver_trees}"]
    return common


def transformer_rows(args: argparse.Namespace, recipe, setting: str, trees: list) -> list[dict]:
    """Train the setting once per seed (or resume it), parse the gold trees' sentences with each search, score
    with EVALB."""
    from aiayn.parse.evalb import evalb
    from aiayn.parser import PAPER_SEARCH, Parser
    from aiayn.recipe import load_recipe
    from aiayn.train.loop import train

    gold, sentences = [str(t) for t in trees], [" ".join(t.words()) for t in trees]
    rows = []
    for seed in args.seeds:
        out = Path(args.out) / f"{setting}-seed{seed}"
        began = time.perf_counter()
        results = train(load_recipe(args.recipe, setting_overrides(args, setting, seed)), out)
        trained = time.perf_counter() - began
        note = (
            f"seed {seed}: {results['steps']:,} steps, {results['minutes']:.1f} min, {results['epoch'] - 1} epochs, "
            f"{results['tokens_per_s']:,.0f} tok/s"
        )
        for search in args.searches:
            began = time.perf_counter()
            beam = recipe.train.beam_size if search == "constrained" else PAPER_SEARCH["beam_size"]
            parser = Parser.load(
                out / "model", beam_size=beam, alpha=recipe.train.alpha, constrained=search == "constrained"
            )
            label = f"{'§6.3' if search == 'paper' else 'constrained'} search, beam {beam}"
            scored = evalb(gold, parser.parse_lines(sentences))
            rows.append(
                {
                    **row(f"Transformer, {setting}, {label}", scored, time.perf_counter() - began, note),
                    "seed": seed,
                    "train_seconds": trained,
                    "repaired": parser.repaired,
                }
            )
    return rows


def mean_rows(rows: list[dict]) -> list[dict]:
    """One row per system: the mean over its seeds of each score, with the spread (max - min) beside it."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["system"], []).append(r)
    out = []
    for system, runs in by.items():
        mean = {"system": system, "seeds": len(runs), "note": "; ".join(r["note"] for r in runs if r["note"])}
        for k in ("f1", "f1_40", "precision", "recall", "complete_match", "seconds"):
            values = [r[k] for r in runs]
            mean[k], mean[f"{k}_spread"] = sum(values) / len(values), max(values) - min(values)
        mean["rejected"] = sum(r["rejected"] for r in runs)
        out.append(mean)
    return out


def main() -> None:
    from aiayn.recipe import load_recipe

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/ptb-parse.yaml")
    parser.add_argument("--out", default="runs/bench-parse")
    parser.add_argument("--report", default="parse-benchmark.md")
    parser.add_argument("--minutes", type=float, default=100.0, help="training wall clock a run (default 100)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="a training run per seed (default 1)")
    parser.add_argument("--searches", nargs="+", default=["paper", "constrained"], choices=["paper", "constrained"])
    parser.add_argument("--silver", help="silver trees (aiayn silver) for the semi-supervised setting")
    parser.add_argument("--silver-trees", type=int, default=0, help="the first N silver trees (default 0: all)")
    parser.add_argument("--gold-copies", type=int, default=1, help="the gold trees repeated this often (default 1)")
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=SETTINGS,
        help="the Transformer settings to train (default: WSJ only, and semi-supervised given --silver)",
    )
    parser.add_argument(
        "--split",
        choices=["test", "valid"],
        help="the files every row is scored on (default test; valid: choosing the silver mix on the dev files)",
    )
    parser.add_argument(
        "--baselines-only",
        choices=["test", "valid"],
        help="no training: the baselines alone on these files, with a PCFG at each of --pcfg-orders",
    )
    parser.add_argument(
        "--pcfg-orders",
        nargs="+",
        type=parse_order,
        default=None,
        metavar="V,H[,splits]",
        help="Markovisation orders, with Klein and Manning's tag splits where ',splits' (default: pcfg.BEST)",
    )
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. --model.d_model=512 (after --)")
    args = parser.parse_args()
    if args.baselines_only and args.split not in (None, args.baselines_only):
        parser.error(f"--baselines-only {args.baselines_only} and --split {args.split}: give one split")
    args.split = args.baselines_only or args.split or "test"
    chosen = args.settings or [s for s in SETTINGS if s != "semi-supervised" or args.silver]
    settings = [s for s in SETTINGS if s in chosen]  # Table 4's order, each once
    if "semi-supervised" in settings and not args.silver:
        parser.error("--settings semi-supervised needs --silver FILE (aiayn silver writes one)")
    try:
        recipe = load_recipe(args.recipe, recipe_overrides(args))
    except (OSError, ValueError) as err:
        parser.error(str(err))
    from aiayn.parse.trees import read_treebank

    torch.set_num_threads(2)
    loads: list[float] = [os.getloadavg()[0]]
    stop = threading.Event()
    threading.Thread(target=load_sampler, args=(loads, stop), daemon=True).start()
    files = recipe.data.test if args.split == "test" else recipe.data.valid
    trees = read_treebank(recipe.data.archive, files)  # the gold trees every row is scored on
    scored = f"{files} ({len(trees)} trees)"
    rows = baselines(recipe, trees, args.pcfg_orders)
    if args.baselines_only:
        stop.set()
        write_report(Path(args.report), rows, loads, 0, scored)
        return
    runs = [r for setting in settings for r in transformer_rows(args, recipe, setting, trees)]
    stop.set()
    write_report(Path(args.report), rows + mean_rows(runs), loads, args.minutes, scored, runs)


def write_report(
    path: Path, rows: list[dict], loads: list[float], minutes: float, files: str, runs: list[dict] = ()
) -> None:
    lines = [
        f"# Parsing {files}, EVALB's rules; "
        + (f"each Transformer run trained {minutes:g} min on 2 threads" if minutes else "the baselines alone"),
        "",
        "| system | seeds | F1 | F1 <= 40 words | precision | recall | complete match | rejected | seconds | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def cell(r: dict, k: str) -> str:
        spread = r.get(f"{k}_spread")
        return f"{r[k]:.2f}" + (f" ± {spread / 2:.2f}" if spread is not None and r.get("seeds", 1) > 1 else "")

    for r in rows:
        lines.append(
            f"| {r['system']} | {r.get('seeds', '')} | {cell(r, 'f1')} | {cell(r, 'f1_40')} | {cell(r, 'precision')} | "
            f"{cell(r, 'recall')} | {cell(r, 'complete_match')} | {r['rejected']} | {r['seconds']:.0f} | {r['note']} |"
        )
    lines += [
        "",
        f"load average (1 min, every 30 s; 2 cores): mean {sum(loads) / len(loads):.2f}, "
        f"min {min(loads):.2f}, max {max(loads):.2f}",
        "",
        "```json",
        json.dumps({"rows": rows, "runs": list(runs)}, indent=2),
        "```",
        "",
    ]
    path.write_text("\n".join(lines))
    print("\n".join(lines[: 4 + len(rows) + 2]))


if __name__ == "__main__":
    main()
