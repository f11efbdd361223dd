"""The report: the claims table, then items 1-12 with their figures, written as Markdown and HTML.

The report is a list of blocks, ("h", level, text), ("p", text), ("table", header, rows), ("img", file,
caption) and ("pre", text), which render to both formats; each file is written whole or not at all.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from ..weights import write_atomic
from . import figures, sections
from .claims import Claim, claims_table, verdict

Block = tuple
TITLE = 'The paper lab: "Attention Is All You Need", claim by claim, measured here'


def claims_blocks(claims: list[Claim]) -> list[Block]:
    rows = [
        [
            c.id,
            c.claim,
            c.words,
            c.criterion,
            c.measured,
            "by construction" if c.by_construction else "measured",
            verdict(c),
        ]
        for c in claims
    ]
    held = sum(c.holds is True for c in claims)
    built = sum(c.by_construction for c in claims)
    return [
        ("h", 2, "Claims"),
        (
            "p",
            f"{held} of {len(claims)} claims hold on this run. {built} of them hold by construction: they are "
            "arithmetic, true of any model and any machine, and the lab checks that the code computes them as the "
            f"paper says; the other {len(claims) - built} depend on training or timing. Items 1, 6, 9 and 10 show "
            "rather than claim; they follow the table as figures and tables.",
        ),
        ("table", ["#", "claim", "the paper's words", "criterion", "measured here", "kind", "verdict"], rows),
    ]


def build(m: dict[str, Any], out: Path) -> tuple[list[Block], list[Claim]]:
    """Draw every figure into out and assemble the blocks."""
    drawn = {f.__name__: f(m, out) for f in figures.ALL}
    claims = claims_table(m)
    return [("h", 1, TITLE), *sections.intro(m), *claims_blocks(claims), *sections.body(m, drawn)], claims


def to_markdown(blocks: list[Block]) -> str:
    parts = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            parts.append(block[1])
        elif kind == "pre":
            parts.append("```\n" + block[1] + "\n```")
        elif kind == "img":
            parts.append(f"![{block[2]}]({block[1]})")
        elif kind == "table":
            cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
            lines = ["| " + " | ".join(block[1]) + " |", "|" + "---|" * len(block[1])]
            lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in block[2]]
            parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def to_html(blocks: list[Block]) -> str:
    e = html.escape
    parts = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]}>{e(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{e(block[1])}</p>")
        elif kind == "pre":
            parts.append(f"<pre>{e(block[1])}</pre>")
        elif kind == "img":
            parts.append(
                f'<figure><img src="{e(block[1])}" alt="{e(block[2])}"><figcaption>{e(block[2])}</figcaption></figure>'
            )
        elif kind == "table":
            head = "".join(f"<th>{e(str(h))}</th>" for h in block[1])
            body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in row) + "</tr>" for row in block[2])
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    style = (
        "body{font-family:sans-serif;max-width:72em;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}"
        "img{max-width:100%}figcaption{font-size:85%;color:#555}pre{background:#f6f6f6;padding:6px}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(TITLE)}</title><style>{style}</style></head>"
        f"<body>{''.join(parts)}</body></html>\n"
    )


def write_report(m: dict[str, Any], out: Path) -> tuple[Path, list[Claim]]:
    """out/report.md, out/report.html and the figures; returns the Markdown path and the claims."""
    out.mkdir(parents=True, exist_ok=True)
    blocks, claims = build(m, out)
    write_atomic(out / "report.md", to_markdown(blocks).encode())
    write_atomic(out / "report.html", to_html(blocks).encode())
    return out / "report.md", claims


def read_claims(report: str | os.PathLike) -> dict[str, str]:
    """The verdict of each claim in a report.md's claims table, by claim number."""
    verdicts, inside = {}, False
    for line in Path(report).read_text().splitlines():
        if line.startswith("## "):
            inside = line == "## Claims"
        elif inside and line.startswith("| ") and not line.startswith("| #"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            verdicts[cells[0]] = cells[-1]
    return verdicts
