"""JSON-schema grammars whose strings are JSON: xgrammar's grammar, with its unsafe string rules rewritten.

xgrammar (0.2.9) builds two kinds of string rule that admit text a JSON parser refuses (RFC 8259 allows no raw
U+0000–U+001F, quote or backslash inside a string):

* a length-bounded string (``minLength``/``maxLength``, on values and on property names) repeats a class that
  excludes only the quote, the backslash, CR and LF: raw control characters pass, and escapes do not;
* a ``pattern`` (also ``patternProperties`` and ``propertyNames.pattern``) becomes ``Regex(p, json_string=true)``,
  which writes the pattern's characters raw: a pattern that admits a quote, a backslash or a control character
  yields them unescaped.

Both, and the unbounded string's class, also admit UTF-8-encoded surrogates (U+D800–U+DFFF), which no valid text
holds. The rewrite works on the grammar's EBNF text. The bounded class becomes one JSON character (anything but
the quote, the backslash, U+0000–U+001F and the surrogates, or an escape); the unbounded one drops the surrogates.
Each pattern is swapped for a placeholder before xgrammar sees the schema; its rule then becomes xgrammar's own
grammar for the pattern (``Grammar.from_regex``) with every terminal JSON-encoded: safe characters as they are,
the quote, the backslash and control characters only escaped.

Invariant: every string the rewritten grammar admits parses as a JSON string, and its decoded value is one the
schema's string rule admits. Where xgrammar would break that, the schema is changed or refused first:

* ``date``, ``time``, ``date-time``, ``ipv4`` and ``ipv6`` are generated from patterns of our own (xgrammar's
  rules admit February 30th, a 60th second, octets with leading zeros);
* a string with more than one of ``pattern``, ``format`` and ``minLength``/``maxLength`` is refused
  (``ValueError`` naming where): xgrammar enforces one of them and silently drops the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import xgrammar

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)  # not characters: UTF-8 may not encode them, though xgrammar's [^...] admits them
QUOTE, BACKSLASH = 0x22, 0x5C
SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
# The characters a JSON string holds raw: all but U+0000-U+001F, the quote and the backslash (and surrogates).
RAW_CHAR_CLASS = "[\\u0020-\\u0021\\u0023-\\u005b\\u005d-\\ud7ff\\ue000-\\U0010ffff]"
JSON_CHAR_RULE = "paged_json_char"
# One character of a JSON string, as its encoded text: what a bounded string repeats.
JSON_CHAR_EBNF = (
    f"{JSON_CHAR_RULE} ::= {RAW_CHAR_CLASS} "
    '| "\\\\" [\\"\\\\/bfnrt] | "\\\\u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]'
)
# xgrammar's classes for a string's raw character, as it prints them: a length-bounded string's, and an unbounded
# string's (right but for surrogates, which no UTF-8 text holds).
BOUNDED_STRING_CLASS = '[^\\"\\\\\\r\\n]'
UNBOUNDED_STRING_CLASS = '[^\\0-\\x1f\\"\\\\\\r\\n]'
# Keywords whose values are instances, not schemas: a "pattern" inside them is data.
INSTANCE_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
LENGTH_KEYWORDS = ("minLength", "maxLength")
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DATE = (
    r"([0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
    r"|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    r"|[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])"
    r"|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"
)
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_GROUP = "[0-9a-fA-F]{1,4}"
# IPv6 in its hexadecimal forms, "::" standing for one or more zero groups (no embedded IPv4: a subset, all valid).
_IPV6 = "|".join(
    [
        f"({_GROUP}:){{7}}{_GROUP}",
        f"({_GROUP}:){{1,7}}:",
        *[f"({_GROUP}:){{1,{7 - tail}}}(:{_GROUP}){{1,{tail}}}" for tail in range(1, 7)],
        f":((:{_GROUP}){{1,7}}|:)",
    ]
)
# Formats whose xgrammar rule admits values the format refuses (February 30th, a second of 60 outside a leap
# second, an IPv4 octet with a leading zero, also inside IPv6): generated from these patterns instead, which admit
# only valid ones.
FORMAT_PATTERNS = {
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}T{_TIME}$",
    "ipv4": rf"^{_OCTET}(\.{_OCTET}){{3}}$",
    "ipv6": f"^({_IPV6})$",
}

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z_][A-Za-z0-9_]*|\s+|.', re.DOTALL)
_RULE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) ::= (.*)$")
_SIMPLE_ESCAPES = {"0": 0, "t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "b": 8, "a": 7, "e": 27}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _placeholder(index: int) -> str:
    return f"pagedpattern{index}x"


# --- the schema: placeholders for patterns, and the refused combinations ---


def _swap_patterns(node: Any, patterns: list[str], where: str) -> Any:
    """A copy of the schema ``node`` with each regex replaced by a placeholder (appended to ``patterns``)."""
    if isinstance(node, list):
        return [_swap_patterns(item, patterns, f"{where}/{i}") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    _refuse_unenforceable(node, where)
    swapped: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{where}/{key}"
        if key in INSTANCE_KEYWORDS:
            swapped[key] = value
        elif key == "format" and isinstance(value, str) and value in FORMAT_PATTERNS:
            patterns.append(FORMAT_PATTERNS[value])
            swapped["pattern"] = _placeholder(len(patterns) - 1)
        elif key == "pattern" and isinstance(value, str):
            patterns.append(value)
            swapped[key] = _placeholder(len(patterns) - 1)
        elif key == "patternProperties" and isinstance(value, dict):
            swapped[key] = {}
            for regex, schema in value.items():
                patterns.append(regex)
                name = _placeholder(len(patterns) - 1)  # before the value's own patterns are numbered
                swapped[key][name] = _swap_patterns(schema, patterns, f"{path}/{regex}")
        else:
            swapped[key] = _swap_patterns(value, patterns, path)
    return swapped


def _refuse_unenforceable(node: dict[str, Any], where: str) -> None:
    """xgrammar enforces one of a string's pattern, format and length bounds and silently drops the others."""
    given = [key for key in ("pattern", "format") if isinstance(node.get(key), str)]
    if any(key in node for key in LENGTH_KEYWORDS):
        given.append("minLength/maxLength")
    if len(given) > 1:
        raise ValueError(
            f"at {where or '/'}: a string's {' and '.join(given)} cannot be combined here (the grammar would "
            "enforce one and ignore the rest); keep one of them"
        )


