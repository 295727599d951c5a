"""Completions and chat completions: from a validated HTTP body to engine requests and back to OpenAI JSON.

Each HTTP request becomes one engine request per (prompt, choice). All of them feed one queue, so streaming
interleaves choices as the engine produces them. Stop strings are found here, in the API server process,
where the text is: a hit aborts the engine request and truncates the text. Whatever ends the HTTP request
early (client gone, error) aborts every engine request it started, so their KV blocks are freed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from paged_engine.core import RequestValidationError
from paged_engine.core.scheduler_output import Logprobs
from paged_engine.output_processor import ChoiceState, ChoiceUpdate
from paged_engine.request_limits import RequestLimits
from paged_engine.sampling_params import SamplingParams, SamplingParamsError
from paged_engine.server.data_parallel import EngineCores
from paged_engine.server.engine_client import EngineDeadError, StreamQueue
from paged_engine.server.errors import APIError, bad_request
from paged_engine.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    NamedToolChoice,
    PromptTokensDetails,
    Usage,
    _SamplingFields,
    now,
    random_id,
)
from paged_engine.server.timeline import RequestTimeline
from paged_engine.structured_output import grammar
from paged_engine.tokenizer import Tokenizer
from paged_engine.tools import ToolCallStream, ToolPlan


class Serving:
    def __init__(
        self,
        client: EngineCores,
        tokenizer: Tokenizer,
        served_model_name: str,
        limits: RequestLimits,
        max_waiting_requests: int,
        timeline_factory: Callable[[str, str, int, int], RequestTimeline],
        tool_parser: str = "auto",
        loras: list[str] | None = None,
        on_lora_request: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.model_name = served_model_name
        self.limits = limits
        self.max_model_len = limits.max_model_len
        self.max_waiting_requests = max_waiting_requests
        self.timeline = timeline_factory
        self.tool_parser = tool_parser  # "auto": chosen from the chat template's family
        self.draining = False
        self.loras: list[str] = list(loras or [])  # LoRA adapters the core has loaded, each a model name
        self.on_lora_request = on_lora_request  # counts requests per adapter (metrics)

    # ---- validation shared by both endpoints ----

    def resolve_model(self, model: str | None) -> str | None:
        """The LoRA adapter a request's ``model`` names (None: the base model); other names get a 404."""
        if model is None or model == self.model_name:
            return None
        if model in self.loras:
            return model
        served = ", ".join(repr(name) for name in [self.model_name, *self.loras])
        raise APIError(404, f"the model {model!r} does not exist; this server serves {served}",
                       type="not_found_error", param="model")  # fmt: skip

    def check_model(self, model: str | None) -> None:
        self.resolve_model(model)

    def response_model(self, model: str | None) -> str:
        """The model name a response reports: the adapter's when one served it (checked before it started)."""
        return model if model is not None and model in self.loras else self.model_name

    def check_admission(self) -> None:
        if self.draining:
            raise APIError(503, "the server is draining and accepts no new requests", type="unavailable_error",
                           headers={"Retry-After": "5"})  # fmt: skip
        if self.client.dead:
            raise APIError(503, "the engine is not running", type="unavailable_error")
        if self.client.num_unscheduled >= self.max_waiting_requests:
            raise APIError(
                503, f"the waiting queue is full ({self.max_waiting_requests} requests); retry later",
                type="unavailable_error", headers={"Retry-After": "1"},
            )  # fmt: skip

    def check_prompt(self, token_ids: list[int], param: str = "prompt") -> None:
        try:
            self.limits.check_prompt(token_ids, param)
        except RequestValidationError as exc:
            raise bad_request(str(exc), exc.param) from None

    def check_token_ids(self, param: str, token_ids: list[int]) -> None:
        try:
            self.limits.check_token_ids(param, token_ids)
        except RequestValidationError as exc:
            raise bad_request(str(exc), exc.param) from None

    def sampling_params(
        self,
        body: _SamplingFields,
        prompt_len: int,
        max_tokens: int | None,
        logprobs: int | None,
        prompt_logprobs: int | None,
        names: tuple[str, str] = ("max_tokens", "logprobs"),
    ) -> SamplingParams:
        """The engine's parameters for one prompt, every model-dependent limit checked before the core sees them.
        ``names``: what this endpoint calls max_tokens and logprobs, so errors name the field the client sent."""
        max_tokens_param, logprobs_param = names
        try:
            self.limits.check_max_tokens(prompt_len, max_tokens, max_tokens_param)
            params = body.base_sampling_params(
                self.limits.room(prompt_len) if max_tokens is None else max_tokens, logprobs, prompt_logprobs
            )
            self.limits.check_params(params, logprobs_param)
            self.check_structured_output(body)
        except (SamplingParamsError, RequestValidationError) as exc:
            raise bad_request(str(exc), exc.param) from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return params

    @staticmethod
    def check_structured_output(body: _SamplingFields) -> None:
        """A constraint that does not parse (bad schema, regex or grammar) is refused naming the field that set it."""
        spec, field = body.structured_output()
        if spec is None:
            return
        try:
            grammar.check(spec)
        except SamplingParamsError as exc:
            raise SamplingParamsError(field or exc.param, f"{field}: {exc}") from None

    # ---- the engine conversation ----

    async def run(
        self,
        operation: str,
        prompts: list[list[int]],
        params: list[SamplingParams],
        body: _SamplingFields,
        base_id: str,
    ) -> AsyncIterator[ChoiceUpdate]:
        """Starts every (prompt, choice) engine request and yields their updates as they arrive."""
        queue: StreamQueue = asyncio.Queue()
        choices: dict[str, ChoiceState] = {}
        timelines: dict[str, RequestTimeline] = {}
        engine_ids: list[str] = []
        arrival = time.time()
        lora = self.resolve_model(body.model)
        if lora is not None and self.on_lora_request is not None:
            self.on_lora_request(lora)
        try:
            for p, (prompt, sp) in enumerate(zip(prompts, params, strict=True)):
                rid = f"{base_id}-{p}"
                stream_ids = self.client.add_request(
                    rid, prompt, sp, arrival, body.priority, body.cache_salt, queue, lora_name=lora
                )
                engine_ids.append(rid)
                for i, sid in enumerate(stream_ids):
                    choices[sid] = ChoiceState.create(self.tokenizer, p * sp.n + i, sid, prompt, sp, prompt_index=p)
                    timelines[sid] = self.timeline(operation, sid, len(prompt), sp.max_tokens or 0)
            open_ids = set(choices)
            while open_ids:
                sid, out = await queue.get()
                choice, timeline = choices[sid], timelines[sid]
                if out is None:
                    open_ids.discard(sid)
                    if not choice.finished:
                        raise EngineDeadError("the engine stopped while the request was running")
                    continue
                if out.first_scheduled_time is not None:
                    timeline.scheduled(out.first_scheduled_time)
                if out.new_token_ids:
                    timeline.tokens(len(out.new_token_ids))
                started = time.perf_counter()
                update = choice.apply(out)
                timeline.phase("detokenize", time.perf_counter() - started)
                if update.finished:
                    open_ids.discard(sid)
                    timeline.finish(choice.finish_reason or "abort", len(choice.token_ids))
                    if choice.error is not None:
                        raise _engine_error(choice)
                    if update.stopped_here:
                        self.client.abort([sid])  # a stop string ended it; free its blocks now
                if update.text or update.token_ids or update.finished:
                    yield update
        finally:
            unfinished = [sid for sid, c in choices.items() if not c.finished]
            if unfinished:
                self.client.abort(engine_ids)
                for sid in unfinished:
                    timelines[sid].finish("abort", len(choices[sid].token_ids))

    def usage(self, prompts: list[list[int]], choices: list[ChoiceState]) -> Usage:
        prompt_tokens = sum(len(p) for p in prompts)
        completion = sum(len(c.token_ids) for c in choices)
        cached: dict[int, int] = {}
        for c in choices:
            cached[c.prompt_index] = max(cached.get(c.prompt_index, 0), c.num_cached_tokens)
        return Usage(
            prompt_tokens=prompt_tokens, completion_tokens=completion, total_tokens=prompt_tokens + completion,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=sum(cached.values())),
        )  # fmt: skip

    # ---- /v1/completions ----

    def prepare_completion(self, body: CompletionRequest) -> tuple[list[list[int]], list[SamplingParams]]:
        self.check_model(body.model)
        try:
            raw_prompts = body.prompts()
        except ValueError as exc:
            raise bad_request(str(exc), "prompt") from None
        prompts = [
            self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in raw_prompts
        ]  # fmt: skip
        logprobs = body.logprobs
        prompt_logprobs = logprobs if body.echo and logprobs is not None else None
        params = []
        for tokens in prompts:
            self.check_prompt(tokens)
            params.append(self.sampling_params(body, len(tokens), body.max_tokens, logprobs, prompt_logprobs))
        self.check_admission()
        return prompts, params

    def completion_logprobs(
        self, entries: list[Logprobs | None], offset: int, prompt: list[int] | None = None
    ) -> dict[str, list[Any]]:
        """The legacy ``logprobs`` object; ``prompt`` names the echoed first prompt token, which has no logprob
        (its entry is None). A special token there (BOS) is listed but takes no room in the echoed text."""
        tokens, token_logprobs, top, offsets = [], [], [], []
        for entry in entries:
            if entry is None:
                first = [prompt[0]] if prompt else []
                tokens.append(self.tokenizer.decode(first, skip_special_tokens=False))
                token_logprobs.append(None)
                top.append(None)
                offsets.append(offset)
                offset += len(self.tokenizer.decode(first, skip_special_tokens=True))
                continue
            text = self.tokenizer.decode([entry.token_ids[0]], skip_special_tokens=False)
            tokens.append(text)
            token_logprobs.append(entry.logprobs[0])
            top.append({
                self.tokenizer.decode([t], skip_special_tokens=False): lp
                for t, lp in zip(entry.token_ids[1:], entry.logprobs[1:], strict=True)
            })  # fmt: skip
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}

    async def completion(self, body: CompletionRequest) -> dict[str, Any]:
        prompts, params = self.prepare_completion(body)
        rid = random_id("cmpl")
        choices: dict[int, ChoiceState] = {}
        async for update in self.run("text_completion", prompts, params, body, rid):
            choices[update.choice.index] = update.choice
        ordered = [choices[i] for i in sorted(choices)]
        return {
            "id": rid, "object": "text_completion", "created": now(), "model": self.response_model(body.model),
            "choices": [self._completion_choice(c, prompts[c.prompt_index], body) for c in ordered],
            "usage": self.usage(prompts, ordered).model_dump(),
        }  # fmt: skip

    def _echo_text(self, body: CompletionRequest, index: int, prompt: list[int]) -> str:
        """The prompt as the client sent it: its own text, or the decoded tokens (without BOS and the like)."""
        raw = body.prompts()[index]
        return raw if isinstance(raw, str) else self.tokenizer.decode(prompt, skip_special_tokens=True)

    def _completion_choice(self, c: ChoiceState, prompt: list[int], body: CompletionRequest) -> dict[str, Any]:
        text = c.text
        logprobs = None
        if body.echo:
            text = self._echo_text(body, c.prompt_index, prompt) + text
            if body.logprobs is not None:
                entries = list(c.prompt_logprobs or []) + list(c.logprobs)
                logprobs = self.completion_logprobs(entries, 0, prompt)
        elif body.logprobs is not None:
            logprobs = self.completion_logprobs(list(c.logprobs), 0)
        return {
            "index": c.index, "text": text, "logprobs": logprobs, "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
        }  # fmt: skip

    def completion_stream(
        self, body: CompletionRequest, prompts: list[list[int]], params: list[SamplingParams]
    ) -> AsyncGenerator[str, None]:
        offsets: dict[int, int] = {}  # text_offset of each choice's next token
        # With echo, a choice's first chunk starts with its prompt: by then the prompt's logprobs (computed with
        # the prompt, possibly over several steps) have all arrived.
        echoes = {
            p * sp.n + i: self._echo_text(body, p, prompt)
            for p, (prompt, sp) in enumerate(zip(prompts, params, strict=True))
            for i in range(sp.n)
        } if body.echo else {}  # fmt: skip

        def payload(u: ChoiceUpdate) -> dict[str, Any]:
            index = u.choice.index
            text, entries = u.text, list(u.logprobs)
            if index in echoes:
                text = echoes.pop(index) + text
                entries = list(u.choice.prompt_logprobs or []) + entries
            logprobs = None
            if body.logprobs is not None and entries:
                logprobs = self.completion_logprobs(entries, offsets.get(index, 0), prompts[u.choice.prompt_index])
            offsets[index] = offsets.get(index, 0) + len(text)
            return {"index": index, "text": text, "logprobs": logprobs}

        return self._sse("text_completion", "text_completion", random_id("cmpl"), body, prompts, params, [], payload)

    async def _sse(
        self,
        operation: str,
        object_name: str,
        rid: str,
        body: _SamplingFields,
        prompts: list[list[int]],
        params: list[SamplingParams],
        opening: list[dict[str, Any]],
        payload: Callable[[ChoiceUpdate], dict[str, Any]],
    ) -> AsyncGenerator[str, None]:
        """Server-sent events for one request: ``opening`` chunks, one chunk per update, the usage chunk when
        ``stream_options.include_usage`` asks for it (``usage`` is null in every other chunk), then ``[DONE]``."""
        created, model = now(), self.response_model(body.model)
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        seen: dict[int, ChoiceState] = {}

        def event(choices: list[dict[str, Any]], usage: Usage | None = None) -> str:
            data: dict[str, Any] = {"id": rid, "object": object_name, "created": created, "model": model,
                                    "choices": choices}  # fmt: skip
            if include_usage:
                data["usage"] = None if usage is None else usage.model_dump()
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

        try:
            for choice in opening:
                yield event([choice])
            async for u in self.run(operation, prompts, params, body, rid):
                c = u.choice
                seen[c.index] = c
                chunk = payload(u)  # may set its own finish_reason (tool_calls)
                chunk.setdefault("finish_reason", c.finish_reason if u.finished else None)
                yield event([{**chunk, "stop_reason": c.stop_reason if u.finished else None}])
            if include_usage:
                yield event([], self.usage(prompts, list(seen.values())))
        except EngineDeadError as exc:
            yield _stream_error(503, "unavailable_error", str(exc))
        except APIError as exc:
            yield _stream_error(exc.status, exc.type, exc.message)
        yield "data: [DONE]\n\n"

    # ---- /v1/chat/completions ----

    def tool_plan(self, body: ChatCompletionRequest) -> ToolPlan | None:
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, NamedToolChoice) else body.tool_choice
        template = getattr(self.tokenizer, "chat_template", None)
        try:
            source = template.source if template is not None else None
            return ToolPlan.create(tools, choice, source, self.tool_parser, body.parallel_tool_calls)
        except SamplingParamsError as exc:
            raise bad_request(str(exc), exc.param) from None

    def prepare_chat(self, body: ChatCompletionRequest) -> tuple[list[list[int]], list[SamplingParams]]:
        self.check_model(body.model)
        plan = self.tool_plan(body)
        messages = [m.template_message() for m in body.messages]
        extra = dict(body.chat_template_kwargs or {})
        if plan is not None:
            try:
                messages, variables = plan.render_inputs(messages)
            except SamplingParamsError as exc:
                raise bad_request(str(exc), exc.param) from None
            extra.update(variables)
        text = self.render_chat(messages, body.add_generation_prompt, extra)
        prompt = self.tokenizer.encode(text, add_special_tokens=False)
        self.check_prompt(prompt, "messages")
        top = body.top_logprobs or 0
        max_tokens_param = "max_tokens" if body.max_completion_tokens is None else "max_completion_tokens"
        params = self.sampling_params(
            body, len(prompt), body.requested_max_tokens(), top if body.logprobs else None, None,
            names=(max_tokens_param, "top_logprobs"),
        )  # fmt: skip
        constraint = plan.constraint() if plan is not None else None
        if constraint is not None:
            if params.use_beam_search:
                raise bad_request("tool_choice required or a named function cannot be combined with use_beam_search",
                                  "tool_choice")  # fmt: skip
            if params.structured_output is not None:
                raise bad_request("tool_choice required or a named function cannot be combined with another output "
                                  "constraint", "tool_choice")  # fmt: skip
            params.structured_output = constraint
        self.check_admission()
        return [prompt], [params]

    def chat_message(self, c: ChoiceState, plan: ToolPlan | None) -> tuple[dict[str, Any], str | None]:
        """The assistant message and finish reason of a finished choice (``tool_calls`` when it called tools)."""
        if plan is None:
            return {"role": "assistant", "content": c.text}, c.finish_reason
        content, calls = plan.parse(c.text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [call.openai() for call in calls]
        return message, "tool_calls" if calls and c.finish_reason == "stop" else c.finish_reason

    def render_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool, extra: dict[str, Any]) -> str:
        """The prompt text of a conversation; a template that refuses it is the client's 400, naming why."""
        try:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **extra)
        except ValueError as exc:
            raise bad_request(f"the chat template could not render these messages: {exc}", "messages") from None

    def chat_logprobs(self, entries: list[Logprobs]) -> dict[str, Any]:
        def item(token: int, logprob: float) -> dict[str, Any]:
            text = self.tokenizer.decode([token], skip_special_tokens=False)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        return {"content": [
            {**item(e.token_ids[0], e.logprobs[0]),
             "top_logprobs": [item(t, lp) for t, lp in zip(e.token_ids[1:], e.logprobs[1:], strict=True)]}
            for e in entries
        ]}  # fmt: skip

    async def chat(self, body: ChatCompletionRequest) -> dict[str, Any]:
        prompts, params = self.prepare_chat(body)
        rid = random_id("chatcmpl")
        choices: dict[int, ChoiceState] = {}
        async for update in self.run("chat", prompts, params, body, rid):
            choices[update.choice.index] = update.choice
        ordered = [choices[i] for i in sorted(choices)]
        plan = self.tool_plan(body)
        messages = [self.chat_message(c, plan) for c in ordered]
        return {
            "id": rid, "object": "chat.completion", "created": now(), "model": self.response_model(body.model),
            "choices": [{
                "index": c.index, "message": message,
                "logprobs": self.chat_logprobs(c.logprobs) if body.logprobs else None,
                "finish_reason": finish_reason, "stop_reason": c.stop_reason,
            } for c, (message, finish_reason) in zip(ordered, messages, strict=True)],
            "usage": self.usage(prompts, ordered).model_dump(),
        }  # fmt: skip

    def chat_stream(
        self, body: ChatCompletionRequest, prompts: list[list[int]], params: list[SamplingParams]
    ) -> AsyncGenerator[str, None]:
        opening = [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                   for i in range(params[0].n)]  # fmt: skip
        plan = self.tool_plan(body)
        streams: dict[int, ToolCallStream] = {}

        def payload(u: ChoiceUpdate) -> dict[str, Any]:
            chunk: dict[str, Any] = {
                "index": u.choice.index,
                "logprobs": self.chat_logprobs(u.logprobs) if body.logprobs and u.logprobs else None,
            }
            text = u.text
            if plan is None:
                chunk["delta"] = {"content": text} if text or not u.finished else {}
                return chunk
            stream = streams.setdefault(u.choice.index, plan.stream())
            text = stream.feed(text)
            delta: dict[str, Any] = {}
            if u.finished:
                rest, calls = stream.finish()
                text += rest
                if calls:
                    delta["tool_calls"] = [call.openai(k) for k, call in enumerate(calls)]
                    if u.choice.finish_reason == "stop":
                        chunk["finish_reason"] = "tool_calls"
            if text or not (u.finished or delta):
                delta = {"content": text, **delta}
            chunk["delta"] = delta
            return chunk

        return self._sse("chat", "chat.completion.chunk", random_id("chatcmpl"), body, prompts, params, opening,
                         payload)  # fmt: skip


def _engine_error(choice: ChoiceState) -> APIError:
    """The core refused the request on admission (the client's to fix), or failed it inside a step (ours)."""
    if choice.finish_reason == "error":
        return APIError(500, str(choice.error), type="internal_server_error")
    return bad_request(str(choice.error))


def _stream_error(status: int, kind: str, message: str) -> str:
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return f"data: {json.dumps(body)}\n\n"
