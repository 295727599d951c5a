"""What the CRD admits, the operator renders and the engine accepts are one set of rules: for every spec the API
types admit (the same rules as the CRD's CEL), the engine a rendered pod starts (its arguments and environment
parsed by ``paged-engine``'s own parser) starts with the operator's starting budgets, and its live limits admit
every budget the operator's tuner may propose for that spec."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from paged_operator.policy.config import controller_spec, starting_budgets
from paged_operator.render import children
from paged_platform.api import ModelDeployment, parse_quantity
from paged_platform.engine_contract.budgets import (
    MAX_NUM_BATCHED_TOKENS_BOUNDS,
    MAX_NUM_SEQS_BOUNDS,
    BudgetLimits,
    Budgets,
)
from paged_platform.engine_contract.launch import ServeFlag
from paged_platform.engine_contract.memory import (
    DEFAULT_CPU_BYTES,
    DEFAULT_GPU_FRACTION,
    KV_CACHE_MEMORY_PATTERN,
    MAX_TEXT_LENGTH,
    default_kv_cache_memory,
)
from pydantic import ValidationError

from tests.kubelet_env import container_environment, engine_started_by

UID = "00000000-0000-4000-8000-0000000000c7"
seqs = st.integers(MAX_NUM_SEQS_BOUNDS.low, MAX_NUM_SEQS_BOUNDS.high)
tokens = st.integers(MAX_NUM_BATCHED_TOKENS_BOUNDS.low, MAX_NUM_BATCHED_TOKENS_BOUNDS.high)


def bounds(values: st.SearchStrategy[int]) -> st.SearchStrategy[dict[str, int]]:
    return st.lists(values, min_size=2, max_size=2).map(sorted).map(lambda b: {"min": b[0], "max": b[1]})


budget_specs = st.fixed_dictionaries(
    {},
    optional={
        "maxNumSeqs": seqs,
        "maxNumBatchedTokens": tokens,
        "adaptive": st.fixed_dictionaries(
            {"enabled": st.booleans()}, optional={"maxNumSeqs": bounds(seqs), "maxNumBatchedTokens": bounds(tokens)}
        ),
    },
)


def admitted(budget: dict[str, Any], gpus: int) -> ModelDeployment:
    spec = {"schedulerBudget": budget, "resources": {"gpus": gpus}, "engine": {"maxModelLen": 256}}
    try:
        return ModelDeployment.model_validate({"metadata": {"name": "m", "namespace": "ns"}, "spec": spec})
    except ValidationError:
        assume(False)
        raise


def engine_of(md: ModelDeployment, budgets: Budgets) -> tuple[Budgets, BudgetLimits]:
    """The budgets and live limits the engine of ``md``'s pods starts with, the ConfigMap holding ``budgets``."""
    container = children.container(md)
    cm = children.config_map(md, UID, budgets)
    env = container_environment(container["env"], {}, {cm["metadata"]["name"]: cm["data"]})
    _, config, _ = engine_started_by(container, env)
    scheduler = config.scheduler.resolved(md.spec.device_type, serving=True)
    return scheduler.budgets, scheduler.live_limits()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(budget=budget_specs, gpus=st.sampled_from([0, 1]), proposals=st.lists(st.tuples(seqs, tokens), max_size=8))
def test_every_admitted_spec_starts_an_engine_that_accepts_the_tuners_budgets(
    budget: dict[str, Any], gpus: int, proposals: list[tuple[int, int]]
) -> None:
    md = admitted(budget, gpus)
    start = starting_budgets(md.spec)
    in_force, limits = engine_of(md, start)
    assert in_force == start  # the operator's idea of the starting budgets is the engine's
    tuner = controller_spec(md.spec).budget
    if tuner is None:
        return
    for wanted_seqs, wanted_tokens in proposals:
        proposal = tuner.clamp(Budgets(min(wanted_seqs, wanted_tokens), wanted_tokens))
        assert limits.admits(proposal), (proposal, limits)
        # a pod started after the tuner wrote the proposal into the ConfigMap starts with it
        assert engine_of(md, proposal) == (proposal, limits)


def test_the_widest_spec_the_crd_admits_starts_an_engine_at_the_contracts_bounds() -> None:
    widest = {"min": 1, "max": MAX_NUM_SEQS_BOUNDS.high}, {"min": 1, "max": MAX_NUM_BATCHED_TOKENS_BOUNDS.high}
    md = admitted({"adaptive": {"enabled": True, "maxNumSeqs": widest[0], "maxNumBatchedTokens": widest[1]}}, 0)
    _, limits = engine_of(md, starting_budgets(md.spec))
    assert limits == BudgetLimits(MAX_NUM_SEQS_BOUNDS.high, MAX_NUM_BATCHED_TOKENS_BOUNDS.high)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.from_regex(KV_CACHE_MEMORY_PATTERN, fullmatch=True).filter(lambda t: len(t) <= MAX_TEXT_LENGTH))
def test_every_kv_cache_memory_the_crd_admits_starts_an_engine_with_its_meaning(text: str) -> None:
    """A unitless number up to 1 is a fraction of free memory, anything else a size; the engine reads the rendered
    flag as the API server's quantity arithmetic does (never ``int(0.9) = 0``)."""
    md = ModelDeployment.model_validate(
        {"metadata": {"name": "m", "namespace": "ns"}, "spec": {"engine": {"kvCacheMemory": text}}}
    )
    _, config, _ = engine_started_by(children.container(md), {})
    unitless = text.replace(".", "").isdigit()
    if unitless and float(text) <= 1:
        assert config.kv_cache_memory == float(text)
    else:
        assert config.kv_cache_memory == int(parse_quantity(text))


def test_unset_kv_cache_memory_leaves_the_engine_its_device_default() -> None:
    md = ModelDeployment.model_validate({"metadata": {"name": "m", "namespace": "ns"}, "spec": {}})
    container = children.container(md)
    assert ServeFlag.KV_CACHE_MEMORY not in container["args"]
    _, config, _ = engine_started_by(container, {})
    assert config.kv_cache_memory is None  # sized at start-up, once the device is known
    assert default_kv_cache_memory("cuda") == DEFAULT_GPU_FRACTION
    assert default_kv_cache_memory("cpu") == DEFAULT_CPU_BYTES