# --- EBNF terminals: parsing xgrammar's printed literals and classes, writing JSON-encoded ones ---


def _unescape(text: str) -> list[int]:
    """The code points of a printed literal's or class's body (xgrammar's escapes)."""
    points: list[int] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            points.append(ord(ch))
            i += 1
            continue
        code = text[i + 1]
        if code in _HEX_ESCAPES:
            width = _HEX_ESCAPES[code]
            points.append(int(text[i + 2 : i + 2 + width], 16))
            i += 2 + width
        else:
            points.append(_SIMPLE_ESCAPES.get(code, ord(code)))
            i += 2
    return points


def _class_ranges(token: str) -> list[tuple[int, int]]:
    """The code-point ranges a printed class ``[...]`` or ``[^...]`` admits, sorted and disjoint."""
    body = token[1:-1]
    negated = body.startswith("^")
    items = _class_items(body[1:] if negated else body)
    ranges = sorted((lo, hi) for lo, hi in items)
    merged: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return _complement(merged) if negated else merged


def _class_items(body: str) -> list[tuple[int, int]]:
    """A class body's items as (low, high) ranges; a single character is (c, c)."""
    chars: list[tuple[int, bool]] = []  # (code point, written as an unescaped "-")
    i = 0
    while i < len(body):
        if body[i] == "\\":
            end = i + 2 + _HEX_ESCAPES.get(body[i + 1], 0)
            chars.append((_unescape(body[i:end])[0], False))
            i = end
        else:
            chars.append((ord(body[i]), body[i] == "-"))
            i += 1
    items: list[tuple[int, int]] = []
    j = 0
    while j < len(chars):
        if j + 2 < len(chars) and chars[j + 1][1]:
            items.append((chars[j][0], chars[j + 2][0]))
            j += 3
        else:
            items.append((chars[j][0], chars[j][0]))
            j += 1
    return items


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    start = 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = max(start, hi + 1)
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return out


