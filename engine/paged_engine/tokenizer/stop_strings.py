"""Stop-string matching over streamed text: which text is final, which must be held back.

Pure string logic, no tokenizer: the detokenizer feeds it the decoded text as it grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopMatch:
    stop: str
    end: int  # the output text ends here: before the stop string, or after it when it is included


class StopStrings:
    def __init__(self, stops: Sequence[str], include_in_output: bool = False) -> None:
        if any(not stop for stop in stops):
            raise ValueError("stop strings must be non-empty")
        self.stops = tuple(dict.fromkeys(stops))
        self.include_in_output = include_in_output
        self.max_len = max((len(stop) for stop in self.stops), default=0)
        # Proper prefixes by length, so the per-step hold-back check is a few set lookups.
        self._prefixes = {stop[:length] for stop in self.stops for length in range(1, len(stop))}
        self._prefix_lengths = sorted({len(prefix) for prefix in self._prefixes}, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.stops)

    def find(self, text: str, num_new_chars: int) -> StopMatch | None:
        """The earliest stop string that ends within the last ``num_new_chars`` characters of ``text``.

        Earlier text was searched on earlier calls, so only matches overlapping the new characters count.
        """
        start = max(0, len(text) - num_new_chars - self.max_len + 1)
        best: StopMatch | None = None
        best_at = len(text)
        for stop in self.stops:
            at = text.find(stop, start)
            if at != -1 and at < best_at:
                best_at = at
                best = StopMatch(stop, at + len(stop) if self.include_in_output else at)
        return best

    def holdback(self, text: str) -> int:
        """How many trailing characters could be the start of a stop string, and so must not be streamed yet.

        Zero when the stop string is to be included anyway: streaming its beginning is then correct.
        """
        if self.include_in_output:
            return 0
        for length in self._prefix_lengths:
            if length <= len(text) and text[-length:] in self._prefixes:
                return length
        return 0
