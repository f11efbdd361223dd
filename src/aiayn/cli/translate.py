"""aiayn translate: one translation per input line, in order (§6.1 beam search by default).

stdin to stdout, or --input/--output files (written to a temporary file and renamed at the end, so
a failed run leaves no half output). Lines are read in chunks, sorted by length into batches and
written back in input order; an empty line gives an empty line. A line that is not UTF-8, or longer
than the model takes (unless --truncate), stops the run with an error naming the line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from ..cpu.backend import BACKENDS
from ..files import read_text_lines
from .options import SEEDS, at_least, number
from .paths import input_file, output_file, same_file, text_output

CHUNK = 2048  # lines sorted and batched together; memory stays bounded on files of any size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help="an aiayn model directory, a Hugging Face Marian one, or a hub id (Helsinki-NLP/opus-mt-en-de)",
    )
    parser.add_argument("--input", "-i", type=input_file, help="source text, one sentence a line (default: stdin)")
    parser.add_argument("--output", "-o", type=output_file, help="where to write the translations (default: stdout)")
    add_search_arguments(parser)
    parser.add_argument(
        "--n-best",
        type=at_least(1),
        default=None,
        help="write the N best translations of each line as 'LINE<tab>SCORE<tab>TEXT' lines",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with `aiayn evaluate`: search, batching, device."""
    parser.add_argument(
        "--beam-size", "-b", type=at_least(1), help="beam width (default: the model's, else 4); 1 = greedy"
    )
    parser.add_argument("--alpha", type=number(), help="length penalty alpha (default: the model's, else 0.6; GNMT)")
    parser.add_argument("--length-penalty", choices=["gnmt", "power"], help="((5+|Y|)/6)^alpha or |Y|^alpha")
    parser.add_argument("--max-len", type=at_least(1), help="longest output in tokens (besides input length + 50)")
    parser.add_argument("--sample", action="store_true", default=None, help="sample instead of searching")
    parser.add_argument("--temperature", type=number(above=0), help="sampling temperature (above 0)")
    parser.add_argument("--top-k", type=at_least(0), help="sample from the k likeliest tokens; 0 = all")
    parser.add_argument("--top-p", type=number(above=0, at_most=1), help="nucleus sampling: in (0, 1]")
    parser.add_argument("--seed", type=SEEDS, default=0, help="random seed for --sample")
    parser.add_argument("--batch-size", type=at_least(1), default=32, help="sentences per batch (default 32)")
    parser.add_argument("--max-tokens", type=at_least(1), help="batch by padded source tokens instead of sentences")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--int8", action="store_true", help="int8 weights for the linear layers (CPU)")
    add_gemm_argument(parser)
    parser.add_argument("--truncate", action="store_true", help="cut lines longer than the model takes")


GEMM_CHOICES = ("auto", *BACKENDS)


def add_gemm_argument(parser: argparse.ArgumentParser) -> None:
    """--gemm, for every command that loads a Translator (translate, serve)."""
    parser.add_argument(
        "--gemm",
        choices=GEMM_CHOICES,
        default=None,
        help="float32 products on a CPU: measured at load (auto, the default; or $AIAYN_GEMM), or forced; "
        "+packed: the matrices oneDNN multiplies packed for it (the vocabulary; with onednn, the decoder's too)",
    )


def refuse_a_parser(model: str, command: str) -> None:
    """A parsing model's outputs are tree symbols, not text: `aiayn parse` runs it (as parse refuses a translation
    model)."""
    from ..model_folder import is_parser
    from ..parse.tokenizer import TARGET_FILE

    if is_parser(model):
        raise ValueError(
            f"{model}: a parsing model, not a translation model (it has {TARGET_FILE}); "
            f"{command} takes translation models: parse with `aiayn parse --model {model}`"
        )


