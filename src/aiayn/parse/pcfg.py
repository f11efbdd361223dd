"""The treebank PCFG baseline for §6.3: rules counted off the training trees, Viterbi CKY parsing.

Before counting, unary chains are collapsed into one label (S -> VP becomes "S+VP") and wider
constituents are binarised to the right with first-order Markov labels ("@NP|NN": the rest of an NP,
starting with an NN), so every rule is binary, or unary over a POS tag. Klein and Manning's (2003)
vertical Markovisation (parent annotation, "NP^S"), other horizontal orders and their tag splits are options of `train`.
Words seen in training keep the tags they had; an unknown word is scored by its shape (capital, digit, hyphen,
suffix), estimated from the words seen once. CKY finds the most probable tree (numpy over the rules of each
span); the transformations are undone on output.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np

from .evalb import DELETE_LABELS
from .trees import TOP, Tree

# Klein and Manning's settings for the strongest grammar here, chosen on the development files (wsj_0160-0179;
# docs/results.md, "Parsing"): what benchmarks/parse.py and `aiayn silver` train
BEST = {"vertical": 2, "horizontal": 2, "split_tags": True}
SUFFIXES = ("ing", "ed", "ly", "ion", "er", "est", "al", "ive", "able", "ic", "ity", "s")


def signature(word: str) -> str:
    """An unknown word's class: UNK-C-D-H-suffix (capitalised, digit, hyphen)."""
    parts = ["UNK"]
    if word[:1].isupper():
        parts.append("C")
    if any(c.isdigit() for c in word):
        parts.append("D")
    if "-" in word:
        parts.append("H")
    lower = word.lower()
    suffix = next((s for s in SUFFIXES if lower.endswith(s) and len(lower) > len(s) + 2), "")
    return "-".join(parts + ([suffix] if suffix else []))


def signature_backoffs(word: str) -> list[str]:
    """word's signature and its back-offs, most specific first: UNK-C-H-s, UNK-C-H, UNK-C, UNK."""
    parts = signature(word).split("-")
    return ["-".join(parts[:n]) for n in range(len(parts), 0, -1)]


AUXILIARIES = {
    "BE": {"be", "is", "are", "am", "was", "were", "been", "being", "'s", "'re", "'m"},
    "HAVE": {"have", "has", "had", "having", "'ve", "'d"},
}


def unsplit(label: str) -> str:
    """The treebank's label under the "^" marks of parent annotation and tag splits: NP^S -> NP, IN^PP^VP -> IN."""
    return label.split("^")[0]


def split_tag(tag: str, word: str, parent: str, grandparent: str, only_child: bool) -> str:
    """Klein and Manning's (2003) tag splits, each as a "^" annotation that `untransform` drops: every tag
    marked with its parent phrase (TAG-PA); IN also with the grandparent (SPLIT-IN: preposition, subordinating
    conjunction, complementiser); forms of be and have (SPLIT-AUX); "but" and "&" among the CCs (SPLIT-CC); "%"
    (SPLIT-%); a DT or RB alone under its phrase (UNARY-DT, UNARY-RB)."""
    marks = [parent]
    lower = word.lower()
    if tag == "IN" and grandparent:
        marks.append(grandparent)
    if tag.startswith(("VB", "AUX")):
        marks += [aux for aux, forms in AUXILIARIES.items() if lower in forms]
    if tag == "CC" and lower in ("but", "&"):
        marks.append(lower.upper())
    if word == "%":
        marks.append("%")
    if tag in ("DT", "RB") and only_child:
        marks.append("U")
    return tag + "".join(f"^{m}" for m in marks)


