"""Constituency parsing at a fixed budget (§6.3): the recipe trained for N minutes, beside two baselines.

    .venv/bin/python benchmarks/parse.py --minutes 100 --out runs/bench-parse --report parse-benchmark.md

Trains recipes/ptb-parse.yaml (wsj_0001-0159) for --minutes of wall clock on 2 threads, parses the
test files (wsj_0180-0199, 245 trees) with §6.3's search (beam 21, alpha 0.3, input length + 300)
and scores them with EVALB's rules (aiayn.parse.evalb); beside it, on the same trees and scorer,
right-branching trees over the gold tags and the treebank PCFG (CKY) trained on the same files;
and the same model with the search `aiayn parse` uses, constrained to trees held to the training
trees' tags and shapes (not in the paper), at the recipe's beam (120, chosen on dev). `--searches constrained` leaves out the §6.3 search
(the slow one: an undertrained model writes up to input length + 300 symbols in every beam). Running it again on the same --out resumes the
training (--minutes is the total); use a new --out for a fresh run. `--baselines-only valid --pcfg-orders 1,2 2,1 ...`
scores the baselines alone (no training), on the test or the development files: how the PCFG's orders of
Markovisation (PARENT_ANNOTATED) were chosen.
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


# Klein and Manning's orders of Markovisation for the stronger PCFG, chosen on the development files (wsj_0160-0179)
# among v = 1-3, h = 1-2 (docs/parsing.md, "Baselines")
PARENT_ANNOTATED = {"vertical": 2, "horizontal": 1}


def baselines(recipe, split: str = "test", orders: list[dict] = (PARENT_ANNOTATED,)) -> list[dict]:
    """Right-branching, the plain treebank PCFG and a PCFG at each of `orders`, scored on the recipe's test or
    validation files."""
    from aiayn.parse.baselines import right_branching
    from aiayn.parse.evalb import evalb
    from aiayn.parse.pcfg import PCFG
    from aiayn.parse.trees import read_treebank

    d = recipe.data
    test = read_treebank(d.archive, d.test if split == "test" else d.valid)
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
    named = [("treebank PCFG", {})] + [(f"PCFG, v = {o['vertical']}, h = {o['horizontal']}", o) for o in orders]
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


def recipe_overrides(args: argparse.Namespace) -> list[str]:
    return [f"--train.max_minutes={args.minutes}", "--train.threads=2", *args.overrides]


def main() -> None:
    from aiayn.parse.evalb import evalb
    from aiayn.parse.trees import read_treebank
    from aiayn.parser import PAPER_SEARCH, Parser
    from aiayn.recipe import load_recipe
    from aiayn.train.loop import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/ptb-parse.yaml")
    parser.add_argument("--out", default="runs/bench-parse")
    parser.add_argument("--report", default="parse-benchmark.md")
    parser.add_argument("--minutes", type=float, default=100.0, help="training wall clock (default 100)")
    parser.add_argument("--searches", nargs="+", default=["paper", "constrained"], choices=["paper", "constrained"])
    parser.add_argument(
        "--baselines-only",
        choices=["test", "valid"],
        help="no training: the baselines alone on these files, with a PCFG at each of --pcfg-orders",
    )
    parser.add_argument(
        "--pcfg-orders", nargs="+", default=["2,1"], metavar="V,H", help="Markovisation orders (default 2,1)"
    )
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. --model.d_model=512 (after --)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    loads: list[float] = [os.getloadavg()[0]]
    stop = threading.Event()
    threading.Thread(target=load_sampler, args=(loads, stop), daemon=True).start()
    recipe = load_recipe(args.recipe, recipe_overrides(args))
    orders = [dict(zip(("vertical", "horizontal"), map(int, o.split(",")))) for o in args.pcfg_orders]
    if args.baselines_only:
        rows = baselines(recipe, args.baselines_only, orders)
        stop.set()
        write_report(Path(args.report), rows, loads, 0, args.baselines_only)
        return
    rows = baselines(recipe, "test", orders)
    results = train(load_recipe(args.recipe, [*recipe_overrides(args), "--data.test="]), args.out)  # parsed below
    out = Path(args.out)
    test = read_treebank(recipe.data.archive, recipe.data.test)
    gold, sentences = [str(t) for t in test], [" ".join(t.words()) for t in test]
    note = (
        f"{results['steps']:,} steps, {results['minutes']:.1f} min, {results['epoch'] - 1} epochs, "
        f"{results['tokens_per_s']:,.0f} tok/s"
    )
    name = f"aiayn Transformer ({recipe.model.get('n_layers')} layers, d_model {recipe.model.get('d_model')})"
    for search in args.searches:  # §6.3's search, or only trees held to the training trees' (not in the paper)
        began = time.perf_counter()
        beam = recipe.train.beam_size if search == "constrained" else PAPER_SEARCH["beam_size"]
        parser = Parser.load(
            out / "model", beam_size=beam, alpha=recipe.train.alpha, constrained=search == "constrained"
        )
        label = f"{'§6.3' if search == 'paper' else 'constrained'} search, beam {beam}"
        rows.append(
            row(
                f"{name}, {label}",
                evalb(gold, parser.parse_lines(sentences)),
                time.perf_counter() - began,
                f"{note}; {parser.repaired} repaired",
            )
        )
    stop.set()
    write_report(Path(args.report), rows, loads, args.minutes)


def write_report(path: Path, rows: list[dict], loads: list[float], minutes: float, split: str = "test") -> None:
    files = "wsj_0180-0199 (245 trees)" if split == "test" else "wsj_0160-0179 (273 trees)"
    lines = [
        f"# Parsing {files}, EVALB's rules; "
        + (f"aiayn trained {minutes:g} min on 2 threads" if minutes else "the baselines alone"),
        "",
        "| system | F1 | F1 <= 40 words | precision | recall | complete match | rejected | seconds | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['system']} | {r['f1']:.2f} | {r['f1_40']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | "
            f"{r['complete_match']:.2f} | {r['rejected']} | {r['seconds']:.0f} | {r['note']} |"
        )
    lines += [
        "",
        f"load average (1 min, every 30 s; 2 cores): mean {sum(loads) / len(loads):.2f}, "
        f"min {min(loads):.2f}, max {max(loads):.2f}",
        "",
        "```json",
        json.dumps(rows, indent=2),
        "```",
        "",
    ]
    path.write_text("\n".join(lines))
    print("\n".join(lines[: 4 + len(rows) + 2]))


if __name__ == "__main__":
    main()
