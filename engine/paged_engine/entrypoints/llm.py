"""The offline API: ``LLM(model=...).generate(prompts, params)``.

``generate`` queues every prompt, steps the engine until all are done and returns outputs in prompt order.
Prompts may be strings, token-id lists, or ``{"prompt_token_ids": [...]}`` / ``{"prompt": "..."}`` dicts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from paged_engine.engine.config import EngineConfig
from paged_engine.engine.llm_engine import LLMEngine
from paged_engine.engine.request_output import RequestOutput
from paged_engine.sampling_params import SamplingParams
from paged_engine.tools import ToolPlan
from paged_engine.wire import LoraInfo

if TYPE_CHECKING:
    from paged_engine.tokenizer import FastTokenizer

PromptType = str | Sequence[int] | dict[str, Any]
Conversation = Sequence[Mapping[str, Any]]


def _normalise(prompts: PromptType | Sequence[PromptType]) -> list[str | list[int]]:
    if isinstance(prompts, str | dict) or (isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    result: list[str | list[int]] = []
    for prompt in prompts:
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                result.append([int(t) for t in prompt["prompt_token_ids"]])
            elif "prompt" in prompt:
                result.append(str(prompt["prompt"]))
            else:
                raise ValueError(f"a prompt dict needs 'prompt' or 'prompt_token_ids', got keys {sorted(prompt)}")
        elif isinstance(prompt, str):
            result.append(prompt)
        else:
            result.append([int(t) for t in prompt])
    return result


class LLM:
    """Offline batched generation. Keyword arguments are :class:`EngineConfig` fields, flat (the scheduler's
    ``max_num_seqs`` etc. included); unset ones take the same defaults as ``paged-engine serve``."""

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.config = EngineConfig.from_kwargs(model=model, **kwargs)
        if self.config.data_parallel_size > 1:
            raise ValueError("LLM runs one engine core: data_parallel_size is for `paged-engine serve` (or run one "
                             "LLM per process)")  # fmt: skip
        self.engine = LLMEngine(self.config)
        self._ids = itertools.count()

    @property
    def tokenizer(self) -> FastTokenizer:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        lora_name: str | Sequence[str | None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt; all prompts are checked before any is queued, so one bad prompt refuses
        the call without running the others. ``lora_name``: a loaded adapter for every prompt, or one per prompt
        (``None``: the base model)."""
        items = _normalise(prompts)
        if lora_name is None or isinstance(lora_name, str):
            loras: list[str | None] = [lora_name] * len(items)
        else:
            loras = list(lora_name)
            if len(loras) != len(items):
                raise ValueError(f"got {len(loras)} lora names for {len(items)} prompts")
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(items)
        else:
            params = list(sampling_params)
            if len(params) != len(items):
                raise ValueError(f"got {len(params)} sampling params for {len(items)} prompts")
        ids = [f"llm-{next(self._ids)}" for _ in items]
        queued: list[str] = []
        try:
            for request_id, prompt, p, lora in zip(ids, items, params, loras, strict=True):
                self.engine.add_request(request_id, prompt, p, lora)
                queued.append(request_id)
        except Exception:
            for request_id in queued:
                self.engine.abort_request(request_id)
            raise
        done: dict[str, RequestOutput] = {}
        while len(done) < len(ids):
            for output in self.engine.step():
                done[output.request_id] = output
        return [done[request_id] for request_id in ids]

    def beam_search(
        self,
        prompts: PromptType | Sequence[PromptType],
        beam_width: int,
        max_tokens: int = 16,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        ignore_eos: bool = False,
    ) -> list[RequestOutput]:
        """Beam search as vLLM's ``LLM.beam_search`` offers it: each output holds the ``beam_width`` finished
        hypotheses, best first. The same as ``generate`` with ``SamplingParams(use_beam_search=True,
        n=beam_width, temperature=0, ...)``."""
        params = SamplingParams(
            n=beam_width,
            temperature=0.0,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            use_beam_search=True,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
        )
        return self.generate(prompts, params)

    def load_lora(self, name: str, path: str) -> LoraInfo:
        """Load a PEFT adapter folder as ``name`` (the engine must run with LoRA on: ``enable_lora`` or
        ``lora_modules``)."""
        return self.engine.core.load_lora(name, path)

    def shutdown(self) -> None:
        """Stop the worker processes (tensor parallelism) now; otherwise they stop when this process exits."""
        self.engine.core.shutdown()

    def unload_lora(self, name: str) -> None:
        self.engine.core.unload_lora(name)

    def chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: SamplingParams | None = None,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        tool_parser: str = "auto",
        parallel_tool_calls: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        lora_name: str | None = None,
    ) -> list[RequestOutput]:
        """Generate a reply to each conversation (OpenAI-shaped messages), rendered by the model's chat template.

        ``tools`` and ``tool_choice`` as in OpenAI's chat completions: each output then carries ``tool_calls``
        (parsed by ``tool_parser``; ``auto``: the template's family) and ``content``, the text outside them."""
        conversations = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        template = self.tokenizer.chat_template
        source = template.source if template is not None else None
        plan = ToolPlan.create(tools, tool_choice, source, tool_parser, parallel_tool_calls)
        params = sampling_params or SamplingParams()
        constraint = plan.constraint() if plan is not None else None
        if constraint is not None:
            if params.structured_output is not None:
                raise ValueError("tool_choice required or a named function cannot be combined with structured_output")
            params = dataclasses.replace(params, structured_output=constraint)
        prompts: list[PromptType] = []
        for conversation in conversations:
            turns, variables = plan.render_inputs(conversation) if plan is not None else (list(conversation), {})
            text = self.tokenizer.apply_chat_template(turns, **{**(chat_template_kwargs or {}), **variables})
            prompts.append(self.tokenizer.encode(text, add_special_tokens=False))
        outputs = self.generate(prompts, params, lora_name)
        if plan is not None:
            for output in outputs:
                for completion in output.outputs:
                    completion.content, calls = plan.parse(completion.text)
                    completion.tool_calls = calls
        return outputs