def transform(
    tree: Tree,
    vertical: int = 1,
    horizontal: int = 1,
    parents: tuple[str, ...] = (),
    split_tags: bool = False,
    parent: str = "",
) -> Tree:
    """Unary chains collapsed ("S+VP"), then right binarisation with "@X|first" labels.

    Klein and Manning's (2003) orders of Markovisation: vertical v annotates each phrase with its v - 1 nearest
    ancestors ("NP^S", "NP^VP^S"; 1: none, as the plain treebank grammar), and horizontal h names h children of
    the rest in each "@" label ("@NP|JJ|NN" for h = 2; 0: none, "@NP"). split_tags: their tag splits (`split_tag`),
    which read this node's parent label whatever v is."""
    if tree.is_preterminal:
        return tree
    label, children = tree.label, tree.children
    while len(children) == 1 and not children[0].is_preterminal:
        label, children = f"{label}+{children[0].label}", children[0].children
    above = (label.split("+")[-1], *parents)[: max(vertical - 1, 0)]  # what this node's children are annotated with
    mark = "".join(f"^{p}" for p in parents[: max(vertical - 1, 0)])  # this node's own ancestors
    base = label.split("+")[-1]
    children = tuple(
        Tree(split_tag(c.label, c.word, base, parent, len(children) == 1), word=c.word)
        if split_tags and c.is_preterminal
        else transform(c, vertical, horizontal, above, split_tags, base)
        for c in children
    )

    def rest_label(kids: tuple[Tree, ...]) -> str:
        return f"@{base}" + "".join(f"|{k.label.split('^')[0]}" for k in kids[:horizontal]) + mark

    while len(children) > 2:  # right-factored: X -> c1 @X|c2, @X|c2 -> c2 @X|c3, ...
        rest = Tree(rest_label(children[-2:]), children[-2:])
        for i in range(len(children) - 3, 0, -1):
            rest = Tree(rest_label(children[i:]), (children[i], rest))
        children = (children[0], rest)
    return Tree(label + mark, children)


def untransform(tree: Tree) -> Tree:
    """The inverse of transform: @-nodes spliced into their parents, "^" annotations dropped, "A+B" labels
    unfolded."""
    if tree.is_preterminal:
        return Tree(unsplit(tree.label), word=tree.word)
    children: list[Tree] = []
    for child in (untransform(c) for c in tree.children):
        children.extend(child.children if child.label.startswith("@") else (child,))
    if tree.label.startswith("@"):  # its label may name a collapsed child ("@SBAR|S+VP"): not unfolded
        return Tree(tree.label, tuple(children))
    labels = unsplit(tree.label).split("+")
    node = Tree(labels[-1], tuple(children))
    for label in reversed(labels[:-1]):
        node = Tree(label, (node,))
    return node


