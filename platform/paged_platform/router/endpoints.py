"""The engine routes the router relays, and what each needs from the router (pure data).

Every route a client calls on the engine's public port is relayed, so ``status.endpoint`` (the router) serves
what the engine serves: the OpenAI completions and chat, Anthropic's Messages API, and the tokenizer routes. Each
goes through the same placement and queue: a request names a model (a replica must serve it; one for a model no
replica serves and none is declared is a 404), is placed by the policy on the prompt it carries, and waits for a
replica with room. The tokenizer routes carry no prompt worth routing on (nothing is cached) and may omit the
model (the engine then uses its base model), so any replica serving the model will do.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged_platform.error_envelopes import ANTHROPIC_PATHS


@dataclass(frozen=True)
class Endpoint:
    path: str
    #: False: a request without ``model`` goes to the base model (the engine's rule on the tokenizer routes).
    model_required: bool = True
    #: True: the prompt's chunk hashes steer placement (prefix affinity); False: load alone.
    routes_on_prompt: bool = True

    @property
    def anthropic(self) -> bool:
        """Errors on this path use Anthropic's envelope, as the engine's do."""
        return self.path in ANTHROPIC_PATHS


RELAYED = (
    Endpoint("/v1/completions"),
    Endpoint("/v1/chat/completions"),
    Endpoint("/v1/messages"),
    Endpoint("/tokenize", model_required=False, routes_on_prompt=False),
    Endpoint("/detokenize", model_required=False, routes_on_prompt=False),
)
BY_PATH = {e.path: e for e in RELAYED}
