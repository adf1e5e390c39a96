"""An engine's admission: its limits, fair queues, provider pauses and breaker,
driven by the calls themselves and an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from rosterd.engines import Admission
from rosterd.org import EngineConfig
from rosterd.protocol import WaitReason

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Caller:
    """Calls that take a slot, note when they got it, and hold it until let go."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.started: list[str] = []
        self.waits: list[tuple[str, WaitReason, float | None]] = []
        self._release: dict[str, anyio.Event] = {}
        self._queued: dict[str, anyio.Event] = {}
        self._started: dict[str, anyio.Event] = {}

    async def call(self, name: str, key: str, tokens: int = 0) -> None:
        self._release[name] = anyio.Event()

        async def heard(reason: WaitReason, retry_in: float | None) -> None:
            self.waits.append((name, reason, retry_in))
            self._queued.setdefault(name, anyio.Event()).set()

        async with self.admission.slot(key, tokens, heard):
            self.started.append(name)
            self._started.setdefault(name, anyio.Event()).set()
            await self._release[name].wait()

    async def queued(self, name: str) -> None:
        await self._queued.setdefault(name, anyio.Event()).wait()

    async def running(self, name: str) -> None:
        with anyio.fail_after(10):  # a guard against a hang, not a timing
            await self._started.setdefault(name, anyio.Event()).wait()

    def release(self, name: str) -> None:
        self._release[name].set()


async def test_waiting_calls_are_served_round_robin_by_session() -> None:
    caller = Caller(Admission(EngineConfig(max_inflight=1)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller.call, "a1", "busy")
        await caller.running("a1")
        # The busy channel queues three more before the others ask once each.
        for name, key in (("a2", "busy"), ("a3", "busy"), ("a4", "busy"), ("b1", "b"), ("c1", "c")):
            tg.start_soon(caller.call, name, key)
            await caller.queued(name)
        for name in ("a1", "a2", "b1", "c1", "a3", "a4"):
            await caller.running(name)
            caller.release(name)
    assert caller.started == ["a1", "a2", "b1", "c1", "a3", "a4"]
    assert {reason for _, reason, _ in caller.waits} == {"queued"}


async def test_a_call_that_gives_up_waiting_leaves_the_queue() -> None:
    admission = Admission(EngineConfig(max_inflight=1))
    caller = Caller(admission)
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller.call, "first", "s1")
        await caller.running("first")
        with anyio.move_on_after(0):
            await caller.call("impatient", "s2")
        assert admission.queued == 0
        tg.start_soon(caller.call, "next", "s3")
        await caller.queued("next")
        caller.release("first")
        await caller.running("next")
        caller.release("next")
    assert caller.started == ["first", "next"]


async def test_requests_per_minute_hold_the_call_past_the_bucket() -> None:
    clock = Clock()
    caller = Caller(Admission(EngineConfig(requests_per_minute=2), clock))
    async with anyio.create_task_group() as tg:
        for name in ("one", "two"):
            tg.start_soon(caller.call, name, "s")
        tg.start_soon(caller.call, "three", "s")
        await caller.queued("three")
        caller.release("one")
        caller.release("two")
        tg.cancel_scope.cancel()
    assert caller.started == ["one", "two"]
    ((name, reason, retry_in),) = caller.waits
    assert (name, reason) == ("three", "rate_limited")
    assert retry_in == pytest.approx(30.0)


async def test_a_large_request_waits_for_input_tokens() -> None:
    clock = Clock()
    caller = Caller(Admission(EngineConfig(input_tokens_per_minute=6000), clock))
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller.call, "big", "s", 5000)
        tg.start_soon(caller.call, "next", "s", 3000)
        await caller.queued("next")
        tg.cancel_scope.cancel()
    assert caller.started == ["big"]
    # 2,000 missing at 100 a second.
    ((name, reason, retry_in),) = caller.waits
    assert (name, reason) == ("next", "rate_limited")
    assert retry_in == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("status", "headers", "reason", "seconds"),
    [
        (429, {"retry-after": "7"}, "rate_limited", 7.0),
        (429, {"retry-after-ms": "2500"}, "rate_limited", 2.5),
        (529, {"retry-after": "12"}, "overloaded", 12.0),
        (503, {"retry-after": "3"}, "overloaded", 3.0),
        (200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30s"},
         "rate_limited", 90.0),
        (200, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "250ms"},
         "rate_limited", 0.25),
    ],
)  # fmt: skip
async def test_the_provider_s_own_limits_tighten_the_engine(
    status: int, headers: dict[str, str], reason: WaitReason, seconds: float
) -> None:
    clock = Clock()
    admission = Admission(EngineConfig(), clock)
    admission.observe(status, headers)
    caller = Caller(admission)
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller.call, "held", "s")
        await caller.queued("held")
        tg.cancel_scope.cancel()
    assert caller.started == []
    ((name, heard, retry_in),) = caller.waits
    assert (name, heard) == ("held", reason)
    assert retry_in == pytest.approx(seconds)


async def test_anthropic_s_reset_times_hold_calls_until_then() -> None:
    admission = Admission(EngineConfig())
    reset = (datetime.now(UTC) + timedelta(seconds=40)).isoformat().replace("+00:00", "Z")
    admission.observe(
        200,
        {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset,
        },
    )
    caller = Caller(admission)
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller.call, "held", "s")
        await caller.queued("held")
        tg.cancel_scope.cancel()
    ((_, reason, retry_in),) = caller.waits
    assert reason == "rate_limited" and retry_in is not None and 38 < retry_in <= 40


@pytest.mark.parametrize(
    "headers",
    [
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"},
        {"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": "x"},
        {"retry-after": "tomorrow"},
        {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "1s"},
    ],
)
async def test_limit_headers_that_say_nothing_usable_hold_nothing(headers: dict[str, str]) -> None:
    admission = Admission(EngineConfig())
    admission.observe(429, headers)
    caller = Caller(admission)
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller.call, "free", "s")
        await caller.running("free")
        caller.release("free")
    assert caller.waits == []


def test_the_breaker_opens_after_failures_in_a_row_then_lets_one_probe_through() -> None:
    clock = Clock()
    admission = Admission(EngineConfig(breaker_failures=3, breaker_cooldown_s=30), clock)
    for _ in range(2):
        assert admission.let_through() is None
        admission.failed()
    admission.succeeded()  # a success in between: the count starts again
    for _ in range(3):
        assert admission.let_through() is None
        admission.failed()
    assert admission.status("claude").breaker == "open"
    assert admission.let_through() == pytest.approx(30.0)
    clock.now += 30
    assert admission.status("claude").breaker == "half-open"
    assert admission.let_through() is None  # the probe
    assert admission.let_through() == pytest.approx(30.0)  # the others wait for it
    admission.failed()
    assert admission.status("claude").breaker == "open"
    clock.now += 30
    assert admission.let_through() is None
    admission.succeeded()
    status = admission.status("claude")
    assert (status.breaker, status.failures, status.retry_in_s) == ("closed", 0, None)
    assert admission.let_through() is None
