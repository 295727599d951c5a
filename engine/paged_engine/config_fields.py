"""Settings as dataclass fields that generate their own command-line flags: the one mechanism behind
``EngineConfig`` (and its nested ``SchedulerConfig``) and ``ServerConfig``.

A field made with :func:`setting` carries its help text and, where it has them, ``choices``, a ``flag`` name other
than the field's, a ``parse`` function for its command-line text, ``nargs``, and an ``env`` variable: the field
then defaults to that variable when it is set, for the command line and keyword arguments alike. Torch-free: the
API server process builds its flags from these too.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any


def setting(default: Any, help: str, *, env: str | None = None, **extra: Any) -> Any:
    """A field with its CLI help (and ``choices``, ``flag``, ``parse``, ``nargs``); ``env`` names the variable
    that sets its default (read when the object is made, parsed by ``parse``)."""
    metadata = {"help": help, "env": env, **extra}
    if env is None:
        return dataclasses.field(default=default, metadata=metadata)
    parse: Callable[[str], Any] = extra.get("parse", str)

    def from_environment() -> Any:
        text = os.environ.get(env)
        if text is None:
            return default
        try:
            return parse(text)
        except ValueError as exc:
            raise ValueError(f"environment variable {env}={text!r}: {exc}") from None

    return dataclasses.field(default_factory=from_environment, metadata=metadata)


def positive_int(text: str) -> int:
    """An integer of at least 1, from its text."""
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"expected a positive integer, got {text!r}") from None
    if number < 1:
        raise ValueError(f"expected a positive integer, got {number}")
    return number


def flag_name(f: dataclasses.Field[Any]) -> str:
    return "--" + f.metadata.get("flag", f.name.replace("_", "-"))


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default as the CLI shows it (environment variables applied)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    factory: Callable[[], Any] = f.default_factory  # type: ignore[assignment]
    return factory()


def add_arguments(group: argparse._ArgumentGroup, fields: Iterable[tuple[type, dataclasses.Field[Any]]]) -> None:
    """One flag per ``(owner class, field)``, with its default, help, type and choices; ``dest`` is the field's
    name."""
    for owner, f in fields:
        meta = f.metadata
        help_text = meta["help"] + (f" (env {meta['env']})" if meta.get("env") else "")
        kwargs: dict[str, Any] = {"default": default_of(f), "help": help_text, "dest": f.name}
        if isinstance(f.default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _checked(meta.get("parse") or _argument_type(owner, f.name))
            if "choices" in meta:
                kwargs["choices"] = meta["choices"]
            if "nargs" in meta:
                kwargs["nargs"] = meta["nargs"]
        group.add_argument(flag_name(f), **kwargs)


def from_arguments(args: argparse.Namespace, fields: Iterable[dataclasses.Field[Any]]) -> dict[str, Any]:
    """The parsed values of these fields, by field name."""
    return {f.name: getattr(args, f.name) for f in fields}


def _argument_type(owner: type, name: str) -> Any:
    """The parser for a setting without ``parse``: from its annotation (int, float, str)."""
    hint = typing.get_type_hints(owner)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    return args[0] if args in ([int], [float]) else str


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert
