"""Base model for the API types, and the value types Kubernetes knows (quantities, int-or-string).

Cross-field rules are declared once, next to the Python check that mirrors them: `@cel(rule, message)`
on a boolean method. The CRD generator copies the rule into `x-kubernetes-validations` (so the API
server refuses a bad object) and the model validator runs the method (so `paged-ctl apply` refuses it
before it reaches the server) — both with the same message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

CEL_RULE_ATTR = "__cel_rule__"


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry; `field_path` points the server's error at a field."""

    rule: str
    message: str
    field_path: str | None = None

    def to_openapi(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


def cel(rule: str, message: str, *, field_path: str | None = None) -> Callable[[Callable[[Any], bool]], Any]:
    """Declare a cross-field rule: `rule` in CEL for the server, the decorated method for Python."""

    def decorate(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
        setattr(check, CEL_RULE_ATTR, CelRule(rule, message, field_path))
        return check

    return decorate


def _add_cel_rules(schema: dict[str, Any], cls: type[ApiModel]) -> None:
    rules = [rule.to_openapi() for rule, _ in cls.cel_rules()]
    if rules:
        schema["x-kubernetes-validations"] = rules


class ApiModel(BaseModel):
    """Base of every API type: camelCase on the wire, unknown fields refused, docstrings become descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        json_schema_extra=_add_cel_rules,
    )

    _cel_checks: ClassVar[tuple[tuple[CelRule, Callable[[Any], bool]], ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        members: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            members.update(vars(klass))
        cls._cel_checks = tuple(
            (getattr(member, CEL_RULE_ATTR), member) for member in members.values() if hasattr(member, CEL_RULE_ATTR)
        )

    @classmethod
    def cel_rules(cls) -> tuple[tuple[CelRule, Callable[[Any], bool]], ...]:
        return cls._cel_checks

    @model_validator(mode="after")
    def _run_cel_checks(self) -> ApiModel:
        for rule, check in self.cel_rules():
            if not check(self):
                raise PydanticCustomError("cel_rule", rule.message)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# A Kubernetes resource quantity without a sign ("500m", "4Gi", 2): the API server's own pattern for
# quantities, minus the sign, since no size or CPU count here may be negative.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
PERCENT_PATTERN = r"^[0-9]+%$"
_PERCENT_RE = re.compile(PERCENT_PATTERN)

# `pattern` constrains the string form and `minimum` the integer form (each applies to its own type only).
_INT_OR_STRING_SCHEMA = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "minimum": 0,
}


def _quantity(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError("quantity", "a quantity must be a string like '4Gi' or '500m', or an integer")
    if isinstance(value, int):
        if value < 0:
            raise PydanticCustomError("quantity", f"quantity {value} must not be negative")
        return value
    if not _QUANTITY_RE.match(value):
        raise PydanticCustomError("quantity", f"{value!r} is not a Kubernetes quantity (like '4Gi', '500m' or '2')")
    return value


def _int_or_percent(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError("int_or_percent", "expected an integer or a percentage like '25%'")
    if isinstance(value, int):
        if value < 0:
            raise PydanticCustomError("int_or_percent", f"{value} must not be negative")
        return value
    if not _PERCENT_RE.match(value):
        raise PydanticCustomError("int_or_percent", f"{value!r} is neither an integer nor a percentage like '25%'")
    return value


Quantity = Annotated[
    int | str,
    BeforeValidator(_quantity),
    WithJsonSchema({**_INT_OR_STRING_SCHEMA, "pattern": QUANTITY_PATTERN}),
]
"""A resource quantity: validated like the API server does, kept as written."""

IntOrPercent = Annotated[
    int | str,
    BeforeValidator(_int_or_percent),
    WithJsonSchema({**_INT_OR_STRING_SCHEMA, "pattern": PERCENT_PATTERN}),
]
"""A count or a percentage, as in a Deployment's rolling-update settings."""

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def parse_quantity(value: int | str) -> float:
    """The numeric value of a quantity ("4Gi" -> 4294967296.0, "500m" -> 0.5)."""
    if isinstance(value, int):
        return float(value)
    text = str(_quantity(value))
    for suffix, factor in _BINARY_SUFFIXES.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    if text[-1] in _DECIMAL_SUFFIXES:
        return float(text[:-1]) * _DECIMAL_SUFFIXES[text[-1]]
    return float(text)
