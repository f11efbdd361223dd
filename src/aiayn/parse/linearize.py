"""Trees as token sequences (§6.3, after Vinyals et al. 2015, "Grammar as a Foreign Language").

The source is the sentence's words; the target is the tree as a bracket sequence in which each
constituent is an opening token "(NP" and a closing token ")NP" and each word is replaced by its
POS tag. The TOP root is left out (every tree has it). The words come back from the source, so a
tree round-trips exactly:

    (TOP (S (NP (NNP John)) (VP (VBZ sleeps)) (. .)))   <->   (S (NP NNP )NP (VP VBZ )VP . )S

A decoder can write sequences that are not trees. `repair` turns any sequence into a tree over the
given words and says what it changed (`Repairs`); nothing is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .trees import TOP, Tree

# The tag for a word the decoder wrote no tag for: punctuation keeps the tag EVALB deletes it by.
PUNCTUATION_TAGS = {
    ",": ",",
    ".": ".",
    "?": ".",
    "!": ".",
    ":": ":",
    ";": ":",
    "--": ":",
    "...": ":",
    "``": "``",
    "''": "''",
    "`": "``",
    "'": "''",
}
DEFAULT_TAG = "NN"
# Words whose tag the treebank fixes (PTB's guidelines; of the sample's 3,914 trees, one word in about
# 95,000 disagrees: "Wa" tagged ","): a leaf over one of them takes that tag whatever the decoder
# wrote. EVALB deletes words by their tag (COLLINS.prm), so a comma tagged NN, or a word tagged ",",
# would give the hypothesis another length than the gold tree and EVALB would reject the sentence.
# "'" and "`" are left out: "'" is also POS.
FIXED_TAGS = {w: t for w, t in PUNCTUATION_TAGS.items() if w not in ("'", "`")}
PUNCTUATION = frozenset(PUNCTUATION_TAGS.values())


def linearize(tree: Tree) -> list[str]:
    """The bracket sequence of a tree: "(X" ... ")X" for each constituent, the tag for each word."""
    out: list[str] = []
    todo: list[Tree | str] = list(reversed(tree.children)) if tree.label == TOP else [tree]
    while todo:  # iterative: trees may be deeper than Python's recursion limit
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
        elif item.is_preterminal:
            out.append(item.label)
        else:
            out.append("(" + item.label)
            todo.append(")" + item.label)
            todo.extend(reversed(item.children))
    return out


def is_open(token: str) -> bool:
    return len(token) > 1 and token[0] == "("


def is_close(token: str) -> bool:
    return len(token) > 1 and token[0] == ")"


def delinearize(tokens: list[str], words: list[str]) -> Tree:
    """The tree of a well-formed sequence over words; a ValueError says what is wrong otherwise."""
    tree, repairs = repair(tokens, words, retag=False)  # a treebank's own tags stay as they are
    if repairs.total:
        raise ValueError(f"not a well-formed tree over {len(words)} words: {repairs}")
    return tree


@dataclass
class Repairs:
    """What `repair` changed in one sequence (or, summed, in many)."""

    unopened: int = 0  # a closing bracket with nothing open: dropped
    mismatched: int = 0  # ")X" closing an open "(Y": taken as ")Y"
    unclosed: int = 0  # brackets still open at the end: closed
    empty: int = 0  # constituents with no word: removed
    missing_words: int = 0  # fewer tags than words: the rest attached to the root
    extra_tags: int = 0  # more tags than words: the surplus dropped
    stray: int = 0  # special tokens (<unk>) or bare brackets: dropped
    punctuation: int = 0  # a punctuation word with another tag, or a word with a punctuation tag: retagged

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def add(self, other: Repairs) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def __str__(self) -> str:
        parts = [f"{getattr(self, f.name)} {f.name.replace('_', ' ')}" for f in fields(self) if getattr(self, f.name)]
        return ", ".join(parts) or "none"


def repair(tokens: list[str], words: list[str], retag: bool = True) -> tuple[Tree, Repairs]:
    """A tree over exactly these words from any token sequence, and the repairs it took.

        Brackets are matched with a stack: a closing bracket closes the innermost open one whatever its
        label; one with nothing open is dropped; those still open at the end are closed. The n-th tag
        takes the n-th word; surplus tags are dropped; words without a tag are attached to the root with
        a tag from the word (punctuation) or NN. Constituents left without words are removed. With retag,
    punctuation takes its fixed tag and no word with a letter or digit keeps a punctuation tag (`_tag`).
    """
    fixes = Repairs()
    stack: list[tuple[str, list[Tree]]] = [(TOP, [])]
    n = 0
    for token in tokens:
        if is_open(token):
            stack.append((token[1:], []))
        elif is_close(token):
            if len(stack) == 1:
                fixes.unopened += 1
                continue
            label, children = stack.pop()
            fixes.mismatched += token[1:] != label
            _attach(stack[-1][1], label, children, fixes)
        elif token.startswith("<") or token in ("(", ")"):
            fixes.stray += 1
        elif n < len(words):
            stack[-1][1].append(Tree(_tag(token, words[n], fixes) if retag else token, word=words[n]))
            n += 1
        else:
            fixes.extra_tags += 1
    while len(stack) > 1:
        fixes.unclosed += 1
        label, children = stack.pop()
        _attach(stack[-1][1], label, children, fixes)
    root = stack[0][1]
    for word in words[n:]:
        fixes.missing_words += 1
        root.append(Tree(PUNCTUATION_TAGS.get(word, DEFAULT_TAG), word=word))
    return Tree(TOP, tuple(root)), fixes


def _tag(tag: str, word: str, fixes: Repairs) -> str:
    """The decoder's tag for word, unless the treebank fixes it (FIXED_TAGS) or it would make EVALB drop a word."""
    fixed = FIXED_TAGS.get(word)
    if fixed is not None and tag != fixed:
        fixes.punctuation += 1
        return fixed
    if fixed is None and tag in PUNCTUATION and any(c.isalnum() for c in word):
        fixes.punctuation += 1
        return DEFAULT_TAG
    return tag


def _attach(siblings: list[Tree], label: str, children: list[Tree], fixes: Repairs) -> None:
    if children:
        siblings.append(Tree(label, tuple(children)))
    else:
        fixes.empty += 1
