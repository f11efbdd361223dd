"""`aiayn evaluate --task parse`: EVALB's summary of a file of trees against a file of gold trees."""

from __future__ import annotations

import json

from .evalb import CUTOFF_LEN, EvalbResult, Summary, evalb


def format_summary(name: str, s: Summary) -> str:
    return (
        f"{name}: F1 {s.f1:.2f}  precision {s.precision:.2f}  recall {s.recall:.2f}  "
        f"complete match {s.complete_match:.2f}  tagging {s.tagging_accuracy:.2f}  "
        f"({s.valid} valid, {s.errors} rejected, {s.skipped} skipped of {s.sentences})"
    )


def format_result(result: EvalbResult) -> str:
    lines = [format_summary("all", result.all), format_summary(f"len<={CUTOFF_LEN}", result.short)]
    for number, s in enumerate(result.sentences, start=1):
        if s.status != "ok":
            lines.append(f"  line {number}: {'rejected' if s.status == 'error' else 'skipped'}: {s.reason}")
    return "\n".join(lines)


def evaluate_trees(hyp: str | None, ref: str, as_json: bool) -> int:
    """Score the trees in hyp against ref (one tree a line, (TOP ...)) and print EVALB's summaries."""
    from ..files import read_text_lines

    if not hyp:
        raise ValueError("--task parse needs --hyp (trees from aiayn parse) and --ref (gold trees)")
    files = []
    for path in (hyp, ref):
        with open(path, "rb") as f:
            files.append(list(read_text_lines(f, path)))
    if len(files[0]) != len(files[1]):
        raise ValueError(f"{hyp} has {len(files[0])} lines but {ref} has {len(files[1])}")
    result = evalb(files[1], files[0])
    print(json.dumps(result.to_dict()) if as_json else format_result(result))
    return 0
