"""Penn Treebank trees (§6.3): a small `Tree`, the .mrg reader, and the usual clean-up.

The WSJ files hold several bracketed trees each, every one under an unlabelled root: `( (S ...) )`.
Parsing work since Collins (1997) scores trees with the empty elements removed: `-NONE-` leaves
(traces, null complementisers), the constituents they leave empty, and the function tags and
co-indices on labels (NP-SBJ-1 -> NP, NP=2 -> NP). The root is labelled TOP, as EVALB's COLLINS.prm
expects.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

TOP = "TOP"
NONE_TAG = "-NONE-"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass(frozen=True)
class Tree:
    """A constituent: a label and children, or a preterminal: a POS tag and its word."""

    label: str
    children: tuple[Tree, ...] = ()
    word: str | None = None  # set for a preterminal (a POS tag over one word), None otherwise

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def preterminals(self) -> list[Tree]:
        """The (tag, word) leaves, left to right."""
        out, todo = [], [self]
        while todo:  # iterative: a decoder's tree may be deeper than Python's recursion limit
            tree = todo.pop()
            if tree.is_preterminal:
                out.append(tree)
            else:
                todo.extend(reversed(tree.children))
        return out

    def words(self) -> list[str]:
        return [p.word for p in self.preterminals()]

    def tags(self) -> list[str]:
        return [p.label for p in self.preterminals()]

    def __str__(self) -> str:
        """One line, as EVALB reads it: (TOP (S (NP (DT The) (NN cat)) (VP (VBZ sleeps))))."""
        parts: list[str] = []
        todo: list[Tree | str] = [self]
        while todo:
            item = todo.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item.is_preterminal:
                parts.append(f"({item.label} {item.word})")
            else:
                parts.append(f"({item.label}")
                todo.append(")")
                for child in reversed(item.children):
                    todo.extend((child, " "))
        return "".join(parts)


class TreeError(ValueError):
    """A bracketed tree that cannot be read; the message says where."""


def parse_trees(text: str, where: str = "<text>") -> list[Tree]:
    """Every bracketed tree in text (an .mrg file holds several), in order."""
    tokens = _TOKEN.findall(text)
    trees, i = [], 0
    while i < len(tokens):
        if tokens[i] != "(":
            raise TreeError(f"{where}: tree {len(trees) + 1}: expected '(', got {tokens[i]!r}")
        tree, i = _read(tokens, i, where, len(trees) + 1)
        trees.append(tree)
    return trees


def parse_tree(text: str, where: str = "<text>") -> Tree:
    """Exactly one bracketed tree."""
    trees = parse_trees(text, where)
    if len(trees) != 1:
        raise TreeError(f"{where}: expected one tree, found {len(trees)}")
    return trees[0]


def _read(tokens: list[str], i: int, where: str, number: int) -> tuple[Tree, int]:
    """The tree that starts at tokens[i] == '(' and the index after its ')'; iterative (no recursion limit)."""
    stack: list[tuple[str, list[Tree]]] = []
    while i < len(tokens):
        token = tokens[i]
        if token == "(":
            label = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1] not in "()" else ""
            i += 2 if label else 1
            if i + 1 < len(tokens) and tokens[i] not in "()" and tokens[i + 1] == ")":  # (TAG word)
                leaf = Tree(label, word=tokens[i])
                i += 2
                if not stack:
                    return leaf, i
                stack[-1][1].append(leaf)
                continue
            stack.append((label, []))
        elif token == ")":  # the stack is never empty here: the tree returns when it closes
            label, children = stack.pop()
            i += 1
            tree = Tree(label, tuple(children))
            if not stack:
                return tree, i
            stack[-1][1].append(tree)
        else:
            raise TreeError(f"{where}: tree {number}: word {token!r} outside a (TAG word) pair")
    raise TreeError(f"{where}: tree {number}: {len(stack)} bracket(s) never closed")


def clean(tree: Tree) -> Tree | None:
    """Without -NONE- leaves, the constituents left empty, function tags and indices; root TOP.

    None when nothing is left (a tree of empty elements only).
    """
    kept = _strip(tree)
    if kept is None:
        return None
    if kept.label == TOP:
        return kept
    if not kept.label:  # the unlabelled root of a .mrg tree
        return Tree(TOP, kept.children)
    return Tree(TOP, (kept,))


def _strip(tree: Tree) -> Tree | None:
    if tree.is_preterminal:
        return None if tree.label == NONE_TAG else tree
    children = tuple(c for c in (_strip(child) for child in tree.children) if c is not None)
    return Tree(base_label(tree.label), children) if children else None


def collapse_unary_repeats(tree: Tree) -> Tree:
    """Each X whose only child is another X (the same words under one label twice) made one X.

    The treebank has few (5 on the dev files, 7 on test, against 21-24 in the model's trees at beam 80):
    EVALB counts the copy as a bracket of its own, so collapsing it raises precision (dev F1 +0.13).
    """
    if tree.is_preterminal:
        return tree
    children = tuple(collapse_unary_repeats(child) for child in tree.children)
    while (
        tree.label != TOP and len(children) == 1 and not children[0].is_preterminal and children[0].label == tree.label
    ):
        children = children[0].children
    return Tree(tree.label, children)


# The Penn Treebank's spelling of brackets in words: a word "(" would end the tree that holds it.
BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}
_BRACKET = re.compile(r"[()\[\]{}]")
_ESCAPED = re.compile("|".join(re.escape(v) for v in BRACKETS.values()))
_UNESCAPE = {v: k for k, v in BRACKETS.items()}


def escape_word(word: str) -> str:
    """A word as the treebank writes it: "(" -> "-LRB-", "f(x)" -> "f-LRB-x-RRB-" (every bracket character)."""
    return _BRACKET.sub(lambda m: BRACKETS[m.group()], word)


def unescape_word(word: str) -> str:
    """The inverse of escape_word: "-LRB-" -> "("."""
    return _ESCAPED.sub(lambda m: _UNESCAPE[m.group()], word)


def map_words(tree: Tree, change) -> Tree:
    """tree with change(word) for each word."""
    if tree.is_preterminal:
        return Tree(tree.label, word=change(tree.word))
    return Tree(tree.label, tuple(map_words(child, change) for child in tree.children))


def base_label(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP, PP-LOC-CLR -> PP; labels that start with '-' (-NONE-, -LRB-) stay."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def file_range(spec: str) -> list[str]:
    """'wsj_0001-0159' -> ['wsj_0001', ..., 'wsj_0159']; 'wsj_0005' -> ['wsj_0005']."""
    match = re.fullmatch(r"([A-Za-z_]*?)(\d+)(?:-(\d+))?", spec.strip())
    if match is None:
        raise ValueError(f"file range {spec!r}: expected PREFIXNNNN or PREFIXNNNN-MMMM, e.g. wsj_0001-0159")
    prefix, first, last = match.group(1), match.group(2), match.group(3) or match.group(2)
    if int(last) < int(first):
        raise ValueError(f"file range {spec!r}: {last} comes before {first}")
    return [f"{prefix}{n:0{len(first)}d}" for n in range(int(first), int(last) + 1)]


def treebank_files(archive: str | Path) -> dict[str, str]:
    """The .mrg files of a zip archive or folder: file stem -> its name in the zip (or its path)."""
    archive = Path(archive)
    if archive.is_dir():
        return {p.stem: str(p) for p in sorted(archive.rglob("*.mrg"))}
    if not archive.is_file():
        where = "" if archive.is_absolute() else f" (a relative path is read from the current folder, {Path.cwd()})"
        raise FileNotFoundError(f"{archive}: no such treebank archive or folder{where}")
    with open(archive, "rb"):  # an unreadable file says so (is_zipfile would call it not a zip)
        pass
    if not zipfile.is_zipfile(archive):
        raise ValueError(f"{archive}: not a zip archive; give the treebank's zip or a folder of .mrg files")
    with zipfile.ZipFile(archive) as z:
        return {Path(n).stem: n for n in z.namelist() if n.endswith(".mrg")}


def check_treebank_split(archive: str | Path, files: str, field: str) -> None:
    """Before training (format ptb): the archive holds .mrg files in the range (field names the recipe's setting)."""
    if not str(archive):
        raise ValueError(
            "data.archive is not set: give the treebank's zip or folder in the recipe or as --data.archive=PATH"
        )
    if not files:
        raise ValueError(f"{field} is not set: give a range of .mrg files in the recipe or as --{field}=wsj_0001-0159")
    try:
        wanted = file_range(files)
    except ValueError as err:
        raise ValueError(f"{field}: {err}") from None
    try:
        stored = treebank_files(archive)
    except (FileNotFoundError, ValueError) as err:
        raise type(err)(f"data.archive: {err}") from None
    if not set(wanted) & stored.keys():
        raise ValueError(f"{field}: {archive} has no .mrg files in the range {files}")


def read_treebank(archive: str | Path, files: str) -> list[Tree]:
    """The cleaned trees of the .mrg files named by a range (e.g. wsj_0001-0159) in a zip archive or folder."""
    wanted, stored = file_range(files), treebank_files(archive)
    names = {stem: stored[stem] for stem in wanted if stem in stored}
    if not names:
        raise ValueError(f"{archive}: no .mrg files in the range {files}")
    if Path(archive).is_dir():
        found = {stem: Path(path).read_text(encoding="utf-8") for stem, path in names.items()}
    else:
        with zipfile.ZipFile(archive) as z:
            found = {stem: z.read(name).decode("utf-8") for stem, name in names.items()}
    trees = []
    for stem in wanted:
        if stem in found:
            cleaned = (clean(t) for t in parse_trees(found[stem], f"{archive}: {stem}.mrg"))
            trees.extend(t for t in cleaned if t is not None)
    return trees
