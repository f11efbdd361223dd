"""aiayn evaluate: sacreBLEU (with its signature), the paper's tokenised BLEU, chrF and perplexity.

Either score a hypothesis file (--hyp H --ref R), or translate a source file with a model and score
that (--model M --src S --ref R); with a model, the references' per-word-piece perplexity is reported too.
"""

from __future__ import annotations

import argparse
import json

from ..files import read_text_lines
from .paths import output_file, same_file, text_output
from .translate import add_search_arguments, chunks, load_translator, refuse_a_parser

DEFAULT_LANG = "de"  # the paper's En-De tokenised BLEU


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ref", required=True, help="reference translations, one a line")
    parser.add_argument("--hyp", help="translations to score (instead of --model)")
    parser.add_argument("--model", help="translate --src with this model (a directory or a hub id), then score")
    parser.add_argument("--src", help="source sentences (with --model)")
    parser.add_argument("--save-hyp", type=output_file, help="with --model: also write the translations here")
    parser.add_argument(
        "--lang",
        help="target language for the tokenised BLEU: Moses' rules, and German's compound "
        f"split (default: the model's target language, else {DEFAULT_LANG})",
    )
    parser.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    parser.add_argument(
        "--task",
        choices=["translate", "parse"],
        default="translate",
        help="parse: labelled bracket P/R/F1 of trees as EVALB with COLLINS.prm (§6.3)",
    )
    add_search_arguments(parser)


def read_file(path: str) -> list[str]:
    """The lines of a plain or gzip (.gz, as ../shared/data holds them) UTF-8 file."""
    from ..data.sources import open_bytes

    with open_bytes(path) as f:
        return list(read_text_lines(f, path))


def run(args: argparse.Namespace) -> int:
    from .. import evaluate

    if args.task == "parse":  # trees, one a line, scored by aiayn.parse.evalb
        from ..parse.report import evaluate_trees

        return evaluate_trees(args.hyp, args.ref, args.json)
    if args.hyp and args.model:
        raise ValueError("give --hyp (translations to score) or --model with --src (translate, then score), not both")
    if args.save_hyp and not args.model:
        raise ValueError("--save-hyp saves the translations of --model; with --hyp there are none to save")
    for flag in ("src", "ref", "hyp"):
        given = getattr(args, flag)
        if args.save_hyp and given and same_file(given, args.save_hyp):
            raise ValueError(
                f"--save-hyp {args.save_hyp}: the same file as --{flag} {given}, which it would replace; "
                "save the translations elsewhere"
            )
    if args.model:  # before any file is read
        from ..model_folder import resolve

        args.model = str(resolve(args.model))  # a hub id: its folder in the cache
        refuse_a_parser(args.model, "aiayn evaluate")
    refs = read_file(args.ref)
    if not refs:
        raise ValueError(f"{args.ref}: empty file; there is nothing to score")
    scores, extra, lang = [], {}, args.lang
    if args.hyp:
        hyps = read_file(args.hyp)
    elif args.model and args.src:
        srcs = read_file(args.src)
        if len(srcs) != len(refs):
            raise ValueError(f"{args.src} has {len(srcs)} lines but {args.ref} has {len(refs)}")
        translator = load_translator(args)
        hyps = [h for block in chunks(iter(srcs), 2048) for h in translator.translate(block)]
        if args.save_hyp:  # written whole or not at all
            with text_output(args.save_hyp) as out:
                out.writelines(h + "\n" for h in hyps)
        ppl, n = evaluate.perplexity(
            translator.model,
            translator.tokenizer.encode_source(srcs),
            translator.tokenizer.encode_target(refs),
            args.batch_size,
            translator.device,
        )
        extra = {"perplexity": ppl, "reference_tokens": n}
        lang = lang or translator.model.config.tgt_lang  # what the model was trained to write
    else:
        raise ValueError("give --hyp, or --model with --src")
    if len(hyps) != len(refs):
        raise ValueError(f"{args.hyp} has {len(hyps)} lines but {args.ref} has {len(refs)}")
    tokenized = evaluate.tokenized_bleu(hyps, refs, lang or DEFAULT_LANG)
    scores = [evaluate.sacre_bleu(hyps, refs), tokenized, evaluate.chrf(hyps, refs)]
    if args.json:
        out = {s.name: {"score": round(s.score, 4), "signature": s.signature} for s in scores}
        print(json.dumps({**out, **extra}))
    else:
        for s in scores:
            print(s)
        if extra:
            print(
                f"perplexity = {extra['perplexity']:.3f}  (per word piece, {extra['reference_tokens']} reference tokens)"
            )
    return 0
