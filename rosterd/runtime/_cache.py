"""Cache misses explained: what could be reused, what the provider reused.

After the engine answers, the tokens the compiler made reusable (the prompt
before the last stable boundary, or for a session's later turns the whole
previous request) are compared with the cached tokens the provider reported.
A shortfall on a stable prefix is the provider's (TTL expiry, eviction,
routing, or a prefix below the model's minimum) and is labelled so.

Where the provider explains its misses too (Anthropic's cache diagnosis),
its reason is kept beside the verdict, and a reason that contradicts it is
marked: the provider says the system, tools or model changed where the
compiler's hashes say the prefix held, or says the messages changed where
rosterd only ever appends. Either is a finding about the compiler or the
provider, not noise.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..compiler import BoundaryCheck
from ..protocol import CacheCheck, CacheDiagnosis, CacheMissReason, Usage, Verdict

# Per reason the provider gives: the verdicts that contradict it.
_CONTRADICTS: dict[CacheMissReason, frozenset[Verdict]] = {
    "system_changed": frozenset({"hit", "provider-miss"}),
    "tools_changed": frozenset({"hit", "provider-miss"}),
    "model_changed": frozenset({"hit", "provider-miss"}),
    "messages_changed": frozenset({"hit", "provider-miss", "prefix-changed"}),
}


def judge_cache(
    checks: Sequence[BoundaryCheck],
    usage: Usage | None,
    *,
    reusable_tokens: int,
    min_tokens: int,
    measured: bool,
    idle_s: float | None,
) -> CacheCheck:
    """The verdict for one answered turn; see the module docstring."""
    reported = usage.cached_input_tokens if usage is not None else 0
    changed = next((c for c in checks if c.status == "changed"), None)

    def verdict(kind: Verdict, cause: str | None = None) -> CacheCheck:
        return CacheCheck(reusable_tokens, reported, kind, cause)

    if not measured:
        return verdict("unmeasured", "the engine reports no cache usage")
    if usage is None:
        return verdict("unmeasured", "the provider reported no usage for this turn")
    if changed is not None:
        return verdict("prefix-changed", f"{changed.cause} (block {changed.block or 'all'})")
    if reusable_tokens == 0:
        return verdict("cold", "first compilation for this worker and channel")
    if reusable_tokens < min_tokens:
        return verdict(
            "below-minimum",
            f"reusable prefix of {reusable_tokens} tokens is below the minimum of {min_tokens}",
        )
    if reported >= reusable_tokens - max(128, reusable_tokens // 10):
        return verdict("hit")
    idle = f"; {idle_s:.0f} s since the prefix was last used" if idle_s is not None else ""
    return verdict(
        "provider-miss",
        f"provider reused {reported} of {reusable_tokens} tokens "
        f"(TTL expiry, eviction or routing){idle}",
    )


def with_diagnosis(cache: CacheCheck, diagnosis: CacheDiagnosis) -> CacheCheck:
    """*cache* with the provider's own account of it, marked where the two disagree."""
    reason = diagnosis.reason
    disagrees = reason is not None and cache.verdict in _CONTRADICTS.get(reason, frozenset())
    return msgspec.structs.replace(cache, diagnosis=diagnosis, disagrees=disagrees)
