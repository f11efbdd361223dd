"""Tree-constrained search: a StepModel that lets the decoder write only well-formed trees.

Deviation from §6.3, an option (`aiayn parse --constrained`): the paper searches without
constraints and relies on the model. Here each hypothesis carries its open brackets and the number
of tags written, and the next token's log-probabilities are set to -inf where it would break the
tree: a tag outside the root bracket; a closing bracket other than the innermost open one's, or
right after it opened, or one that would close the root before every word has a tag; a tag or an
opening bracket once every word has its tag; </s> before the tree is complete. Any search (beam,
greedy) runs on it unchanged.

The gold training trees (each once, no silver ones) bound the shape (`TreeShape`, kept with the
target vocabulary): no more opening brackets in a row, and no deeper nesting, than any of them has
(6 and 28 in the sample's training files). Without that bound a model that has lost its place in the sentence
opens brackets over and over ("(NP (NP (NP ...") until the length limit. And a constituent begins
and ends with a tag that training saw its label begin or end with: "(NP" only where the next word
may take a tag that begins an NP (then only such a tag), ")NP" only after such a last tag (any,
once every word has its tag, so that every hypothesis can still close). Of the 4,592 gold test
constituents 4 break those two tables; of the 5,446 that a 70-minute model wrote without them, 270
(tests/test_parse_constrain.py). Last, a constituent holds directly only opening brackets and tags
that its label held in training (`TreeShape.children`; the root's place, "TOP", only the labels
training trees have at the root): at most 10 of the test trees' 10,311 parent-child pairs are unseen.

A length budget keeps every hypothesis finishable: given the search's limit (input length + 300,
§6.3), an opening bracket is allowed only while the symbols left could still tag the remaining
words, close every open bracket and end with </s>. So a hypothesis that strays ends as a tree at the
limit instead of being cut there (the root is always allowed, so a limit too short for any tree cuts).

The words themselves anchor the tags (`word_rules`): the k-th tag written is word k's, so where the
treebank fixes a word's tag (punctuation, `FIXED_TAGS`) only that tag may come next, and a word with
a letter or a digit may not get a punctuation tag. These are the rules `repair` applies afterwards
(it retags such words); inside the search they also keep the tags in step with the words, as a
comma or a full stop marks where the decoder is in the sentence. With the training trees' tag
lexicon (`aiayn.parse.lexicon`, kept with the target vocabulary) every word is held to the tags
training saw it with, or its class's, so every tag slot marks the place.

Dimension legend: N rows (hypotheses), B sentences, W words, V target symbols, D the deepest nesting allowed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..decode.step import StepModel, search_limits
from .lexicon import TagLexicon
from .linearize import FIXED_TAGS, PUNCTUATION, is_close, is_open

MAX_DEPTH = 128


def tag_mask(symbols: list[str]) -> Tensor:
    """(V,) bool: the symbols that are POS tags (no bracket, no <special>)."""
    return torch.tensor([not (is_open(s) or is_close(s) or s.startswith("<")) for s in symbols])


FREE, NO_PUNCTUATION = 0, 1  # the first two tag sets of every WordRules: any tag; any tag but punctuation's


class WordRules(NamedTuple):
    """Which tags each word may take: rules[b, k] is the row of `sets` that word k of sentence b takes."""

    rules: Tensor  # (B, W) long; FREE past a sentence's end
    sets: Tensor  # (S, V) bool, the distinct tag sets; FREE and NO_PUNCTUATION first


def word_rules(sentences: list[list[str]], symbols: list[str], lexicon: TagLexicon | None = None) -> WordRules:
    """The tag sets of the words of each sentence.

    A word whose tag the treebank fixes (punctuation, FIXED_TAGS) takes only that tag; a word with a
    letter or digit takes no punctuation tag (EVALB would delete it); with a lexicon, a word takes
    only the tags the training trees allow it (`aiayn.parse.lexicon`), within those rules."""
    ids = {s: i for i, s in enumerate(symbols)}
    tag = tag_mask(symbols)  # (V,)
    punctuation = torch.tensor([s in PUNCTUATION for s in symbols]) & tag
    sets, index = [tag, tag & ~punctuation], {}  # FREE, NO_PUNCTUATION

    def set_of(allowed: Tensor) -> int:
        key = tuple(allowed.nonzero()[:, 0].tolist())
        if key not in index:
            index[key] = len(sets)
            sets.append(allowed)
        return index[key]

    rules = torch.full((len(sentences), max((len(w) for w in sentences), default=0) or 1), FREE, dtype=torch.long)
    for b, words in enumerate(sentences):
        for k, word in enumerate(words):
            fixed = FIXED_TAGS.get(word)
            if fixed is not None:
                if fixed in ids:
                    rules[b, k] = set_of(torch.arange(len(symbols)) == ids[fixed])
                continue
            rule = NO_PUNCTUATION if any(c.isalnum() for c in word) else FREE
            known = [ids[t] for t in (lexicon.tags(word) or ()) if t in ids] if lexicon is not None else []
            allowed = sets[rule].clone()
            if known:
                allowed &= torch.zeros(len(symbols), dtype=torch.bool).index_fill_(0, torch.tensor(known), True)
            rules[b, k] = set_of(allowed) if allowed.any() and known else rule
    return WordRules(rules, torch.stack(sets))


@dataclass
class TreeState:
    """The inner model's cache and, per row, how far its tree has got."""

    cache: Any
    depth: Tensor  # (N,) brackets open
    tags: Tensor  # (N,) tags written
    words: Tensor  # (N,) words of the row's sentence
    rules: Tensor  # (N, W) the tag set of each word of the row's sentence (WordRules.rules)
    stack: Tensor  # (N, D) the closing symbol each open bracket expects, innermost at depth - 1
    open_run: Tensor  # (N,) opening brackets written in a row just now (0: the last token opened none)
    written: Tensor  # (N,) symbols written so far
    limit: Tensor  # (N,) the most symbols the row's sentence may have, </s> included
    last_tag: Tensor  # (N,) the last tag written (pad before the first)
    run_first: Tensor  # (N, V) the tags that may begin every bracket of the opening run just written

    def index_select(self, index: Tensor, sentences: Tensor | None = None) -> TreeState:
        return TreeState(
            self.cache.index_select(index, sentences),
            self.depth[index],
            self.tags[index],
            self.words[index],
            self.rules[index],
            self.stack[index],
            self.open_run[index],
            self.written[index],
            self.limit[index],
            self.last_tag[index],
            self.run_first[index],
        )


