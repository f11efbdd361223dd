"""Labelled bracketing precision, recall and F1 as EVALB computes them with COLLINS.prm (§6.3).

EVALB (Sekine & Collins 1997) is the scorer behind every WSJ F1, the paper's 91.3 included. With
COLLINS.prm it reads one tree per line and, for each sentence:
  - deletes the words tagged -NONE- , : `` '' . (by each tree's own tags), and the TOP bracket;
  - counts the remaining constituents as (start, end, label) spans over the remaining words,
    preterminals excluded, empty spans excluded, labels cut at the first '-' or '=';
  - takes ADVP and PRT as the same label;
  - rejects the sentence (an error, left out of the totals) when gold and test differ in length
    or words, or a line cannot be read; skips it when the test line has no words.
Totals sum the brackets over sentences; "len<=40" counts only sentences of at most 40 gold words
(-NONE- not counted, punctuation counted). Written to agree with evalb.c; the tests hold it to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})  # COLLINS.prm DELETE_LABEL
DELETE_FOR_LENGTH = frozenset({"-NONE-"})  # DELETE_LABEL_FOR_LENGTH
EQUAL_LABELS = {"PRT": "ADVP"}  # EQ_LABEL ADVP PRT
CUTOFF_LEN = 40


@dataclass
class Bracketing:
    """One line as EVALB reads it: the kept words and tags, the labelled spans, the length for the cutoff."""

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    spans: Counter = field(default_factory=Counter)  # (start, end, label) -> count, deleted ones left out
    length: int = 0  # words not tagged -NONE- (punctuation included)
    error: str | None = None


def _is_terminator(c: str) -> bool:
    return c.isspace() or c in "()"


def read_bracketing(line: str) -> Bracketing:
    """Read a bracketed tree the way evalb.c's read_line does."""
    b, raw, stack, i, n = Bracketing(), [], [], 0, len(line)
    while i < n:
        c = line[i]
        if c.isspace():
            i += 1
        elif c == "(":
            j = i + 1
            while j < n and not _is_terminator(line[j]):
                j += 1
            label, i = line[i + 1 : j], j
            if j < n and line[j].isspace():  # "(TAG word)" is a terminal
                k = j
                while k < n and line[k].isspace():
                    k += 1
                m = k
                while m < n and not _is_terminator(line[m]):
                    m += 1
                if m < n and line[m] == ")":
                    b.length += label not in DELETE_FOR_LENGTH
                    if label not in DELETE_LABELS:
                        b.words.append(line[k:m])
                        b.tags.append(label)
                    i = m + 1
                    continue
                if m == n or line[m] != "(" or m > k:
                    b.error = b.error or "more than two elements in a bracket"
                    return b
            stack.append((len(b.words), label))
        elif c == ")":
            if not stack:
                b.error = "unbalanced brackets (too many ')')"
                return b
            start, label = stack.pop()
            raw.append((start, len(b.words), label))
            i += 1
        else:
            b.error = f"unexpected {c!r} at character {i + 1}"
            return b
    if stack:
        b.error = "unbalanced brackets (too many '(')"
    for start, end, label in raw:
        label = _modify_label(label)
        if start < end and label not in DELETE_LABELS:  # zero-width brackets and TOP are not counted
            b.spans[(start, end, EQUAL_LABELS.get(label, label))] += 1
    return b


def _modify_label(label: str) -> str:
    """evalb.c's modify_label: cut at the first '-' or '=' (so -LRB- becomes "")."""
    for k, c in enumerate(label):
        if c in "-=":
            return label[:k]
    return label


@dataclass(frozen=True)
class SentenceScore:
    status: str  # "ok", "error" (left out of the totals) or "skip" (the test line has no words)
    length: int  # gold words for the cutoff
    gold: int = 0  # gold brackets
    test: int = 0  # test brackets
    matched: int = 0
    words: int = 0
    correct_tags: int = 0
    reason: str = ""


def score_sentence(gold_line: str, test_line: str) -> SentenceScore:
    """One sentence, as calc_result in evalb.c."""
    gold, test = read_bracketing(gold_line), read_bracketing(test_line)
    if not test.words:
        return SentenceScore("skip", gold.length, reason="no words in the test tree")
    if gold.error or test.error:
        reason = f"gold: {gold.error}" if gold.error else f"test: {test.error}"
        return SentenceScore("error", gold.length, reason=reason)
    if len(gold.words) != len(test.words):
        return SentenceScore("error", gold.length, reason=f"length mismatch ({len(gold.words)}|{len(test.words)})")
    for g, t in zip(gold.words, test.words):
        if g != t:
            return SentenceScore("error", gold.length, reason=f"words mismatch ({g}|{t})")
    matched = sum((gold.spans & test.spans).values())
    tags = sum(EQUAL_LABELS.get(g, g) == EQUAL_LABELS.get(t, t) for g, t in zip(gold.tags, test.tags))
    return SentenceScore(
        "ok", gold.length, sum(gold.spans.values()), sum(test.spans.values()), matched, len(gold.words), tags
    )


@dataclass(frozen=True)
class Summary:
    """EVALB's summary block over a set of sentences; percentages."""

    sentences: int
    errors: int
    skipped: int
    recall: float
    precision: float
    f1: float
    complete_match: float
    tagging_accuracy: float

    @property
    def valid(self) -> int:
        return self.sentences - self.errors - self.skipped


def summarize(scores: list[SentenceScore]) -> Summary:
    ok = [s for s in scores if s.status == "ok"]
    gold, test, matched = (sum(getattr(s, k) for s in ok) for k in ("gold", "test", "matched"))
    words, tags = sum(s.words for s in ok), sum(s.correct_tags for s in ok)
    recall = 100.0 * matched / gold if gold else 0.0
    precision = 100.0 * matched / test if test else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    complete = sum(s.gold == s.test == s.matched for s in ok)
    return Summary(
        len(scores),
        sum(s.status == "error" for s in scores),
        sum(s.status == "skip" for s in scores),
        recall,
        precision,
        f1,
        100.0 * complete / len(ok) if ok else 0.0,
        100.0 * tags / words if words else 0.0,
    )


@dataclass(frozen=True)
class EvalbResult:
    all: Summary
    short: Summary  # sentences of at most CUTOFF_LEN gold words
    sentences: list[SentenceScore]

    def to_dict(self) -> dict:
        """The JSON of `aiayn evaluate --task parse --json`."""
        return {**_summary_dict(self.all), f"len<={CUTOFF_LEN}": _summary_dict(self.short)}


def _summary_dict(s: Summary) -> dict:
    return {
        "precision": round(s.precision, 4),
        "recall": round(s.recall, 4),
        "f1": round(s.f1, 4),
        "complete_match": round(s.complete_match, 4),
        "tagging_accuracy": round(s.tagging_accuracy, 4),
        "sentences": s.sentences,
        "errors": s.errors,
        "skipped": s.skipped,
    }


def evalb(gold: Iterable[str], test: Iterable[str], cutoff: int = CUTOFF_LEN) -> EvalbResult:
    """Score test trees against gold trees, one per line, in order (the same number of lines)."""
    gold, test = list(gold), list(test)
    if len(gold) != len(test):
        raise ValueError(f"{len(gold)} gold trees but {len(test)} test trees")
    scores = [score_sentence(g, t) for g, t in zip(gold, test)]
    return EvalbResult(summarize(scores), summarize([s for s in scores if s.length <= cutoff]), scores)
