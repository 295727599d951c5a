from __future__ import annotations

from paged_engine.core.request import Request
from paged_engine.core.request_queue import FCFSQueue, PriorityQueue
from paged_engine.sampling_params import SamplingParams


def req(name: str, priority: int = 0, arrival: float = 0.0) -> Request:
    return Request(name, [1], SamplingParams(), arrival_time=arrival, priority=priority)


def test_fcfs_keeps_arrival_order_and_prepends_preempted():
    queue = FCFSQueue()
    a, b, c = req("a"), req("b"), req("c")
    queue.add(a)
    queue.add(b)
    queue.prepend(c)
    assert [r.request_id for r in queue] == ["c", "a", "b"] and queue.peek() is c
    queue.remove(a)
    assert [queue.pop().request_id for _ in range(len(queue))] == ["c", "b"]


def test_priority_orders_by_priority_then_arrival_then_insertion():
    queue = PriorityQueue()
    items = [req("late-high", 0, 5.0), req("low", 3, 0.0), req("early-high", 0, 1.0), req("tie", 0, 1.0)]
    for item in items:
        queue.add(item)
    assert [r.request_id for r in queue] == ["early-high", "tie", "late-high", "low"]
    queue.remove(items[2])
    assert queue.peek().request_id == "tie"
    assert [queue.pop().request_id for _ in range(len(queue))] == ["tie", "late-high", "low"]