@dataclass(frozen=True)
class TreeShape:
    """The shapes of the training trees: the most opening brackets in a row, the deepest nesting, for
    each label the tags its constituents begin and end with, and the symbols (opening brackets and
    tags) its constituents hold directly ("TOP": the root's); empty tables allow anything."""

    open_run: int = MAX_DEPTH
    depth: int = MAX_DEPTH - 1
    first: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "NP" -> ("CD", "DT", ...)
    last: dict[str, tuple[str, ...]] = field(default_factory=dict)
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "QP" -> ("$", "(QP", "CD", ...)

    @classmethod
    def of(cls, sequences: list[list[str]]) -> TreeShape:
        open_run = depth = 0
        first, last, children = defaultdict(set), defaultdict(set), defaultdict(set)
        for sequence in sequences:
            run, d, waiting, tag, stack = 0, 0, [], None, ["TOP"]  # waiting: labels opened since the last tag
            for symbol in sequence:
                run = run + 1 if is_open(symbol) else 0
                d += is_open(symbol) - is_close(symbol)
                open_run, depth = max(open_run, run), max(depth, d)
                if is_open(symbol):
                    children[stack[-1]].add(symbol)
                    waiting.append(symbol[1:])
                    stack.append(symbol[1:])
                elif is_close(symbol):
                    if tag is not None:
                        last[symbol[1:]].add(tag)
                    if len(stack) > 1:
                        stack.pop()
                else:
                    children[stack[-1]].add(symbol)
                    tag = symbol
                    for label in waiting:
                        first[label].add(tag)
                    waiting = []
        return cls(
            min(max(open_run, 1), MAX_DEPTH),
            min(max(depth, 1), MAX_DEPTH - 1),
            {k: tuple(sorted(v)) for k, v in sorted(first.items())},
            {k: tuple(sorted(v)) for k, v in sorted(last.items())},
            {k: tuple(sorted(v)) for k, v in sorted(children.items())},
        )

    def to_json(self) -> dict:
        """The bounds, and the edge tags where known (an older shape has none: its file stays as it was)."""
        out: dict = {"open_run": self.open_run, "depth": self.depth}
        for name in ("first", "last", "children"):
            if getattr(self, name):
                out[name] = {k: list(v) for k, v in getattr(self, name).items()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> TreeShape:
        edges = {
            name: {str(k): tuple(str(t) for t in v) for k, v in data.get(name, {}).items()}
            for name in ("first", "last", "children")
        }
        return cls(**{k: int(v) for k, v in data.items() if k in ("open_run", "depth")}, **edges)

    def edge_table(self, symbols: list[str], side: str) -> Tensor:
        """(V, V) bool: [tag, bracket] True where a constituent of the bracket's label may begin
        (side "first", opening brackets) or end (side "last", closing brackets) with that tag;
        every tag for a label the table does not name, and every row that is not a tag."""
        table, ids = (self.first if side == "first" else self.last), {s: i for i, s in enumerate(symbols)}
        bracket = is_open if side == "first" else is_close
        is_tag = tag_mask(symbols)
        out = torch.ones(len(symbols), len(symbols), dtype=torch.bool)
        for j, symbol in enumerate(symbols):
            if bracket(symbol) and symbol[1:] in table:
                out[is_tag, j] = False
                out[[ids[t] for t in table[symbol[1:]] if t in ids], j] = True
        return out

    def child_table(self, symbols: list[str], root: int) -> Tensor:
        """(V, V) bool: [parent, symbol] True where a constituent may hold the opening bracket or tag
        directly; the parent is its closing bracket's id, or `root` for the root's place (TOP);
        every symbol for a parent the table does not name, and every symbol that is no bracket or tag."""
        ids = {s: i for i, s in enumerate(symbols)}
        holdable = torch.tensor([is_open(s) or not (is_close(s) or s.startswith("<")) for s in symbols])
        out = torch.ones(len(symbols), len(symbols), dtype=torch.bool)
        for i, symbol in [(root, "(TOP"), *((i, s) for i, s in enumerate(symbols) if is_close(s))]:
            if symbol[1:] in self.children:
                out[i, holdable] = False
                out[i, [ids[c] for c in self.children[symbol[1:]] if c in ids]] = True
        return out


class TreeConstrainedStep:
    """inner (a StepModel over ParseTokenizer's symbols) with the tree rules applied to each step.

    config: the search's settings, for its length limits (the budget); None for no budget.
    shape: the training trees' bounds; the default bounds nothing but MAX_DEPTH."""

    def __init__(
        self,
        inner: StepModel,
        symbols: list[str],
        words: Tensor,
        rules: WordRules | None = None,
        config: DecodeConfig | None = None,
        shape: TreeShape = TreeShape(),
    ):
        self.inner, self.words, self.config, self.shape = inner, words, config, shape  # words (B,): word counts
        rules = word_rules([[]] * len(words), symbols) if rules is None else rules
        self.rules, self.tag_sets = rules  # (B, W), (S, V)
        self.bos_id, self.eos_id, self.pad_id = inner.bos_id, inner.eos_id, inner.pad_id
        self.banned, self.max_len = inner.banned, inner.max_len
        ids = {s: i for i, s in enumerate(symbols)}
        self.is_open = torch.tensor([is_open(s) for s in symbols])  # (V,)
        self.is_close = torch.tensor([is_close(s) for s in symbols])
        special = {inner.bos_id, inner.eos_id, inner.pad_id} | {i for i, s in enumerate(symbols) if s.startswith("<")}
        self.is_tag = ~(self.is_open | self.is_close) & torch.tensor([i not in special for i in range(len(symbols))])
        self.close_of = torch.tensor([ids.get(")" + s[1:], -1) if is_open(s) else -1 for s in symbols])  # (V,)
        self.begins, self.ends = shape.edge_table(symbols, "first"), shape.edge_table(symbols, "last")  # (V, V) each
        self.begun_by = self.begins.t().contiguous()  # (V, V): [bracket, tag], for the step's row lookups
        self.begins_count = self.begins.float()  # for the product that counts a row's tags that may begin each label
        self.holds = shape.child_table(symbols, inner.pad_id)  # (V, V), the root's row at pad

    def start(self, src: Tensor) -> TreeState:
        B, device = src.size(0), src.device
        self._to(device)
        zeros = torch.zeros(B, dtype=torch.long, device=device)
        limit = (
            search_limits(self, src, self.config)
            if self.config is not None
            else torch.full((B,), torch.iinfo(torch.long).max // 2, device=device)
        )
        return TreeState(
            self.inner.start(src),
            zeros,
            zeros.clone(),
            self.words.to(device),
            self.rules.to(device),
            torch.zeros(B, MAX_DEPTH, dtype=torch.long, device=device),
            zeros.clone(),
            zeros.clone(),
            limit.to(device),
            torch.full_like(zeros, self.pad_id),
            torch.ones(B, self.is_tag.size(0), dtype=torch.bool, device=device),
        )

    def _to(self, device: torch.device) -> None:
        for name in (
            "is_open",
            "is_close",
            "is_tag",
            "close_of",
            "tag_sets",
            "begun_by",
            "begins_count",
            "ends",
            "holds",
        ):
            setattr(self, name, getattr(self, name).to(device))

    def step(self, tokens: Tensor, state: TreeState) -> tuple[Tensor, TreeState]:
        """tokens (N, 1): the last token of each row -> masked log-probabilities (N, V), the next state."""
        token = tokens[:, 0]
        opened, closed = self.is_open[token], self.is_close[token]  # (N,) each; </s> and <s> are neither
        rows = opened.nonzero()[:, 0]
        state.stack[rows, state.depth[rows].clamp(max=MAX_DEPTH - 1)] = self.close_of[token[rows]]
        # A row whose every choice was masked (-inf: a beam with fewer legal candidates than slots) can
        # still be extended by the search; it never wins, and the clamp keeps its state in range.
        depth = (state.depth + opened.long() - closed.long()).clamp(0, MAX_DEPTH - 1)
        tags = state.tags + self.is_tag[token].long()
        written = state.written + (token != self.bos_id).long()
        log_probs, cache = self.inner.step(tokens, state.cache)  # the inner model's buffer, masked in place
        run = (state.open_run + 1) * opened.long()  # opening brackets in a row
        last_tag = torch.where(self.is_tag[token], token, state.last_tag)
        run_first = torch.where(opened[:, None], state.run_first & self.begun_by[token], True)  # (N, V)
        nxt = TreeState(
            cache, depth, tags, state.words, state.rules, state.stack, run, written, state.limit, last_tag, run_first
        )
        log_probs.masked_fill_(~self.allowed(nxt), -math.inf)
        return log_probs, nxt

    def allowed(self, s: TreeState) -> Tensor:
        """(N, V) bool: the tokens each row may write next.

        A row that the training trees' tables (edge tags, what a label holds) leave no token is given
        the tokens the other rules allow instead: the tables narrow the search, they never end a
        hypothesis (the other rules always leave a way to finish the tree)."""
        allowed = self._allowed(s, tables=True)
        stuck = ~allowed.any(dim=1)
        if stuck.any():
            allowed[stuck] = self._allowed(s, tables=False)[stuck]
        return allowed

    def _allowed(self, s: TreeState, tables: bool) -> Tensor:
        rows_n = torch.arange(s.depth.size(0), device=s.depth.device)
        done = s.tags >= s.words  # (N,) every word has its tag
        rule = s.rules[rows_n, s.tags.clamp(max=s.rules.size(1) - 1)]  # (N,) the next word's tag set
        tags = self.tag_sets[rule] & self.is_tag  # (N, V)
        top = s.stack[rows_n, (s.depth - 1).clamp(min=0)]  # (N,) the innermost open bracket's closing symbol
        if tables:
            tags &= s.run_first  # a tag each bracket just opened may begin with
        allowed = (tags & (s.depth > 0)[:, None]) | self.is_open[None, :]  # (N, V): one root
        if tables:
            allowed &= (
                tags.float() @ self.begins_count > 0
            ) | ~self.is_open  # an opening bracket whose label may begin so
            parent = torch.where(s.depth > 0, torch.where(top >= 0, top, self.bos_id), self.pad_id)  # <s>'s row: any
            allowed &= self.holds[parent]  # what that constituent (or the root's place) may hold
        allowed &= ~done[:, None]
        # The budget: after this bracket, the remaining tags, depth + 1 closes and </s> must still fit.
        fits = s.written + 1 + (s.words - s.tags) + s.depth + 1 + 1 <= s.limit
        bounds = (s.depth < self.shape.depth) & (s.open_run < self.shape.open_run)  # as deep as training trees go
        allowed[:, self.is_open] &= (bounds & (fits | (s.depth == 0)))[:, None]
        may_close = (s.depth > 0) & (s.open_run == 0) & ((s.depth > 1) | done)  # the root closes last
        if tables:  # a closing bracket whose label may end with the last tag (any once every word has its tag)
            may_close &= self.ends[s.last_tag, top.clamp(min=0)] | done
        rows = (may_close & (top >= 0)).nonzero()[:, 0]
        allowed[rows, top[rows]] = True
        allowed[:, self.eos_id] = done & (s.depth == 0)
        return allowed
