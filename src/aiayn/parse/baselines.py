"""The floor for §6.3's comparison: right-branching trees over the gold POS tags.

English is mostly right-branching, so a tree that nests every suffix of the sentence already finds
a good share of the constituents. The tree is built over the words EVALB keeps (a punctuation word
joins the constituent of the word after it; final punctuation the innermost one); the outermost
constituent is S, every other one takes a phrase label from its first word's tag.
"""

from __future__ import annotations

from .evalb import DELETE_LABELS
from .trees import TOP, Tree


def phrase_label(tag: str) -> str:
    """The phrase a word with this tag most often begins: NN* -> NP, VB* -> VP, IN -> PP, ..."""
    if tag.startswith("N") or tag in ("DT", "PRP", "PRP$", "CD", "EX", "PDT", "POS", "$", "#", "WP", "WDT"):
        return "NP"
    if tag.startswith("V") or tag in ("MD", "TO"):
        return "VP"
    if tag == "IN":
        return "PP"
    if tag.startswith("J"):
        return "ADJP"
    if tag.startswith("RB") or tag == "WRB":
        return "ADVP"
    return "S"


def right_branching(words: list[str], tags: list[str]) -> Tree:
    """(TOP (S w1 (X w2 (X w3 ... )))) over the given tags, with punctuation kept out of the nesting."""
    leaves = [Tree(t, word=w) for w, t in zip(words, tags)]
    groups: list[list[Tree]] = []  # one per kept word: the punctuation before it, then the word
    pending: list[Tree] = []
    for leaf in leaves:
        pending.append(leaf)
        if leaf.label not in DELETE_LABELS:
            groups.append(pending)
            pending = []
    if not groups:
        return Tree(TOP, tuple(leaves))
    groups[-1].extend(pending)
    last = groups.pop()
    node = last[0] if len(last) == 1 else Tree(phrase_label(_head(last).label) if groups else "S", tuple(last))
    for i, group in reversed(list(enumerate(groups))):
        node = Tree("S" if i == 0 else phrase_label(_head(group).label), (*group, node))
    if node.is_preterminal:
        node = Tree("S", (node,))
    return Tree(TOP, (node,))


def _head(group: list[Tree]) -> Tree:
    return next((leaf for leaf in group if leaf.label not in DELETE_LABELS), group[0])
