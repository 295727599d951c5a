"""The in-process front-end over :class:`EngineCore`: tokenisation, request validation, and the shared output
processor (detokenisation, stop strings, ``n > 1`` regrouping) assembling :class:`RequestOutput`.

A stop string is found by the output processor on this side, so the request is then aborted in the core and
reported with ``finish_reason="stop"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from paged_engine.core import RequestValidationError
from paged_engine.engine.config import EngineConfig
from paged_engine.engine.engine_core import EngineCore
from paged_engine.engine.request_output import CompletionOutput, RequestOutput
from paged_engine.engine.startup import resolve_model_folder
from paged_engine.output_processor import ChoiceState, OutputRouter
from paged_engine.sampling_params import SamplingParams


@dataclass
class _RequestState:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    wants_logprobs: bool
    choices: list[ChoiceState] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return all(c.finished for c in self.choices)

    def output(self) -> RequestOutput:
        completions = [
            CompletionOutput(
                index=c.index, text=c.text, token_ids=list(c.token_ids), finish_reason=c.finish_reason,
                stop_reason=c.stop_reason, logprobs=list(c.logprobs) if self.wants_logprobs else None,
                error=c.error,
            )
            for c in self.choices
        ]  # fmt: skip
        first = self.choices[0]
        return RequestOutput(
            self.request_id, self.prompt, self.prompt_token_ids, completions, prompt_logprobs=first.prompt_logprobs,
            num_cached_tokens=max(c.num_cached_tokens for c in self.choices),
        )  # fmt: skip


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        from paged_engine.tokenizer import load_tokenizer

        self.config = config
        self.model_folder = resolve_model_folder(config)
        self.tokenizer = load_tokenizer(self.model_folder)
        self.core = EngineCore(config, self.model_folder)
        self._requests: dict[str, _RequestState] = {}
        self._router: OutputRouter[tuple[_RequestState, ChoiceState]] = OutputRouter()

    @property
    def max_model_len(self) -> int:
        return self.core.max_model_len

    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        lora_name: str | None = None,
    ) -> None:
        """Tokenise and queue a request (under the loaded LoRA adapter ``lora_name``, if given); bad input raises
        a ``ValueError`` naming the limit and changes nothing."""
        params = params if params is not None else SamplingParams()
        params.validate()
        if request_id in self._requests:
            raise RequestValidationError("request_id", f"request id {request_id!r} is already in use")
        text = prompt if isinstance(prompt, str) else None
        token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        self.core.add_request(self.core.make_request(request_id, token_ids, params, lora_name=lora_name))
        state = _RequestState(request_id, text, token_ids, wants_logprobs=params.logprobs is not None)

        def choice(stream_id: str, index: int) -> tuple[_RequestState, ChoiceState]:
            made = ChoiceState.create(self.tokenizer, index, stream_id, token_ids, params)
            if params.prompt_logprobs is not None:
                made.prompt_logprobs = []
            state.choices.append(made)
            return state, made

        self._router.add(request_id, params.n, choice)
        self._requests[request_id] = state

    def abort_request(self, request_id: str) -> None:
        state = self._requests.pop(request_id, None)
        if state is None:
            return
        self.core.abort_requests([request_id])
        for choice in state.choices:
            self._router.remove(choice.request_id)
            if not choice.finished:
                choice.finish_reason = "abort"

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def step(self) -> list[RequestOutput]:
        """Run one engine step; returns the requests that finished in it."""
        touched: dict[str, _RequestState] = {}
        stopped: list[str] = []
        for out in self.core.step():
            for stream_id, (state, choice) in self._router.route(out):
                update = choice.apply(out)
                if update.stopped_here:
                    stopped.append(stream_id)
                    self._router.remove(stream_id)
                touched[state.request_id] = state
        if stopped:
            self.core.abort_requests(stopped)
        finished = []
        for request_id, state in touched.items():
            if state.finished:
                finished.append(state.output())
                del self._requests[request_id]
        return finished
