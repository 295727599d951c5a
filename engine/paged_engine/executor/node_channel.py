"""How the engine core reaches the ranks of other hosts: it publishes each broadcast message (a step, an adapter
change, stop) on ``--master-port + 1`` and collects their answers on ``--master-port + 2``; on each other host a
node agent (``node_agent.py``) relays the messages into its own shared-memory ring and its workers' answers back.

The answers arrive on a socket; a thread hands them to a pipe, so the core waits on its local workers' pipes, their
process sentinels and this one pipe together (``multiprocessing.connection.wait``).
"""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.connection import Connection

import zmq


def step_address(host: str, master_port: int) -> str:
    return f"tcp://{host}:{master_port + 1}"


def answer_address(host: str, master_port: int) -> str:
    return f"tcp://{host}:{master_port + 2}"


class CoreChannel:
    """The core's end: messages out to every other host, their answers into ``inbox``."""

    def __init__(self, host: str, master_port: int) -> None:
        self.context = zmq.Context()
        self.out = self.context.socket(zmq.PUB)
        self.out.setsockopt(zmq.SNDHWM, 0)  # never drop a step: the agents read every one
        self.out.bind(step_address(host, master_port))
        self.answers = self.context.socket(zmq.PULL)
        self.answers.bind(answer_address(host, master_port))
        self.inbox, self._feed = multiprocessing.Pipe(duplex=False)
        threading.Thread(target=self._relay, name="node-answers", daemon=True).start()

    def _relay(self) -> None:
        while True:
            try:
                data = self.answers.recv()
            except zmq.ContextTerminated:
                return
            self._feed.send_bytes(data)

    def publish(self, data: bytes) -> None:
        self.out.send(data)

    def close(self) -> None:
        self.out.close(linger=1000)
        self.answers.close(linger=0)
        self.context.term()


class AgentChannel:
    """A node agent's end: the core's messages in, this host's answers out."""

    def __init__(self, master_addr: str, master_port: int) -> None:
        self.context = zmq.Context()
        self.steps = self.context.socket(zmq.SUB)
        self.steps.setsockopt(zmq.RCVHWM, 0)
        self.steps.setsockopt(zmq.SUBSCRIBE, b"")
        self.steps.connect(step_address(master_addr, master_port))
        self.answers = self.context.socket(zmq.PUSH)
        self.answers.connect(answer_address(master_addr, master_port))

    def receive(self, timeout_ms: int) -> bytes | None:
        """The core's next message, or None after ``timeout_ms`` without one."""
        if not self.steps.poll(timeout_ms):
            return None
        return self.steps.recv()

    def answer(self, data: bytes) -> None:
        self.answers.send(data)

    def close(self) -> None:
        self.answers.close(linger=2000)
        self.steps.close(linger=0)
        self.context.term()


def inbox_of(channel: CoreChannel | None) -> list[Connection]:
    return [channel.inbox] if channel is not None else []
