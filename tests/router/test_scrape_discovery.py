"""Parsing a replica's load from /metrics, and the endpoints of EndpointSlices (pure parts)."""

from __future__ import annotations

import pytest
from paged_platform.router.discovery import SliceSet, slice_urls
from paged_platform.router.scrape import parse_load

ENGINE_TEXT = """# HELP paged_requests_waiting Requests waiting
# TYPE paged_requests_waiting gauge
paged_requests_waiting{model_name="gemma"} 3.0
# TYPE paged_kv_cache_usage_ratio gauge
paged_kv_cache_usage_ratio{model_name="gemma"} 4.5e-01
# TYPE paged_requests_running gauge
paged_requests_running{model_name="gemma"} 7.0
paged_time_to_first_token_seconds_bucket{le="0.1",model_name="gemma"} 2.0
"""


def test_parse_load_reads_waiting_kv_and_models():
    load = parse_load(ENGINE_TEXT)
    assert (load.models, load.waiting, load.kv_usage) == (frozenset({"gemma"}), 3.0, 0.45)


def test_served_models_are_the_base_and_its_loaded_adapters():
    text = ENGINE_TEXT + (
        "# TYPE paged_served_model_info gauge\n"
        'paged_served_model_info{model_name="gemma",served_model_name="gemma"} 1.0\n'
        'paged_served_model_info{model_name="gemma",served_model_name="sql-lora"} 1.0\n'
    )
    load = parse_load(text)
    assert load.models == frozenset({"gemma", "sql-lora"})
    assert load.base_models == frozenset({"gemma"})


def test_parse_load_without_the_gauges_knows_no_model():
    assert parse_load("other_metric 1\n").models == frozenset()


def test_parse_load_refuses_malformed_lines():
    with pytest.raises(ValueError):
        parse_load('paged_requests_waiting{model_name="x" 1\n')


def endpoint(ip: str, ready: bool | None = True, terminating: bool | None = False) -> dict:
    conditions = {k: v for k, v in (("ready", ready), ("terminating", terminating)) if v is not None}
    return {"addresses": [ip], "conditions": conditions}


def test_only_ready_non_terminating_endpoints_on_the_named_port():
    sl = {
        "metadata": {"name": "s1"},
        "ports": [{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}],
        "endpoints": [endpoint("10.0.0.1"), endpoint("10.0.0.2", ready=False), endpoint("10.0.0.3", terminating=True),
                      endpoint("10.0.0.4", ready=None), endpoint("fd00::5")],
    }  # fmt: skip
    assert slice_urls(sl, "http") == {"http://10.0.0.1:8000", "http://10.0.0.4:8000", "http://[fd00::5]:8000"}


def test_a_single_unnamed_port_is_used_and_ambiguous_ports_give_nothing():
    one = {"metadata": {"name": "s"}, "ports": [{"port": 81}], "endpoints": [endpoint("10.0.0.1")]}
    assert slice_urls(one, "http") == {"http://10.0.0.1:81"}
    two = {**one, "ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}
    assert slice_urls(two, "http") == set()


def test_slice_set_follows_watch_events():
    slices = SliceSet("http")
    first = {"metadata": {"name": "a"}, "ports": [{"name": "http", "port": 1}], "endpoints": [endpoint("10.0.0.1")]}
    second = {**first, "metadata": {"name": "b"}, "endpoints": [endpoint("10.0.0.2")]}
    slices.replace([first])
    slices.apply("ADDED", second)
    assert slices.urls() == {"http://10.0.0.1:1", "http://10.0.0.2:1"}
    slices.apply("MODIFIED", {**first, "endpoints": [endpoint("10.0.0.1", ready=False)]})
    slices.apply("DELETED", second)
    assert slices.urls() == set()