def load_translator(args: argparse.Namespace):
    import torch

    from ..cpu.backend import caches_for_translation
    from ..model_folder import resolve
    from ..translator import Translator, check_device

    check_device(args.device, "--device")
    args.model = str(resolve(args.model))  # a hub id: its folder in the cache, for the checks below too
    refuse_a_parser(args.model, f"aiayn {getattr(args, 'command', None) or 'translate'}")
    caches_for_translation()  # a process that only translates: oneDNN's smaller caches, before its first product
    sampling = [
        f"--{name.replace('_', '-')}" for name in ("temperature", "top_k", "top_p") if getattr(args, name) is not None
    ]
    if sampling and not args.sample:
        raise ValueError(f"{', '.join(sampling)} only shape sampling: add --sample (beam search ignores them)")
    torch.manual_seed(args.seed)
    translator = Translator.load(
        args.model,
        device=args.device,
        int8=args.int8,
        gemm=args.gemm,
        beam_size=args.beam_size,
        alpha=args.alpha,
        length_penalty=args.length_penalty,
        max_len=args.max_len,
        sample=args.sample,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        n_best=getattr(args, "n_best", None),
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        truncate=args.truncate,
    )
    vocab, beam = translator.model.config.target_vocab_size, translator.config.beam_size
    if not translator.config.sample and beam > vocab:
        raise ValueError(f"--beam-size {beam}: more than the {vocab:,} tokens of the model's target vocabulary")
    translator.decode_config()  # the settings together (--n-best with --sample, ...), before any line is read
    return translator


def chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    block: list[str] = []
    for line in lines:
        block.append(line)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def each_block(stream: BinaryIO, name: str, out: TextIO, write: Callable[[list[str], int], None], progress=None) -> int:
    """write(block, lines_before) for each CHUNK lines of stream, flushing out after each; returns the lines.

    A line too long for the model is an error naming its line number in the file.
    """
    from ..translator import SentenceTooLong

    done = 0
    for block in chunks(read_text_lines(stream, name), CHUNK):
        try:
            write(block, done)
        except SentenceTooLong as err:
            raise ValueError(f"{name}: line {done + err.index + 1}: {err.detail}") from None
        done += len(block)
        out.flush()
        if progress is not None:
            progress.update(len(block))
    return done


def translate_stream(translator, stream: BinaryIO, name: str, out: TextIO, n_best: int | None, progress) -> int:
    """Translate every line of stream into out; returns the number of lines."""

    def write(block: list[str], done: int) -> None:
        if not n_best:
            out.writelines(text + "\n" for text in translator.translate(block))
            return
        for i, hyps in enumerate(translator.translate_n_best(block), start=done + 1):
            for h in hyps or [None] * n_best:  # an empty line: n_best empty translations
                out.write(f"{i}\t{h.score if h else 0.0:.4f}\t{h.text if h else ''}\n")

    return each_block(stream, name, out, write, progress)


def run(args: argparse.Namespace) -> int:
    if args.input and args.output and same_file(args.input, args.output):
        raise ValueError(
            f"-o {args.output}: the same file as -i {args.input}; the input would be replaced "
            f"by its translation; write to another file"
        )
    from ..model_folder import resolve

    args.model = str(resolve(args.model))  # a hub id: its folder in the cache (a local folder wins)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:  # under torchrun: each rank its share of the lines
        from . import translate_ranks

        return translate_ranks.run(args)
    translator = load_translator(args)
    name = args.input or "<stdin>"
    progress = None
    if args.input and not args.quiet and Path(args.input).is_file():  # a pipe (-i <(cmd)) is read once only
        from tqdm import tqdm

        with open(args.input, "rb") as f:
            total = sum(1 for _ in f)
        progress = tqdm(total=total, unit="line", file=sys.stderr, desc="translate")
    stream = open(args.input, "rb") if args.input else sys.stdin.buffer
    try:
        with text_output(args.output) as out:
            translate_stream(translator, stream, name, out, args.n_best, progress)
    finally:
        if args.input:
            stream.close()
        if progress is not None:
            progress.close()
    return 0
