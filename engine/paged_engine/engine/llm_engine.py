"""The front-end over :class:`EngineCore`: tokenisation, request validation, ``n > 1`` regrouping, incremental
detokenisation with stop strings, and assembling :class:`RequestOutput`.

Parallel samples come back from the core as children ``"<id>-<i>"`` with ``parent_req_id``/``index``; they are
folded back into one ``RequestOutput`` with ``n`` completions. A stop string is found by the detokenizer on
this side, so the request is then aborted in the core and reported with ``finish_reason="stop"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from paged_engine.core import EngineCoreOutput, RequestValidationError
from paged_engine.engine.config import EngineConfig
from paged_engine.engine.engine_core import EngineCore
from paged_engine.engine.outputs import CompletionOutput, RequestOutput
from paged_engine.loader.default_model import resolve_model
from paged_engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from paged_engine.tokenizer.detokenizer import IncrementalDetokenizer


@dataclass
class _Sample:
    output: CompletionOutput
    detokenizer: IncrementalDetokenizer
    core_id: str


@dataclass
class _RequestState:
    output: RequestOutput
    params: SamplingParams
    samples: dict[str, _Sample]  # core request id -> sample


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        from paged_engine.tokenizer import load_tokenizer
        from paged_engine.tokenizer.loader import write_gguf_tokenizer_folder

        self.config = config
        folder = resolve_model(config.model, write_tokenizer=write_gguf_tokenizer_folder)
        self.model_folder = Path(folder)
        self.tokenizer = load_tokenizer(folder)
        self.core = EngineCore(config, self.model_folder)
        self._requests: dict[str, _RequestState] = {}
        self._core_to_request: dict[str, str] = {}

    @property
    def max_model_len(self) -> int:
        return self.core.max_model_len

    def add_request(self, request_id: str, prompt: str | Sequence[int], params: SamplingParams | None = None) -> None:
        """Tokenise and queue a request; bad input raises a ``ValueError`` naming the limit and changes nothing."""
        params = params if params is not None else SamplingParams()
        params.validate()
        if request_id in self._requests:
            raise RequestValidationError("request_id", f"request id {request_id!r} is already in use")
        text = prompt if isinstance(prompt, str) else None
        token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        self.core.add_request(self.core.make_request(request_id, token_ids, params))
        child_ids = [request_id] if params.n == 1 else [f"{request_id}-{i}" for i in range(params.n)]
        samples = {
            core_id: _Sample(CompletionOutput(index=i), self._detokenizer(token_ids, params), core_id)
            for i, core_id in enumerate(child_ids)
        }
        output = RequestOutput(request_id, text, token_ids, [s.output for s in samples.values()])
        if params.prompt_logprobs is not None:
            output.prompt_logprobs = []
        self._requests[request_id] = _RequestState(output, params, samples)
        for core_id in child_ids:
            self._core_to_request[core_id] = request_id

    def _detokenizer(self, prompt_token_ids: list[int], params: SamplingParams) -> IncrementalDetokenizer:
        from paged_engine.tokenizer.detokenizer import IncrementalDetokenizer

        return IncrementalDetokenizer.from_params(self.tokenizer, prompt_token_ids, params)

    def abort_request(self, request_id: str) -> None:
        state = self._requests.get(request_id)
        if state is None:
            return
        self.core.abort_requests([request_id])
        for sample in state.samples.values():
            if not sample.output.finished:
                sample.output.finish_reason = "abort"
            self._core_to_request.pop(sample.core_id, None)
        del self._requests[request_id]

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def step(self) -> list[RequestOutput]:
        """Run one engine step; returns the requests that finished in it."""
        touched: set[str] = set()
        for out in self.core.step():
            request_id = self._core_to_request.get(out.req_id)
            if request_id is not None:
                self._apply(self._requests[request_id], out)
                touched.add(request_id)
            elif out.req_id in self._requests:  # a fork parent failed before forking: every sample ends with it
                state = self._requests[out.req_id]
                for core_id in state.samples:
                    self._apply(state, dataclasses.replace(out, req_id=core_id))
                touched.add(out.req_id)
        finished = []
        for request_id in touched:
            state = self._requests[request_id]
            if state.output.finished:
                finished.append(state.output)
                del self._requests[request_id]
                for core_id in state.samples:
                    self._core_to_request.pop(core_id, None)
        return finished

    def _apply(self, state: _RequestState, out: EngineCoreOutput) -> None:
        sample = state.samples[out.req_id]
        completion = sample.output
        if out.prompt_logprobs and state.output.prompt_logprobs is not None and completion.index == 0:
            state.output.prompt_logprobs.extend(out.prompt_logprobs)
        state.output.num_cached_tokens = max(state.output.num_cached_tokens, out.num_cached_tokens)
        if completion.finished:
            return
        completion.token_ids.extend(out.new_token_ids)
        if state.params.logprobs is not None:
            completion.logprobs = (completion.logprobs or []) + list(out.logprobs)
        detok = sample.detokenizer
        detok.update(out.new_token_ids)
        if detok.stop is not None:
            if not out.finished:
                self.core.abort_requests([out.req_id])
            completion.finish_reason, completion.stop_reason = "stop", detok.stop
        elif out.finished:
            detok.flush()
            completion.finish_reason = str(out.finish_reason)
            completion.stop_reason = out.stop_token_id
            completion.error = out.error
        completion.text = detok.output_text
