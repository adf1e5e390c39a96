"""Memory ranking: which notes a message meets, why, and input that must
not break it. Through the public compiler: ``compile_run`` and the index's
views, the same code the daemon runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rosterd.compiler import (
    BlockTrace,
    MemoryIndex,
    MemoryItem,
    Retirement,
    RunMeta,
    TurnInput,
    compile_run,
)
from rosterd.compiler._scoring import NEIGHBOURS
from rosterd.org import Org, Surface, load_org

META = RunMeta(run="d-1", turn=1, now=1_800_000_000.0)


@pytest.fixture
def org(tmp_path: Path) -> Org:
    (tmp_path / "workers" / "ada").mkdir(parents=True)
    (tmp_path / "workers" / "ada" / "identity.md").write_text("You are ada.\n")
    (tmp_path / "org.toml").write_text(
        '[engine]\nkind = "echo"\n[workers.ada]\n[channels.general]\nworkers = ["ada"]\n'
    )
    return load_org(tmp_path)


def notes(*texts: str) -> tuple[MemoryItem, ...]:
    return tuple(
        MemoryItem(id=f"m-{n + 1}", text=text, created_at=1_700_000_000.0 + n)
        for n, text in enumerate(texts)
    )


def ranked_ids(items: tuple[MemoryItem, ...], message: str) -> list[str]:
    return [r.item.id for r in MemoryIndex(items).snapshot().ranking(message, None)]


def memory_block(
    org: Org, items: tuple[MemoryItem, ...], message: str, **more: object
) -> BlockTrace:
    scope = org.scope(Surface.DIRECT, "ada", None)
    turn = TurnInput(text=message, memory=items, **more)  # type: ignore[arg-type]
    record = compile_run(org, scope, turn, META).record
    (block,) = (b for b in record.blocks if b.block == "memory")
    return block


def test_words_meet_in_other_inflections_and_stopwords_count_for_nothing() -> None:
    items = notes(
        "the release of the billing service",
        "and then the other one went there with them",
        "an unrelated note about tea",
    )
    # "releases" meets "release"; "the"/"and"/"with" alone meet nothing, so
    # the newest note leads the rest.
    assert ranked_ids(items, "when are releases done?")[0] == "m-1"
    assert ranked_ids(items, "and the with")[0] == "m-3"


def test_a_rare_word_outweighs_one_most_notes_hold() -> None:
    common = [f"meeting notes for week {n}" for n in range(20)]
    items = notes(*common, "meeting moved because of the zeppelin", "zeppelin tickets booked")
    # Both words of the message: the note with the rare one wins over the
    # twenty that share only the common word.
    top = ranked_ids(items, "zeppelin meeting")[:2]
    assert set(top) == {"m-21", "m-22"}
    assert top[0] == "m-21"  # it holds both


def test_a_note_beside_a_match_ranks_above_unrelated_notes() -> None:
    items = notes(
        *(f"filler about gardening tomatoes {n}" for n in range(10)),
        "Caroline asked what I bought yesterday",
        "A red bicycle, second hand",
        *(f"filler about gardening tomatoes {n}" for n in range(10, 20)),
    )
    ranking = list(MemoryIndex(items).snapshot().ranking("what did Caroline buy?", None))
    assert [r.item.id for r in ranking[:2]] == ["m-11", "m-12"]
    assert ranking[1].score > 0.0


def test_a_note_between_two_matches_takes_the_larger_share_not_both() -> None:
    items = notes(
        *(f"filler about gardening tomatoes {n}" for n in range(10)),
        "the ferrari was red",
        "we had lunch by the lake",
        "the ferrari needs new tyres",
        *(f"filler about gardening tomatoes {n}" for n in range(10, 20)),
    )
    # Written days later, so beside none of them: a match of its own, in a
    # longer note, so it scores well under the two above.
    words = " ".join(f"word{k}" for k in range(10))
    items += (MemoryItem(id="m-99", text=f"a ferrari {words}", created_at=1_700_900_000.0),)
    ranked = {r.item.id: r for r in MemoryIndex(items).snapshot().ranking("ferrari", None)}
    # The note between them gets what the better one lends, as the note
    # just before that one does, not what both lend: the match written
    # elsewhere still ranks above it.
    lunch, before, first = ranked["m-12"], ranked["m-10"], ranked["m-11"]
    assert lunch.own == 0.0 and lunch.score > 0.0
    assert lunch.score == before.score
    assert lunch.score < ranked["m-99"].score < first.score


def test_a_retirement_takes_out_one_note_and_moves_no_other() -> None:
    items = notes(
        *(f"filler about gardening tomatoes {n}" for n in range(10)),
        "Caroline asked which bicycle I bought at the market",
        "A red bicycle, second hand",
        "the bicycle shop on Elm street",
        *(f"filler about gardening tomatoes {n}" for n in range(10, 20)),
        "the market opens at nine",
    )
    index = MemoryIndex(items)
    before = [
        (r.item.id, r.score) for r in index.snapshot().ranking("what did Caroline buy?", None)
    ]
    assert before[0][0] == "m-11"
    # The note that matched lent its neighbour score and feedback its terms;
    # retired, it is hidden, and the others keep their scores and places.
    index.retire(Retirement(note="m-11", because="out of date", at=0.0))
    after = [(r.item.id, r.score) for r in index.snapshot().ranking("what did Caroline buy?", None)]
    assert after == [entry for entry in before if entry[0] != "m-11"]
    assert after[0][0] == "m-12" and after[0][1] > 0.0
    assert dict(after)["m-24"] > 0.0  # "market", a feedback term of m-11


def test_text_without_spaces_ranks_by_character_pairs() -> None:
    items = notes("明日の発表会は十時から", "昨日は雨でした", "the presentation is at ten")
    assert ranked_ids(items, "発表会は何時?")[0] == "m-1"


def test_words_written_with_combining_marks_meet() -> None:
    # Devanagari, Bengali and Tamil write vowels as combining marks: a word
    # is letters and marks together, and the newest note does not lead.
    items = notes(
        "मेरी किताब मेज़ पर है",
        "আমার বই টেবিলে আছে, বাংলা ভাষায়",
        "தமிழ் புத்தகம் மேசையில் உள்ளது",
        "an unrelated note about tea",
    )
    assert ranked_ids(items, "किताब कहाँ है?")[0] == "m-1"
    assert ranked_ids(items, "বাংলা বই")[0] == "m-2"
    assert ranked_ids(items, "புத்தகம்")[0] == "m-3"


def test_a_short_message_borrows_the_conversation_s_terms(org: Org) -> None:
    items = notes("Tom bought a second-hand guitar from Lena", "the car needs new tyres")
    alone = memory_block(org, items, "how much was it?")
    assert alone.notes is not None and alone.notes[0].id == "m-2"  # newest: nothing shared
    told = memory_block(org, items, "how much was it?", recent=("did Tom get the guitar?",))
    assert told.notes is not None
    first = told.notes[0]
    assert (first.id, first.terms) == ("m-1", ())
    assert set(first.borrowed) >= {"tom", "guitar"}


def test_the_trace_says_why_each_note_is_in_the_block(org: Org) -> None:
    items = notes("deploys are on fridays", "the staging deploy broke", "tea at four")
    block = memory_block(org, items, "When do we deploy to staging?")
    assert block.notes is not None
    reasons = {n.id: n for n in block.notes}
    assert reasons["m-2"].terms == ("deploy", "staging")
    assert reasons["m-1"].terms == ("deploy",)
    assert reasons["m-2"].score > reasons["m-1"].score > 0.0
    # Written just after m-2, it holds none of the words: m-2 lent it score.
    assert (reasons["m-3"].terms, reasons["m-3"].beside) == ((), "m-2")
    assert 0.0 < reasons["m-3"].score < reasons["m-1"].score
    assert [n.id for n in block.notes] == ["m-2", "m-1", "m-3"]


def test_the_reason_names_the_neighbour_that_lent_not_the_best_one(org: Org) -> None:
    items = notes(
        *(f"filler about gardening tomatoes {n}" for n in range(10)),
        "the ferrari was red",
        "we had lunch by the lake",
        "the weather turned cold",
        "ferrari parts arrived late",
        *(f"filler about gardening tomatoes {n}" for n in range(10, 20)),
    )
    block = memory_block(org, items, "ferrari")
    assert block.notes is not None
    reasons = {n.id: n for n in block.notes}
    # Two places before m-13, the shorter m-11 scores higher; but m-14, just
    # after it, offers it the larger share, and is the one that lent it.
    assert reasons["m-11"].score > reasons["m-14"].score
    assert (reasons["m-13"].terms, reasons["m-13"].beside) == ((), "m-14")


def test_the_reason_names_a_lender_among_the_best_not_a_nearer_note_that_lent_nothing() -> None:
    # 64 notes score above the weak match m-37: only they lend. m-37 sits
    # next to m-38 and would offer it more than m-35, three places off, does.
    strong = [f"ferrari {n}" for n in range(63)]
    items = notes(
        *strong[:31],
        *("gap one", "gap two", "gap three"),
        "ferrari",  # m-35
        "lunch by the lake",
        "ferrari word0 word1 word2 word3",  # m-37
        "we talked for hours",  # m-38
        *("tea at four", "rain again", "a long walk"),
        *strong[31:],
    )
    ranking = MemoryIndex(items).snapshot().ranking("ferrari", None)
    ranked = {r.item.id: r for r in ranking}
    weak, lender, lent = ranked["m-37"], ranked["m-35"], ranked["m-38"]
    assert sum(r.own > weak.own for r in ranked.values()) == 64
    assert weak.own * NEIGHBOURS[0] > lender.own * NEIGHBOURS[2]
    # m-38 holds no term: its score is m-35's share, and the reason says so.
    assert lent.own == 0.0
    assert lent.score == pytest.approx(lender.own * NEIGHBOURS[2], abs=1e-6)
    assert ranking.reasons([lent]) == [((), (), "m-35")]


@pytest.mark.parametrize(
    "texts",
    [
        pytest.param(("the and of to it is",) * 3, id="only stopwords"),
        pytest.param(("🚀🔥💯", "👍 ok 👍"), id="emoji"),
        pytest.param(("Привет мир 世界 hello wörld", "مرحبا بالعالم"), id="mixed scripts"),
        pytest.param(("",), id="empty note"),
    ],
)
@pytest.mark.parametrize("message", ["", "the", "🚀", "世界 hello мир", "x" * 5000])
def test_odd_text_never_breaks_a_turn(org: Org, texts: tuple[str, ...], message: str) -> None:
    if not message:
        message = " "
    block = memory_block(org, notes(*texts), message)
    assert block.status in ("included", "shrunk", "absent")
    assert block.items == len(texts) or block.passed_over


def test_a_64_kib_note_is_passed_over_and_the_rest_still_fit(org: Org) -> None:
    huge = "deploy " * (64 * 1024 // 7)
    block = memory_block(org, notes(huge, "deploy on fridays"), "deploy")
    assert block.notes is not None and [n.id for n in block.notes] == ["m-2"]
    assert block.passed_over is not None
    assert (block.passed_over[0].id, block.passed_over[0].reason) == (
        "m-1",
        "over the memory limit",
    )


def test_ten_thousand_near_duplicates_stay_small_and_rank(org: Org) -> None:
    items = tuple(
        MemoryItem(
            id=f"m-{n}",
            text=f"reminder {n % 10}: check the deploy pipeline status",
            created_at=1_700_000_000.0 + n,
        )
        for n in range(10_000)
    )
    index = MemoryIndex(items)
    # Near-duplicates share their terms: the index holds one posting list
    # per distinct term, not per note.
    assert "MemoryIndex(10000 notes" in repr(index)
    assert int(repr(index).split(", ")[1].split()[0]) < 20
    block = memory_block(org, items, "reminder 7 deploy pipeline")
    assert block.notes is not None and block.notes[0].id == "m-9997"
