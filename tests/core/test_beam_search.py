"""The beam-search policy alone, driven by a fake model (a deterministic distribution per prefix)."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_engine.core.beam_search import BeamSearch, candidates_per_beam


def fake_logprobs(prefix: tuple[int, ...], vocab: int, seed: int) -> list[float]:
    """A normalised, deterministic next-token distribution for ``prefix``."""
    rng = random.Random(hash((seed, prefix)))
    logits = [rng.gauss(0.0, 2.0) for _ in range(vocab)]
    norm = math.log(sum(math.exp(x) for x in logits))
    return [x - norm for x in logits]


def run(search: BeamSearch, vocab: int, seed: int) -> int:
    """Drive the search to the end, each beam reporting its top ``num_candidates`` tokens; returns the steps."""
    steps = 0
    while not search.done:
        reports = []
        for beam in search.beams:
            lps = fake_logprobs(beam.token_ids, vocab, seed)
            top = sorted(range(vocab), key=lambda t: -lps[t])[: search.num_candidates]
            reports.append([(t, lps[t]) for t in top])
        before = [b.token_ids for b in search.beams]
        for c in search.step(reports):
            assert 0 <= c.parent < len(before)
        steps += 1
        assert len(search.beams) <= search.width
        assert len({len(b.token_ids) for b in search.beams}) <= 1, "live beams differ in length"
        assert len(search.hypotheses) <= search.width
        scores = [h.score for h in search.hypotheses]
        assert scores == sorted(scores, reverse=True)
    return steps


def path_logprob(tokens: tuple[int, ...], vocab: int, seed: int) -> float:
    return sum(fake_logprobs(tokens[:i], vocab, seed)[t] for i, t in enumerate(tokens))


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(1, 4),
    vocab=st.integers(8, 14),
    max_new=st.integers(1, 7),
    stops=st.sets(st.integers(0, 7), max_size=2),
    length_penalty=st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0]),
    early=st.sampled_from([True, False, "never"]),
    seed=st.integers(0, 1000),
)
def test_invariants_of_any_search(width, vocab, max_new, stops, length_penalty, early, seed):
    search = BeamSearch(width, max_new, frozenset(stops), length_penalty, early)
    steps = run(search, vocab, seed)
    assert steps <= max_new
    best = search.best(width)
    assert len(best) == width  # a vocabulary of at least num_candidates tokens always fills every slot
    for h in best:
        assert 1 <= len(h.token_ids) <= max_new
        assert math.isclose(h.cum_logprob, path_logprob(h.token_ids, vocab, seed), abs_tol=1e-9)
        assert math.isclose(h.score, h.cum_logprob / len(h.token_ids) ** length_penalty, abs_tol=1e-9)
        # a hypothesis ends at a stop token or at the length limit, and holds no stop token before its end
        assert h.stopped == (h.token_ids[-1] in stops)
        assert h.stopped or len(h.token_ids) == max_new
        assert not set(h.token_ids[:-1]) & stops
    if early is True and steps < max_new:
        assert all(h.stopped for h in best)
    with pytest.raises(RuntimeError):
        search.step([])


@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(2, 3), max_new=st.integers(1, 3), seed=st.integers(0, 1000))
def test_a_beam_as_wide_as_the_tree_finds_the_best_sequence(vocab, max_new, seed):
    # vocab ** (max_new - 1) beams hold every prefix, so the best hypothesis is the best of all sequences
    width = vocab ** (max_new - 1)
    search = BeamSearch(width, max_new, frozenset(), length_penalty=1.0)
    run(search, vocab, seed)
    every = itertools.product(range(vocab), repeat=max_new)
    best = max(every, key=lambda seq: path_logprob(seq, vocab, seed))
    assert search.best(1)[0].token_ids == best


@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(4, 12), max_new=st.integers(1, 8), seed=st.integers(0, 1000))
def test_width_one_is_greedy(vocab, max_new, seed):
    search = BeamSearch(1, max_new, frozenset(), length_penalty=0.7)
    run(search, vocab, seed)
    tokens: tuple[int, ...] = ()
    for _ in range(max_new):
        lps = fake_logprobs(tokens, vocab, seed)
        tokens += (max(range(vocab), key=lambda t: lps[t]),)
    assert search.best(1)[0].token_ids == tokens


def test_a_stop_among_the_top_width_finishes_and_others_do_not():
    search = BeamSearch(2, 5, frozenset({9}), early_stopping=True)
    assert search.num_candidates == candidates_per_beam(2, 1) == 4
    # ranks: (9) 1st ends, (3) 2nd and (4) 3rd live on; a stop ranked past the width is not a hypothesis
    search.step([[(9, -0.1), (3, -0.2), (4, -0.3), (5, -0.4)]])
    assert [h.token_ids for h in search.hypotheses] == [(9,)]
    assert [b.token_ids for b in search.beams] == [(3,), (4,)]
    search.step([[(1, -0.1), (9, -0.2)], [(9, -5.0), (2, -6.0)]])
    assert [h.token_ids for h in search.hypotheses] == [(9,), (3, 9)]
    assert search.done  # early_stopping=True: two hypotheses for width two
    assert search.beams == []


def test_early_stopping_false_stops_when_no_live_beam_can_win():
    search = BeamSearch(1, 10, frozenset({9}), length_penalty=1.0, early_stopping=False)
    search.step([[(9, -0.5), (3, -0.6)]])  # hypothesis (9,) scores -0.5; the live beam (3,) scores -0.6
    assert search.done
    never = BeamSearch(1, 10, frozenset({9}), length_penalty=1.0, early_stopping="never")
    never.step([[(9, -0.5), (3, -0.6)]])  # -0.6 over up to 10 tokens might still reach -0.06
    assert not never.done


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"width": 0, "max_new_tokens": 3}, "beam width"),
        ({"width": 2, "max_new_tokens": 0}, "max_new_tokens"),
        ({"width": 2, "max_new_tokens": 3, "early_stopping": "sometimes"}, "early_stopping"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BeamSearch(**kwargs)
