"""The terms memory ranking compares: what a note or a message is about.

Text is case-folded and cut into runs of letters and digits, with the
combining marks that follow them (many scripts write vowels so). A run in
a script written without spaces (Chinese, Japanese, Thai and their kin)
gives its overlapping character pairs, so a question in such a script
still meets the notes that share its words. Every other run is a word: English stopwords
(the Snowball project's list, plus the fragments its contractions leave once
apostrophes split them) and single letters go, and the rest are reduced to
their Snowball (Porter2) stem, so "releases" meets "release".

The stemmer is PyStemmer's C implementation, loaded on first use: a client
command that never ranks memory never loads it. The result depends on the
text alone, never on the notes around it, so an index built on any host and
after any restart holds the same terms.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from functools import cache, lru_cache

_RUN = re.compile(r"[^\W_]+")
# Scripts written without spaces between words: CJK ideographs, kana, Thai,
# Lao, Khmer, Myanmar. Hangul is written with spaces and stays a word.
_SPACELESS = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+"
)

# The Snowball English stop list (snowballstem.org/algorithms/english/stop.txt),
# with the fragments its contractions leave once apostrophes split a word.
STOPWORDS = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "her",
        "hers",
        "herself",
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "would",
        "should",
        "could",
        "ought",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "cannot",
        "can",
        "will",
        "just",
        "isn",
        "aren",
        "wasn",
        "weren",
        "hasn",
        "haven",
        "hadn",
        "doesn",
        "don",
        "didn",
        "won",
        "wouldn",
        "shan",
        "shouldn",
        "couldn",
        "mustn",
        "let",
        "ll",
        "ve",
        "re",
    ]
)


def terms(text: str) -> list[str]:
    """The terms of *text* in order, repeats kept."""
    return [term for term, _ in _analysed(text)]


@lru_cache(maxsize=4096)
def held_terms(text: str) -> frozenset[str]:
    """The distinct terms of a note's *text*: what it lends feedback. The
    best notes of a conversation's turns are often the same few, so they
    are kept."""
    return frozenset(terms(text))


def term_forms(text: str) -> dict[str, str]:
    """Each term of *text* with the first word it came from, as written
    (case-folded): what a reader recognises where the term is a stem."""
    forms: dict[str, str] = {}
    for term, form in _analysed(text):
        forms.setdefault(term, form)
    return forms


def _analysed(text: str) -> Iterator[tuple[str, str]]:
    if text.isascii():
        # Case folding is lowering in ASCII, and no run in it is spaceless.
        for run in _RUN.findall(text.lower()):
            if term := _word_term(run):
                yield term, run
        return
    text = unicodedata.normalize("NFKC", text)
    for run in _marked_run().findall(text.casefold()):
        at = 0
        for spaceless in _SPACELESS.finditer(run):
            yield from _words(run[at : spaceless.start()])
            chars = spaceless.group()
            if len(chars) == 1:
                yield chars, chars
            for first in range(len(chars) - 1):
                pair = chars[first : first + 2]
                yield pair, pair
            at = spaceless.end()
        yield from _words(run[at:])


def _words(run: str) -> Iterator[tuple[str, str]]:
    if run and (term := _word_term(run)):
        yield term, run


# Messages and notes reuse a working vocabulary: most words are a lookup.
@lru_cache(maxsize=1 << 16)
def _word_term(word: str) -> str:
    """The term of *word*, a run of one script that has spaces; empty for a
    stopword or a single letter (digits stay)."""
    if word in STOPWORDS or (len(word) == 1 and not word.isdigit()):
        return ""
    return _stemmer()(word)


@cache
def _marked_run() -> re.Pattern[str]:
    """A run of letters and digits, with the combining marks after each:
    Devanagari, Bengali, Tamil and their kin write vowels as marks, which
    are no letters, and would otherwise cut every word into single letters.
    Built from the Unicode database on first use, by non-ASCII text only
    (marks lie in planes 0, 1 and 14)."""
    category = unicodedata.category
    marks: list[str] = []
    for first, end in ((0, 0x20000), (0xE0000, 0xF0000)):
        for code in range(first, end):
            if category(chr(code))[0] == "M":
                if marks and ord(marks[-1][-1]) == code - 1:
                    marks[-1] = marks[-1][0] + chr(code)
                else:
                    marks.append(chr(code))
    spans = "".join(m if len(m) == 1 else f"{m[0]}-{m[-1]}" for m in marks)
    return re.compile(f"[^\\W_](?:[^\\W_]|[{spans}])*")


@cache
def _stemmer() -> Callable[[str], str]:
    import Stemmer

    # _word_term keeps the words seen: the stemmer's own cache would hold them twice.
    stemmer = Stemmer.Stemmer("english", 0)
    stem: Callable[[str], str] = stemmer.stemWord
    return stem