class PCFG:
    """A treebank grammar with a Viterbi CKY parser; `PCFG.train(trees)`, then `parse(words)`."""

    def __init__(self, binary: Counter, unary: Counter, lexical: Counter, unknown: Counter, tags: Counter):
        lhs_count: Counter = Counter()
        for (a, _, _), c in binary.items():
            lhs_count[a] += c
        for (a, _), c in unary.items():
            lhs_count[a] += c
        self.symbols = sorted({s for rule in binary for s in rule} | {s for rule in unary for s in rule} | set(tags))
        self.index = {s: i for i, s in enumerate(self.symbols)}
        rules = sorted(binary.items())
        self.b_lhs = np.array([self.index[a] for (a, _, _), _ in rules])
        self.b_left = np.array([self.index[b] for (_, b, _), _ in rules])
        self.b_right = np.array([self.index[c] for (_, _, c), _ in rules])
        self.b_logp = np.array([math.log(c / lhs_count[a]) for (a, _, _), c in rules], dtype=np.float32)
        self.starts = np.flatnonzero(np.r_[True, self.b_lhs[1:] != self.b_lhs[:-1]])
        self.unary = [(self.index[a], self.index[t], math.log(c / lhs_count[a])) for (a, t), c in unary.items()]
        self.tag_count = tags
        self.lexicon: dict[str, dict[str, float]] = defaultdict(dict)
        for (t, w), c in lexical.items():
            self.lexicon[w][t] = math.log(c / tags[t])
        self.unknown = unknown
        self.roots = [i for i, s in enumerate(self.symbols) if s.split("+")[0] == TOP]

    @classmethod
    def train(cls, trees: list[Tree], vertical: int = 1, horizontal: int = 1, split_tags: bool = False) -> PCFG:
        """Count rules and words over the training trees (all under TOP), Markovised to the orders given and
        with Klein and Manning's tag splits where `split_tags` (`transform`)."""
        binary, unary, lexical, tags = Counter(), Counter(), Counter(), Counter()
        for tree in trees:
            todo = [transform(tree, vertical, horizontal, split_tags=split_tags)]
            while todo:
                node = todo.pop()
                if node.is_preterminal:
                    lexical[node.label, node.word] += 1
                    tags[node.label] += 1
                    continue
                kids = [c.label for c in node.children]
                if len(kids) == 1:
                    unary[node.label, kids[0]] += 1
                else:
                    binary[node.label, kids[0], kids[1]] += 1
                todo.extend(node.children)
        words = Counter(w for (_, w), c in lexical.items() for _ in range(c))
        unknown = Counter((t, signature(w)) for (t, w), c in lexical.items() if words[w] == 1)
        return cls(binary, unary, lexical, unknown, tags)

    def tag_scores(self, word: str, lenient: bool = False) -> dict[str, float]:
        """log P(word | tag) for the tags the word can take: a known word's own, an unknown word's by its shape.
        lenient, a known word may also take the other splits of its own tags and the tags of its shape, scored as
        an unknown word's; never across EVALB's line between punctuation and words (a punctuation word keeps its
        own tags, a word takes no punctuation tag), which would make EVALB reject the sentence."""
        if word in self.lexicon and not lenient:
            return self.lexicon[word]
        sig = signature(word)
        as_unknown = lambda t: math.log((self.unknown[t, sig] + 1e-3) / self.tag_count[t])  # noqa: E731
        open_tags = {t for t, _ in self.unknown}
        if word not in self.lexicon:
            return {t: as_unknown(t) for t in open_tags}
        own = self.lexicon[word]
        bases = {unsplit(t) for t in own}
        if bases & DELETE_LABELS:
            return own
        more = {t for t in self.tag_count if unsplit(t) in bases} | {
            t for t in open_tags if unsplit(t) not in DELETE_LABELS
        }
        return {**{t: as_unknown(t) for t in more}, **own}

    def parse(self, words: list[str]) -> Tree | None:
        """The most probable tree over words (with the tags the grammar chooses); None if it has none. Where the
        tags a known word took in training admit no tree (tag splits make them few), it is parsed again with
        the tags of its shape allowed as well."""
        return self._parse(words, False) or self._parse(words, True)

    def _parse(self, words: list[str], lenient: bool) -> Tree | None:
        n, N = len(words), len(self.symbols)
        chart = np.full((n, n + 1, N), -np.inf, dtype=np.float32)  # (start, end, symbol): best log-probability
        u_lhs, u_child, u_logp = (np.array(x) for x in zip(*self.unary)) if self.unary else (np.zeros(0, int),) * 3
        for i, word in enumerate(words):
            cell = chart[i, i + 1]
            for tag, logp in self.tag_scores(word, lenient).items():
                cell[self.index[tag]] = logp
            np.maximum.at(cell, u_lhs, cell[u_child] + u_logp.astype(np.float32))  # A -> tag
        for width in range(2, n + 1):
            for i in range(n - width + 1):
                j = i + width
                left, right = chart[i, i + 1 : j], chart[i + 1 : j, j]  # (K, N): split points i+1 .. j-1
                best = (left[:, self.b_left] + right[:, self.b_right]).max(axis=0) + self.b_logp  # (R,)
                chart[i, j, self.b_lhs[self.starts]] = np.maximum.reduceat(best, self.starts)
        root = max(self.roots, key=lambda r: chart[0, n, r], default=None)
        if root is None or not np.isfinite(chart[0, n, root]):
            return None
        return untransform(self._build(chart, words, 0, n, root, lenient))

    def _build(self, chart: np.ndarray, words: list[str], i: int, j: int, a: int, lenient: bool) -> Tree:
        """The best derivation of symbol a over words[i:j], read back from the chart."""
        label = self.symbols[a]
        if j == i + 1:
            lexical = self.tag_scores(words[i], lenient).get(label, -np.inf)
            if label in self.tag_count and np.isclose(chart[i, j, a], lexical):
                return Tree(label, word=words[i])
            _, tag = max((chart[i, j, t] + lp, t) for lhs, t, lp in self.unary if lhs == a)
            return Tree(label, (Tree(self.symbols[tag], word=words[i]),))
        group = np.searchsorted(self.starts, np.searchsorted(self.b_lhs, a))
        rules = slice(self.starts[group], self.starts[group + 1] if group + 1 < len(self.starts) else len(self.b_lhs))
        left, right = chart[i, i + 1 : j], chart[i + 1 : j, j]
        scores = left[:, self.b_left[rules]] + right[:, self.b_right[rules]] + self.b_logp[rules]  # (K, rules)
        k, r = np.unravel_index(int(np.argmax(scores)), scores.shape)
        b, c = self.b_left[rules][r], self.b_right[rules][r]
        return Tree(
            label,
            (self._build(chart, words, i, i + 1 + k, b, lenient), self._build(chart, words, i + 1 + k, j, c, lenient)),
        )
