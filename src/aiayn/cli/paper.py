"""`aiayn paper [--out DIR] [--model DIR] [--quick]`: the paper's claims measured here, as a report.

`aiayn paper table3 --steps S` reruns Table 3's variations at small scale (a benchmark).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .options import at_least, number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what",
        nargs="?",
        choices=["report", "table3"],
        default="report",
        help="report (default): OUT/report.md and .html; table3: Table 3 rerun small",
    )
    parser.add_argument("--out", default="paper-lab", help="the folder to write (default paper-lab)")
    parser.add_argument(
        "--model",
        help="a trained model directory, a hub id, or a training folder (with model/ and "
        "checkpoints/); default: train a small Multi30k model first",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model and short measurements, under 2 minutes")
    parser.add_argument(
        "--layer", type=at_least(1), help="the encoder layer of item 6, from 1 (default: the one before the last)"
    )
    parser.add_argument(
        "--minutes", type=number(above=0), help="training minutes of the lab's model (default 2; --quick 0.3)"
    )
    parser.add_argument(
        "--table3", help="a Table 3 run's folder (OUT/table3): claims 13.5-13.7 read its rows (default: not measured)"
    )
    parser.add_argument("--steps", type=at_least(1), help="table3: training steps of every row (the same tokens)")
    parser.add_argument(
        "--pairs", type=at_least(0), default=0, help="table3: train on the first N training pairs (default 0: all)"
    )
    parser.add_argument(
        "--seeds",
        type=at_least(1),
        default=2,
        help="table3: seeds of the base, and of each row closer to it than their spread (default 2)",
    )
    parser.add_argument(
        "--no-reseed",
        action="store_true",
        help="table3: train no further seeds of rows near the base; read those measured before",
    )
    parser.add_argument(
        "--short",
        type=at_least(0),
        default=0,
        help="table3: add §3.5's two rows, trained on pairs of at most this many pieces, scored on longer ones",
    )
    parser.add_argument("--rows", nargs="*", help="table3: the rows to run (e.g. h=1 d_k=16 N=2); default all")
    parser.add_argument(
        "--base",
        choices=["small", "recipe"],
        default="small",
        help="table3: the base, the paper's scaled down (3+3 layers, d_model 128, h 8; default) or the recipe's",
    )
    parser.add_argument(
        "--jobs",
        type=at_least(1),
        default=1,
        help="table3: rows trained at once, each in its own process (threads default: cores / jobs)",
    )
    parser.add_argument(
        "--bleu-sentences", type=at_least(1), default=500, help="table3: validation sentences decoded for BLEU"
    )
    parser.add_argument(
        "--threads", type=at_least(0), default=0, help="torch CPU threads; 0 = 1 with --quick, else torch's default"
    )


def model_and_run(args: argparse.Namespace, out: Path) -> tuple[Path, Path | None, dict | None]:
    """The model directory, the training folder (checkpoints) and its results, training one if needed."""
    if args.model:
        given = Path(args.model)
        if (given / "model").is_dir():  # a training folder (check_model has checked either kind)
            results = given / "results.json"
            return given / "model", given, json.loads(results.read_text()) if results.is_file() else None
        return given, None, None
    from ..lab.trained import train_small

    run = out / "run"
    print(f"training a small Multi30k model into {run} ({'quick' if args.quick else 'a few minutes'}) ...")
    results = train_small(run, args.quick, log=lambda _: None, minutes=args.minutes, threads=args.threads)
    results.pop("recipe", None)
    return run / "model", run, results


def check_model(args: argparse.Namespace) -> None:
    """--model a translation model (a directory or a training folder) and --layer one of its encoder's layers, or of
    the lab's model's when it is to be trained: said before any work."""
    from ..model_folder import model_config, resolve
    from .translate import refuse_a_parser

    if args.model:
        args.model = str(resolve(args.model))  # a hub id: its folder in the cache (a local folder wins)
        given = Path(args.model)
        model_dir = given / "model" if (given / "model").is_dir() else given
        for folder in dict.fromkeys([given, model_dir]):  # a parsing run keeps its tokenizer beside the model
            refuse_a_parser(str(folder), "aiayn paper")
        if not model_dir.is_dir():
            raise FileNotFoundError(f"--model {given}: no such model directory")
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"--model {given}: not a model directory (no config.json) nor a training folder (no model/)"
            )
        layers = model_config(model_dir).encoder.layers
    else:
        from ..lab.trained import lab_recipe

        layers = lab_recipe(args.quick, args.minutes, args.threads).model_config(vocab_size=1000).encoder.layers
    if args.layer is not None and args.layer > layers:
        raise ValueError(f"--layer {args.layer}: the model's encoder has layers 1 to {layers}")


def report(args: argparse.Namespace) -> int:
    import importlib.util

    import torch

    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError("the report's figures need matplotlib: pip install 'aiayn[plots]'")

    from ..lab.claims import verdict
    from ..lab.measure import measure_all
    from ..lab.report import write_report

    out = Path(args.out)
    if out.exists() and not out.is_dir():  # said now, not after minutes of measuring
        raise NotADirectoryError(f"--out {out}: a file, not a folder for the report")
    check_model(args)
    table3 = Path(args.table3) if args.table3 else None
    if table3 is not None and not (table3 / "table3.json").is_file():  # said now, not after minutes of measuring
        raise FileNotFoundError(f"--table3 {table3}: no table3.json (aiayn paper table3 --out DIR writes DIR/table3)")
    model_dir, run, results = model_and_run(args, out)
    layer = None if args.layer is None else args.layer - 1
    m = measure_all(model_dir, run, results, args.quick, layer, print, table3)
    m["threads"] = torch.get_num_threads()
    m["trained_here"] = not args.model
    path, claims = write_report(m, out)
    for c in claims:
        print(f"  {c.id:5s} {verdict(c):14s} {c.claim}")
    print(
        f"{path} and {path.with_suffix('.html')}: {sum(c.holds is True for c in claims)} of {len(claims)} claims hold"
    )
    return 0


def table3(args: argparse.Namespace) -> int:
    from ..lab.table3 import run_table3, table_markdown
    from ..weights import write_atomic

    if args.steps is None:
        raise ValueError("table3 needs --steps S: the training steps of every row")
    out = Path(args.out) / "table3"
    rows = run_table3(
        out,
        args.steps,
        args.rows,
        args.bleu_sentences,
        args.threads,
        args.base,
        jobs=args.jobs,
        pairs=args.pairs,
        seeds=args.seeds,
        short=args.short,
        reseed=not args.no_reseed,
    )
    text = table_markdown(rows, args.steps)
    write_atomic(out / "table3.md", text.encode())
    write_atomic(out / "table3.json", json.dumps(rows, indent=2).encode())
    print(text)
    print(f"{out / 'table3.md'}, {out / 'table3.json'}")
    return 0


def run(args: argparse.Namespace) -> int:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(args.threads or (1 if args.quick else before))
    try:
        return table3(args) if args.what == "table3" else report(args)
    finally:
        torch.set_num_threads(before)