def _without(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """``ranges`` less the range ``lo``–``hi``."""
    out = []
    for start, end in ranges:
        if start < lo:
            out.append((start, min(end, lo - 1)))
        if end > hi:
            out.append((max(start, hi + 1), end))
    return out


def _point(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _literal(text: str) -> str:
    """EBNF literals for ``text``: printable ASCII as it is, every other character a literal of its own.

    xgrammar's EBNF reader takes every hex digit after ``\\x`` or ``\\u``, so ``"\\u00e9a"`` is U+0E9A, not "éa"
    (its printer writes exactly that); ending the literal right after each hex escape keeps it unambiguous."""
    parts: list[str] = []
    run = ""
    for ch in text:
        if 0x20 <= ord(ch) < 0x7F:
            run += "\\" + ch if ch in '"\\' else ch
            continue
        if run:
            parts.append(f'"{run}"')
            run = ""
        parts.append(f'"{_point(ord(ch))}"')
    if run or not parts:
        parts.append(f'"{run}"')
    return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"


def _reprint_literals(rule_body: str) -> str:
    """A printed rule body with each string literal rewritten by ``_literal`` (its hex escapes unambiguous)."""
    return "".join(
        _literal("".join(map(chr, _unescape(t[1:-1])))) if t.startswith('"') else t for t in _tokens(rule_body)
    )


def _escapes_of(code: int) -> list[str]:
    """The JSON escapes that decode to ``code`` (one of the characters a JSON string may not hold raw)."""
    forms = [f"\\u{code:04x}"]
    if code in (QUOTE, BACKSLASH):
        forms.append("\\" + chr(code))
    elif code in SHORT_ESCAPES:
        forms.append("\\" + SHORT_ESCAPES[code])
    return forms


def _unsafe(code: int) -> bool:
    return code < 0x20 or code in (QUOTE, BACKSLASH)


def _encode_set(ranges: list[tuple[int, int]]) -> str:
    """An EBNF expression for the JSON encodings of the characters in ``ranges``."""
    safe: list[tuple[int, int]] = []
    unsafe: list[int] = []
    for lo, hi in ranges:
        start = lo
        for code in range(lo, min(hi, BACKSLASH) + 1):
            if _unsafe(code):
                if code > start:
                    safe.append((start, code - 1))
                unsafe.append(code)
                start = code + 1
        if start <= hi:
            safe.append((start, hi))
    safe = _without(safe, *SURROGATES)
    options = []
    if safe:
        options.append("[" + "".join(_point(lo) if lo == hi else f"{_point(lo)}-{_point(hi)}" for lo, hi in safe) + "]")
    options += [_literal(form) for code in unsafe for form in _escapes_of(code)]
    if not options:  # a class that admits nothing: keep it unsatisfiable
        return "[^\\0-\\U0010ffff]"
    return "(" + " | ".join(options) + ")"


def _encode_literal(token: str) -> str:
    """A printed string literal, JSON-encoded: each unsafe character becomes its escapes."""
    parts = []
    for code in _unescape(token[1:-1]):
        parts.append(_encode_set([(code, code)]) if _unsafe(code) else _literal(chr(code)))
    return "(" + " ".join(parts) + ")" if parts else '""'


def _tokens(body: str) -> Iterator[str]:
    for match in _TOKEN.finditer(body):
        yield match.group(0)


def _dot_without_line_terminators(pattern: str) -> str:
    """``pattern`` with each ``.`` outside a class written as the class it means in a JSON schema (ECMA-262, as
    Python's ``re`` agrees): any character but a line terminator. xgrammar's ``.`` also matches them."""
    out = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        out.append("[^\\n\\r\\u2028\\u2029]" if ch == "." and not in_class else ch)
        i += 1
    return "".join(out)


def json_encoded_regex(pattern: str, prefix: str) -> tuple[str, list[str]]:
    """xgrammar's grammar for a schema's ``pattern`` with every terminal JSON-encoded and every rule renamed
    ``prefix_*``: (the root rule's name, the rules). ``RuntimeError``/``ValueError`` as xgrammar's for a bad
    regex."""
    import xgrammar

    rules = []
    for line in str(xgrammar.Grammar.from_regex(_dot_without_line_terminators(pattern))).splitlines():
        match = _RULE.match(line)
        if match is None:
            continue
        name, body = match.groups()
        out = []
        for token in _tokens(body):
            if token.startswith('"'):
                out.append(_encode_literal(token))
            elif token.startswith("["):
                out.append(_encode_set(_class_ranges(token)))
            elif token[0].isalpha() or token[0] == "_":
                out.append(f"{prefix}_{token}")
            else:
                out.append(token)
        rules.append(f"{prefix}_{name} ::= {''.join(out)}")
    return f"{prefix}_root", rules


# --- the grammar ---


def schema_grammar(schema: str) -> xgrammar.Grammar:
    """xgrammar's compact (``", "``/``": "``) grammar for the JSON schema text ``schema``, every string rule
    made valid JSON. ``ValueError`` for a schema it cannot enforce; xgrammar's errors pass through."""
    import xgrammar

    patterns: list[str] = []
    swapped = _swap_patterns(json.loads(schema), patterns, "")
    text = str(xgrammar.Grammar.from_json_schema(json.dumps(swapped), any_whitespace=False))
    extra = [JSON_CHAR_EBNF]
    for index, pattern in enumerate(patterns):
        regex_rule = f'Regex("{_placeholder(index)}", json_string=true)'
        if regex_rule not in text:
            if _placeholder(index) in text:
                raise RuntimeError(f"xgrammar did not keep the pattern {pattern!r} as a rule of its own")
            continue  # unreachable (an array of at most 0 items, say): xgrammar pruned it
        root, rules = json_encoded_regex(pattern, f"paged_pattern{index}")
        text = text.replace(regex_rule, f"(({root}))")
        extra += rules
    if "Regex(" in text:
        raise RuntimeError("xgrammar's grammar holds a regex rule this rewrite does not know")
    text = text.replace(BOUNDED_STRING_CLASS, JSON_CHAR_RULE).replace(UNBOUNDED_STRING_CLASS, RAW_CHAR_CLASS)
    text = "\n".join(_reprint_literals(line) for line in text.splitlines())
    return xgrammar.Grammar.from_ebnf("\n".join([text, *extra]))
