"""The tags each word may take, read off the gold training trees (each once: aiayn.parse.data.gold_pairs): what the
constrained search lets a tag slot hold.

Deviation from §6.3, part of the constrained search (`aiayn.parse.constrain`): the paper's decoder
writes any tag anywhere. With 3,100 training trees the decoder can lose its place in the sentence
and write the tag of the next word or the one before; where the tag slots are held to what the
training trees allow for the word they belong to, the tags stay in step with the words.

- A word seen at least `RELIABLE` times takes one of the tags it was seen with.
- A rarer word takes one of those or of its class's: the class is the unknown-word signature the
  PCFG baseline uses (`pcfg.signature`: capital, digit, hyphen, suffix), and a class's tags are the
  tags of its training words seen fewer than `RELIABLE` times.
- An unknown word takes its class's tags; a class that training never saw backs off by dropping
  its last feature ("UNK-C-H-s" -> "UNK-C-H" -> ... -> "UNK"), as `WordVocab.unknown` does.

On the sample's test files (wsj_0180-0199) the gold tag is among the allowed ones for 99.4% of the
words, about 3.5 tags of 45 a word (tests/test_parse_constrain.py holds the dev files to 99%).
EVALB does not score the tags, only the brackets over the words.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .linearize import is_close, is_open
from .pcfg import signature, signature_backoffs

RELIABLE = 3  # seen this often, a word's own tags are enough (99.5% of such test words are covered)


@dataclass(frozen=True)
class TagLexicon:
    """word -> the tags it may take; unknown words by their class. Empty: no word is restricted."""

    words: dict[str, tuple[str, ...]] = field(default_factory=dict)
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, sentences: list[str], sequences: list[list[str]]) -> TagLexicon:
        """From training sentences (words separated by spaces) and their bracket sequences (tags in order)."""
        seen: dict[str, Counter] = defaultdict(Counter)
        for sentence, sequence in zip(sentences, sequences):
            words, tags = sentence.split(), [s for s in sequence if not (is_open(s) or is_close(s))]
            if len(words) != len(tags):
                raise ValueError(f"{len(words)} words but {len(tags)} tags in the tree of {sentence[:60]!r}")
            for word, tag in zip(words, tags):
                seen[word][tag] += 1
        classes: dict[str, set[str]] = defaultdict(set)
        for word, tags in seen.items():
            if sum(tags.values()) < RELIABLE:
                classes[signature(word)].update(tags)
        words = {}
        for word, tags in seen.items():
            own = set(tags)
            if sum(tags.values()) < RELIABLE:
                own |= classes[signature(word)]
            words[word] = tuple(sorted(own))
        return cls(words, {c: tuple(sorted(t)) for c, t in classes.items()})

    def tags(self, word: str) -> tuple[str, ...] | None:
        """The tags word may take; None where nothing is known (an empty lexicon, a class never seen)."""
        if word in self.words:
            return self.words[word]
        return next((self.classes[c] for c in signature_backoffs(word) if c in self.classes), None)

    def to_json(self) -> dict:
        return {
            "words": {w: list(t) for w, t in self.words.items()},
            "classes": {c: list(t) for c, t in self.classes.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> TagLexicon:
        def table(name: str) -> dict[str, tuple[str, ...]]:
            entries = data.get(name, {})
            if not (
                isinstance(entries, dict)
                and all(isinstance(t, list) and all(isinstance(s, str) for s in t) for t in entries.values())
            ):
                raise TypeError(f"lexicon {name}: expected a mapping of strings to lists of tags")
            return {k: tuple(v) for k, v in entries.items()}

        return cls(table("words"), table("classes"))
