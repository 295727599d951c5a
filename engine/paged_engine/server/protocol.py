"""OpenAI-compatible request and response bodies.

Requests are validated here, before anything reaches the engine, so a client's mistake becomes a 400 that
names the parameter. Unknown fields are refused (as OpenAI does) rather than silently ignored: a misspelt
``temprature`` should not quietly sample at 1.0.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.json_schema import SkipJsonSchema

from paged_engine.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputParams

# Limits that depend on the loaded model: the schema marks the fields, and ``server/openapi.py`` writes the
# model's figures into the served schema (the validation itself is ``RequestLimits``, in the API server).
TOKEN_ID = {"x-paged-limit": "token_id"}  # [0, vocab_size)
GENERATED_TOKENS = {"x-paged-limit": "generated_tokens"}  # [1, max_model_len - 1]
NUM_LOGPROBS = {"x-paged-limit": "logprobs"}  # [0, max_logprobs]
TOKEN_ID_KEYS = {"x-paged-limit": "token_id_keys"}  # object keys: token ids in [0, vocab_size)
# Integers a JSON client can send exactly (JSON numbers are doubles to many clients, and a bound beyond 2**53
# would not round-trip either).
SAFE_INT = (-(2**53 - 1), 2**53 - 1)

TokenId = Annotated[int, Field(ge=0)]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]


def requires(field: str, **required: Any) -> dict[str, Any]:
    """JSON Schema: when ``field`` is present, the fields in ``required`` must hold these values."""
    return {
        "dependentSchemas": {
            field: {"properties": {k: {"const": v} for k, v in required.items()}, "required": list(required)}
        }
    }


CONSTRAINT_FIELDS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar")


def one_constraint() -> dict[str, Any]:
    """JSON Schema: at most one of the output-constraint fields."""
    return {
        "dependentSchemas": {
            field: {"not": {"anyOf": [{"required": [other]} for other in CONSTRAINT_FIELDS if other != field]}}
            for field in CONSTRAINT_FIELDS
        }
    }


def beam_search_rules(*, chat: bool) -> dict[str, Any]:
    """JSON Schema: with ``use_beam_search: true``, the fields beam search cannot combine with keep their defaults
    (``SamplingParams`` refuses them with a 400 naming each)."""
    defaults: dict[str, Any] = {
        "stream": {"const": False}, "n": {"maximum": 64}, "temperature": {"enum": [0, None]},
        "top_p": {"enum": [1, None]}, "top_k": {"enum": [-1, 0, None]}, "min_p": {"enum": [0, None]},
        "presence_penalty": {"enum": [0, None]}, "frequency_penalty": {"enum": [0, None]},
        "repetition_penalty": {"enum": [1, None]}, "logit_bias": {"type": "null"},
        "allowed_token_ids": {"type": "null"}, "min_tokens": {"const": 0}, "stop": {"type": "null"},
        **{field: {"type": "null"} for field in CONSTRAINT_FIELDS},
    }  # fmt: skip
    if chat:
        defaults.update(logprobs={"const": False}, tool_choice={"enum": ["none", "auto", None]})
    else:
        defaults.update(logprobs={"type": "null"})
    return {
        "if": {"properties": {"use_beam_search": {"const": True}}, "required": ["use_beam_search"]},
        "then": {"properties": defaults},
    }


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(_Strict):
    name: str = Field("response", max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="a JSON schema; absent: any JSON")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """OpenAI's ``response_format``: plain text, any JSON object, or JSON matching ``json_schema.schema``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="required with type json_schema")

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type json_schema, and only then")
        return self


