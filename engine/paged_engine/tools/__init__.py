"""Tool calling: tools rendered through the chat template, the output parsed into OpenAI-shaped tool calls. Runs in
the API server process (and the user's for ``LLM``)."""

from paged_engine.tools.chat import ToolCallStream, ToolPlan
from paged_engine.tools.parsers import PARSERS, TOOL_PARSER_CHOICES, ToolCall, ToolParser, parser_for_template

__all__ = [
    "PARSERS",
    "TOOL_PARSER_CHOICES",
    "ToolCall",
    "ToolCallStream",
    "ToolParser",
    "ToolPlan",
    "parser_for_template",
]
