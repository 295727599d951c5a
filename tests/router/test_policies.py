"""Routing policies as pure functions of (request, replica states): decisions and their invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_platform.router.policies import PolicyParams, RouteRequest, make_policy
from paged_platform.router.policies.base import load_limit
from paged_platform.router.policies.prefix_index import PrefixIndex
from paged_platform.router.prompt import chunk_hashes
from paged_platform.router.replica import ReplicaState

URLS = [f"http://10.0.0.{i}:8000" for i in range(1, 6)]


def replicas(*in_flight: int, waiting: tuple[float, ...] | None = None) -> list[ReplicaState]:
    waits = waiting or (0.0,) * len(in_flight)
    pairs = enumerate(zip(in_flight, waits, strict=True))
    return [ReplicaState(URLS[i], ready=True, in_flight=n, waiting=w) for i, (n, w) in pairs]


def request(text: str = "", session: str | None = None) -> RouteRequest:
    return RouteRequest("m", chunk_hashes(text, 8, 1024), 8, session)


def test_round_robin_cycles_in_url_order_whatever_the_load():
    policy = make_policy("round_robin", PolicyParams())
    pool = replicas(9, 0, 3)
    chosen = []
    for _ in range(6):
        decision = policy.choose(request(), pool)
        policy.record(request(), decision)
        chosen.append(decision.url)
    assert chosen == URLS[:3] * 2


def test_least_load_counts_in_flight_and_engine_waiting():
    policy = make_policy("least_load", PolicyParams())
    assert policy.choose(request(), replicas(3, 1, 2)).url == URLS[1]
    # The engine's waiting queue counts as load: replica 1 has fewer of ours but a long queue.
    assert policy.choose(request(), replicas(3, 1, 2, waiting=(0, 5, 0))).url == URLS[2]


def test_least_load_breaks_ties_on_kv_usage():
    pool = replicas(1, 1)
    pool[0].kv_usage = 0.9
    pool[1].kv_usage = 0.1
    assert make_policy("least_load", PolicyParams()).choose(request(), pool).url == URLS[1]


@pytest.mark.parametrize("name", ["prefix", "cache_aware"])
def test_prefix_policies_follow_a_shared_prefix(name: str):
    policy = make_policy(name, PolicyParams())
    pool = replicas(0, 0, 0)
    system = "You are a helpful assistant. " * 8
    first = request(system + "question one")
    decision = policy.choose(first, pool)
    policy.record(first, decision)
    pool[URLS.index(decision.url)].in_flight += 1
    pool[(URLS.index(decision.url) + 1) % 3].in_flight += 1  # the others are no less loaded than the holder
    again = policy.choose(request(system + "another question"), pool)
    assert again.url == decision.url
    assert again.reason == "prefix_hit"
    assert again.matched_chunks == len(system) // 8


@pytest.mark.parametrize("name", ["prefix", "cache_aware"])
def test_a_hot_prefix_spills_past_the_load_bound(name: str):
    policy = make_policy(name, PolicyParams(balance=1.25))
    pool = replicas(0, 0, 0)
    hot = request("the same long system prompt, again and again " * 4)
    policy.record(hot, policy.choose(hot, pool))
    holder = next(r for r in pool if policy.index.match(r.url, hot.chunks))  # type: ignore[attr-defined]
    holder.in_flight = 5  # limit = ceil(1.25 * 6 / 3) = 3: the holder is over it
    decision = policy.choose(hot, pool)
    assert decision.url != holder.url
    assert decision.reason == "load_bound"


def test_prefix_without_any_match_goes_to_the_least_loaded():
    policy = make_policy("prefix", PolicyParams())
    decision = policy.choose(request("nothing seen before " * 3), replicas(2, 0, 1))
    assert (decision.url, decision.reason, decision.matched_chunks) == (URLS[1], "prefix_miss", 0)


def test_cache_aware_trades_prefix_for_load_by_its_weight():
    pool = replicas(0, 0)
    text = "x" * 80
    for weight, expected in ((0.5, URLS[0]), (5.0, URLS[1])):
        policy = make_policy("cache_aware", PolicyParams(balance=10.0, load_weight=weight))
        policy.index.insert(URLS[0], request(text).chunks)  # type: ignore[attr-defined]
        pool[0].in_flight, pool[1].in_flight = 3, 1
        assert policy.choose(request(text), pool).url == expected


def test_cache_aware_is_least_load_without_prefix_information():
    policy = make_policy("cache_aware", PolicyParams())
    decision = policy.choose(request("short"), replicas(4, 2, 3))
    assert (decision.url, decision.reason) == (URLS[1], "least_load")


def test_session_affinity_is_stable_and_moves_only_the_sessions_of_a_removed_replica():
    policy = make_policy("session", PolicyParams(balance=100.0))
    pool = replicas(0, 0, 0, 0)
    before = {s: policy.choose(request(session=s), pool).url for s in map(str, range(200))}
    assert len(set(before.values())) == 4
    assert before == {s: policy.choose(request(session=s), pool).url for s in before}
    gone = URLS[2]
    after = {s: policy.choose(request(session=s), [r for r in pool if r.url != gone]).url for s in before}
    assert {s for s in before if before[s] != after[s]} == {s for s in before if before[s] == gone}


def test_session_without_the_header_is_least_load():
    decision = make_policy("session", PolicyParams()).choose(request(), replicas(2, 1, 3))
    assert (decision.url, decision.reason) == (URLS[1], "no_session")


def test_unknown_policy_names_the_choices():
    with pytest.raises(ValueError, match="policy must be one of cache_aware, prefix"):
        make_policy("random", PolicyParams())


def test_load_limit_is_the_ceiling_of_balance_times_the_mean_after_one_more():
    assert load_limit(replicas(0, 0, 0), 1.25) == 1
    assert load_limit(replicas(1, 1, 1), 1.5) == 2  # 1.5 * 4 / 3 = 2 exactly, not 3 for a float error
    with pytest.raises(ValueError, match="balance factor must be >= 1"):
        load_limit(replicas(0), 0.5)


policy_names = st.sampled_from(["cache_aware", "prefix", "session"])
loads = st.lists(st.integers(0, 40), min_size=1, max_size=5)
texts = st.text(alphabet="ab", min_size=0, max_size=64)


@settings(max_examples=300, deadline=None)
@given(name=policy_names, in_flight=loads, balance=st.floats(1.0, 3.0), text=texts, history=st.lists(texts))
def test_affinity_never_loads_a_replica_past_the_bound(name, in_flight, balance, text, history):
    """Whatever the index holds and whatever the session, the chosen replica stays within the load limit."""
    policy = make_policy(name, PolicyParams(balance=balance))
    pool = replicas(*in_flight)
    for i, past in enumerate(history):
        policy.record(request(past), policy.choose(request(past), pool[i % len(pool) :] or pool))
    decision = policy.choose(request(text, session=text or None), pool)
    chosen = next(r for r in pool if r.url == decision.url)
    total_after = sum(in_flight) + 1
    assert chosen.in_flight + 1 <= max(1, math.ceil(round(balance * total_after / len(pool), 9)))


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["cache_aware", "prefix", "least_load", "round_robin", "session"]), in_flight=loads)
def test_every_policy_answers_one_of_the_candidates(name, in_flight):
    pool = replicas(*in_flight)
    assert make_policy(name, PolicyParams()).choose(request("some prompt text"), pool).url in {r.url for r in pool}


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 5), steps=st.integers(1, 60), text=texts)
def test_bounded_affinity_keeps_in_flight_within_the_bound_as_requests_pile_up(n, steps, text):
    """One hot prompt, requests that never finish: every replica's in-flight count stays within the bound."""
    balance = 1.25
    policy = make_policy("prefix", PolicyParams(balance=balance))
    pool = replicas(*([0] * n))
    for _ in range(steps):
        decision = policy.choose(request(text), pool)
        policy.record(request(text), decision)
        next(r for r in pool if r.url == decision.url).in_flight += 1
        total = sum(r.in_flight for r in pool)
        assert max(r.in_flight for r in pool) <= max(1, math.ceil(round(balance * total / n, 9)))


def test_prefix_index_is_an_lru_bounded_per_replica():
    index = PrefixIndex(capacity=4)
    index.insert("a", (1, 2, 3))
    index.insert("a", (9, 8))  # evicts 1, the least recently used
    assert index.size("a") == 4
    assert index.match("a", (1, 2, 3)) == 0
    assert index.match("a", (9, 8, 7)) == 2
    index.forget("a")
    assert index.match("a", (9,)) == 0
