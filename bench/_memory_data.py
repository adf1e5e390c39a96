"""The memory benchmark's data: conversations of notes, questions with the
notes that answer them.

Three sources, all in one shape (``Conversation``):

- ``bench/data/memory-dev.json.xz``: a subset of LongMemEval_S (cleaned),
  public, MIT; one conversation per question, its own haystack of about 50
  chat sessions (see bench/data/PROVENANCE-memory.md);
- a LoCoMo file (``locomo10.json`` from snap-research/locomo), read when
  given with ``--locomo``: the held-out benchmark, never developed against;
- generated cases (``generated``), each built to test one property of a
  ranking: paraphrases, near-duplicate notes, long notes among short ones,
  several channels.
"""

from __future__ import annotations

import json
import lzma
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ("Conversation", "Question", "dev_conversations", "generated", "locomo")

DEV_DATA = Path(__file__).resolve().parent / "data" / "memory-dev.json.xz"


@dataclass
class Question:
    text: str
    evidence: list[str]  # note keys
    category: str
    channel: str | None = None


@dataclass
class Conversation:
    """Notes in the order they were written, each (key, text, channel)."""

    id: str
    notes: list[tuple[str, str, str | None]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def dev_conversations(path: Path = DEV_DATA) -> list[Conversation]:
    """Conversations in this module's own JSON shape, xz-compressed or not."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as data:
        raw = json.load(data)
    conversations = []
    for entry in raw:
        conversation = Conversation(entry["id"])
        for turn in entry["turns"]:
            text = f"{turn['date']} {turn['speaker']}: {turn['text']}".strip()
            conversation.notes.append((turn["id"], text, None))
        for question in entry["questions"]:
            conversation.questions.append(
                Question(question["question"], question["evidence"], question["category"])
            )
        conversations.append(conversation)
    return conversations


def locomo(path: Path, facts: bool) -> list[Conversation]:
    """LoCoMo's conversations: dialogue turns as notes, or (*facts*) its
    annotated observations (one note per fact, standing for the turns it
    cites; a question's evidence is then the turns some fact cites), each
    note "<date> <speaker>: <text>". *path* is
    ``locomo10.json`` (a list of samples) or a folder of one file per
    sample, as its zip in the repository holds them (each sample's fields
    at the top level)."""
    if path.is_dir():
        files = sorted(path.glob("*.json"), key=lambda f: f.stem)
        samples = [json.loads(f.read_text(encoding="utf-8")) | {"sample_id": f.stem} for f in files]
    else:
        samples = json.loads(path.read_text(encoding="utf-8"))
    return [_locomo_sample(sample, facts) for sample in samples]


_SESSION = re.compile(r"session_(\d+)")


def _locomo_sample(sample: dict[str, Any], facts: bool) -> Conversation:
    sessions = sample.get("conversation", sample)
    observations = sample.get("observation", sample)
    conversation = Conversation(str(sample.get("sample_id", "")))
    numbers = sorted(int(m.group(1)) for key in sessions if (m := _SESSION.fullmatch(key)))
    for number in numbers:
        date = sessions.get(f"session_{number}_date_time", "")
        if facts:
            observed = observations.get(f"session_{number}_observation", {})
            for speaker, said in observed.items():
                for text, evidence in said:
                    # One note per fact; it stands for every turn it cites.
                    keys = evidence if isinstance(evidence, list) else [evidence]
                    conversation.notes.append(("|".join(keys), f"{date} {speaker}: {text}", None))
        else:
            for turn in sessions[f"session_{number}"]:
                text = f"{date} {turn['speaker']}: {turn['text']}"
                conversation.notes.append((turn["dia_id"], text, None))
    # With facts as notes, a question's evidence is the turns some fact
    # cites: a turn no fact was drawn from can be in no block.
    cited = {turn for key, _, _ in conversation.notes for turn in key.split("|")}
    for qa in sample["qa"]:
        evidence = [e for e in qa.get("evidence", []) if isinstance(e, str)]
        if facts:
            evidence = [e for e in evidence if e in cited]
        if evidence and str(qa.get("category")) != "5":
            conversation.questions.append(Question(qa["question"], evidence, str(qa["category"])))
    return conversation


def generated(seed: int = 2026) -> list[Conversation]:
    """Cases built to test one property each; see each builder."""
    rng = random.Random(seed)
    return [
        _paraphrases(rng),
        _near_duplicates(rng),
        _long_among_short(rng),
        _channels(rng),
    ]


_TOPICS = [
    ("deploy", "staging", "rollback", "pipeline"),
    ("invoice", "payment", "refund", "billing"),
    ("laptop", "keyboard", "monitor", "charger"),
    ("holiday", "flight", "hotel", "passport"),
    ("garden", "tomato", "compost", "seedling"),
    ("concert", "guitar", "ticket", "stage"),
    ("dentist", "appointment", "filling", "clinic"),
    ("marathon", "training", "sneakers", "pace"),
]
_FILLER = [
    "we",
    "talked",
    "about",
    "the",
    "weekend",
    "and",
    "the",
    "weather",
    "and",
    "how",
    "the",
    "week",
    "went",
    "overall,",
    "nothing",
    "much",
    "else",
    "happened",
    "worth",
    "writing",
    "down",
    "here",
]


def _chatter(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_FILLER, k=words))


def _numbered(
    conversation: Conversation, texts: Iterator[tuple[str, str | None]]
) -> dict[int, str]:
    keys = {}
    for n, (text, channel) in enumerate(texts):
        key = f"g{n}"
        conversation.notes.append((key, text, channel))
        keys[n] = key
    return keys


def _paraphrases(rng: random.Random) -> Conversation:
    """A question asked in other inflections than the note's: releases /
    released / releasing, bought / buying."""
    conversation = Conversation("generated-paraphrases")
    facts = [
        ("Priya released the billing service on Friday", "When was the billing service releasing?"),
        ("Tom is buying a second-hand guitar from Lena", "Who sold Tom the guitars he buys?"),
        ("The tomatoes were planted in the raised beds", "Where does she plant tomato seedlings?"),
        ("Sam's flights to Lisbon were cancelled twice", "Which flight got cancelled for Sam?"),
        ("Ravi trained for the marathons every morning", "When does Ravi train for a marathon?"),
    ]
    texts = [(_chatter(rng, 14), None) for _ in range(300)]
    places = sorted(rng.sample(range(len(texts)), len(facts)))
    for place, (fact, _) in zip(places, facts, strict=True):
        texts[place] = (fact, None)
    keys = _numbered(conversation, iter(texts))
    for place, (_, question) in zip(places, facts, strict=True):
        conversation.questions.append(Question(question, [keys[place]], "paraphrase"))
    return conversation


def _near_duplicates(rng: random.Random) -> Conversation:
    """The note that answers, among hundreds of notes that differ from it by
    a word or two: the block must still hold it."""
    conversation = Conversation("generated-near-duplicates")
    texts = []
    for n in range(600):
        topic = rng.choice(_TOPICS)
        texts.append((f"reminder {n % 7}: check the {topic[0]} {topic[1]} status today", None))
    answers = []
    for n, topic in enumerate(_TOPICS):
        place = rng.randrange(len(texts))
        texts[place] = (f"the {topic[0]} {topic[2]} code is {4000 + n}, keep it safe", None)
        answers.append((place, f"what is the {topic[2]} code for the {topic[0]}?"))
    keys = _numbered(conversation, iter(texts))
    for place, question in answers:
        conversation.questions.append(Question(question, [keys[place]], "near-duplicate"))
    return conversation


def _long_among_short(rng: random.Random) -> Conversation:
    """Long notes that match a question well, ranked above the short note
    that answers it: the block passes over what does not fit."""
    conversation = Conversation("generated-long-notes")
    texts: list[tuple[str, str | None]] = [(_chatter(rng, 10), None) for _ in range(200)]
    answers = []
    for n, topic in enumerate(_TOPICS):
        long = f"{topic[0]} {topic[1]} {topic[3]} notes: " + " ".join(
            rng.choices([*topic, *_FILLER], k=1200)
        )
        for _ in range(3):
            texts.insert(rng.randrange(len(texts)), (long, None))
        place = rng.randrange(len(texts))
        texts.insert(place, (f"the {topic[0]} {topic[3]} owner is person {n}", None))
        answers.append(f"the {topic[0]} {topic[3]} owner is person {n}")
    keys = _numbered(conversation, iter(texts))
    by_text = {text: keys[n] for n, (text, _) in enumerate(texts)}
    for n, topic in enumerate(_TOPICS):
        conversation.questions.append(
            Question(f"who owns the {topic[0]} {topic[3]}?", [by_text[answers[n]]], "long-notes")
        )
    return conversation


def _channels(rng: random.Random) -> Conversation:
    """The same subject noted in several channels: a run sees the notes of
    its own channel and the worker-wide ones, never another channel's."""
    conversation = Conversation("generated-channels")
    texts: list[tuple[str, str | None]] = []
    channels = ["c0", "c1", "c2"]
    for _ in range(300):
        texts.append((_chatter(rng, 12), rng.choice([None, *channels])))
    answers = []
    for channel in channels:
        place = rng.randrange(len(texts))
        texts.insert(place, (f"the release train for {channel} leaves on tuesday", channel))
        answers.append(channel)
    keys = _numbered(conversation, iter(texts))
    for channel in answers:
        place = texts.index((f"the release train for {channel} leaves on tuesday", channel))
        conversation.questions.append(
            Question("when does the release train leave?", [keys[place]], "channels", channel)
        )
    return conversation