class _SamplingFields(_Strict):
    """Parameters shared by completions and chat completions (OpenAI's plus the usual engine extensions)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "dependentSchemas": {
                **requires("stream_options", stream=True)["dependentSchemas"],
                **one_constraint()["dependentSchemas"],
            },
            **beam_search_rules(chat=False),
        },
    )

    model: str | None = None
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, le=SAFE_INT[1], description="-1 or 0: disabled")
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=SAFE_INT[0], le=SAFE_INT[1])
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    logit_bias: (
        Annotated[
            dict[Annotated[str, StringConstraints(pattern=r"^[0-9]+$")], Annotated[float, Field(ge=-100.0, le=100.0)]],
            Field(json_schema_extra={"additionalProperties": False}),
        ]
        | None
    ) = Field(None, description="token id (as a string) -> bias added to its logit", json_schema_extra=TOKEN_ID_KEYS)
    allowed_token_ids: list[TokenId] | None = Field(None, min_length=1, json_schema_extra=TOKEN_ID)
    stop: NonEmptyStr | Annotated[list[NonEmptyStr], Field(max_length=64)] | None = None
    stop_token_ids: list[TokenId] | None = Field(None, json_schema_extra=TOKEN_ID)
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, le=SAFE_INT[1], description="at most max_tokens")
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = Field(None, description="only with stream: true")
    priority: int = Field(0, ge=SAFE_INT[0], le=SAFE_INT[1], description="lower is served first (priority scheduling)")
    cache_salt: str | None = Field(None, min_length=1)
    user: str | None = None
    response_format: ResponseFormat | None = None
    # vLLM's structured-output extensions; at most one of these and response_format
    guided_json: str | dict[str, Any] | None = Field(None, description="a JSON schema the output must match")
    guided_regex: str | None = Field(None, min_length=1, description="a regular expression the output must match")
    guided_choice: Annotated[list[NonEmptyStr], Field(min_length=1, max_length=1024)] | None = Field(
        None, description="the output is exactly one of these strings"
    )
    guided_grammar: str | None = Field(None, min_length=1, description="an EBNF grammar (start rule: root)")
    # vLLM's beam-search extensions: n is the beam width, and all n beams are returned, best first
    use_beam_search: bool = Field(False, description="beam search of width n (temperature 0, no stream)")
    length_penalty: float = Field(1.0, ge=-10.0, le=10.0, description="beam score: logprob / length ** this")
    early_stopping: bool | Literal["never"] = Field(False, description="beam search stop rule, as in transformers")

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        return stops

    def structured_output(self) -> tuple[StructuredOutputParams | None, str | None]:
        """The output constraint and the field that set it (for error messages); (None, None) when unconstrained."""
        given: list[tuple[str, StructuredOutputParams]] = []

        def add(field: str, **constraint: Any) -> None:
            try:
                given.append((field, StructuredOutputParams(**constraint)))
            except SamplingParamsError as exc:
                raise SamplingParamsError(field, f"{field}: {exc}") from None

        rf = self.response_format
        if rf is not None and rf.type == "json_object":
            add("response_format", json_object=True)
        elif rf is not None and rf.json_schema is not None:
            schema = rf.json_schema.schema_
            add("response_format", **({"json": schema} if schema is not None else {"json_object": True}))
        if self.guided_json is not None:
            add("guided_json", json=self.guided_json)
        if self.guided_regex is not None:
            add("guided_regex", regex=self.guided_regex)
        if self.guided_choice is not None:
            add("guided_choice", choice=list(self.guided_choice))
        if self.guided_grammar is not None:
            add("guided_grammar", grammar=self.guided_grammar)
        if len(given) > 1:
            names = ", ".join(name for name, _ in given)
            raise SamplingParamsError(given[1][0], f"give at most one output constraint; got {names}")
        return (given[0][1], given[0][0]) if given else (None, None)

    def logit_bias_ids(self) -> dict[int, float] | None:
        if not self.logit_bias:
            return None
        bias: dict[int, float] = {}
        for key, value in self.logit_bias.items():
            try:
                bias[int(key)] = value
            except ValueError:
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}") from None
        return bias

    def base_sampling_params(
        self, max_tokens: int, logprobs: int | None, prompt_logprobs: int | None
    ) -> SamplingParams:
        structured_output, _ = self.structured_output()
        if self.use_beam_search and self.stream:
            raise SamplingParamsError("stream", "stream is not supported with use_beam_search: beams end all at once")
        default_temperature = 0.0 if self.use_beam_search else 1.0
        return SamplingParams(
            n=self.n,
            temperature=default_temperature if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=-1 if self.top_k in (None, 0) else self.top_k,
            min_p=self.min_p or 0.0,
            seed=self.seed,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            logit_bias=self.logit_bias_ids(),
            allowed_token_ids=self.allowed_token_ids,
            max_tokens=max_tokens,
            min_tokens=self.min_tokens,
            stop=self.stop_strings(),
            stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos,
            include_stop_str_in_output=self.include_stop_str_in_output,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=self.skip_special_tokens,
            structured_output=structured_output,
            use_beam_search=self.use_beam_search,
            length_penalty=self.length_penalty,
            early_stopping=self.early_stopping,
        )


class CompletionRequest(_SamplingFields):
    prompt: (
        NonEmptyStr
        | Annotated[list[NonEmptyStr], Field(min_length=1)]
        | Annotated[list[TokenId], Field(min_length=1)]
        | Annotated[list[Annotated[list[TokenId], Field(min_length=1)]], Field(min_length=1)]
    ) = Field(json_schema_extra=TOKEN_ID)
    max_tokens: int | None = Field(16, ge=1, json_schema_extra=GENERATED_TOKENS)
    logprobs: int | None = Field(None, ge=0, json_schema_extra=NUM_LOGPROBS)
    echo: bool = False
    suffix: str | None = Field(None, max_length=0, description="not supported")

    @model_validator(mode="after")
    def _unsupported(self) -> CompletionRequest:
        if self.suffix:
            raise ValueError("suffix is not supported")
        return self

    def prompts(self) -> list[str] | list[list[int]]:
        """The prompt as a list of texts or a list of token-id lists."""
        p = self.prompt
        prompts = [p] if isinstance(p, str) else [list(p)] if p and all(isinstance(x, int) for x in p) else list(p)
        if not prompts or any(len(x) == 0 for x in prompts):
            raise ValueError("prompt must not be empty")
        return prompts  # type: ignore[return-value]


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class CalledFunction(BaseModel):
    name: str
    arguments: str = Field("{}", description="a JSON object, as a string")


class MessageToolCall(BaseModel):
    id: str | None = None
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = Field(None, description="an assistant's earlier calls")
    tool_call_id: str | None = Field(None, description="the call a tool message answers")

    def template_message(self) -> dict[str, Any]:
        """The message as chat templates take it: text content, tool fields only where set."""
        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        for key in ("name", "tool_call_id"):
            if getattr(self, key) is not None:
                message[key] = getattr(self, key)
        if self.tool_calls is not None:
            message["tool_calls"] = [call.model_dump(exclude_none=True) for call in self.tool_calls]
        return message

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionDefinition(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema of the arguments object")
    strict: bool | None = None


class ChatTool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: FunctionName


class ChatCompletionRequest(_SamplingFields):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "dependentSchemas": {
                **requires("stream_options", stream=True)["dependentSchemas"],
                **requires("top_logprobs", logprobs=True)["dependentSchemas"],
                **one_constraint()["dependentSchemas"],
            },
            **beam_search_rules(chat=True),
        },
    )

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, json_schema_extra=GENERATED_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, json_schema_extra=GENERATED_TOKENS)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, json_schema_extra=NUM_LOGPROBS, description="needs logprobs: true")
    echo: bool = False
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    tools: Annotated[list[ChatTool], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="default: auto with tools, none without"
    )
    parallel_tool_calls: bool = True
    store: bool | None = None
    metadata: dict[str, str] | None = None

    @model_validator(mode="after")
    def _logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class TokenizeRequest(_Strict):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"oneOf": [{"required": ["prompt"]}, {"required": ["messages"]}]}
    )

    model: str | None = None
    prompt: str | SkipJsonSchema[None] = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | SkipJsonSchema[None] = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        return self


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[TokenId] = Field(json_schema_extra=TOKEN_ID)


# ---- responses ----


def random_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "paged"
    root: str | None = None
    parent: str | None = None  # a LoRA adapter's base model
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int | str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
