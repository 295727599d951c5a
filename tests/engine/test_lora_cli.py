"""``paged-engine serve``'s LoRA flags: ``--lora-modules NAME=PATH ...`` into ``EngineConfig``, refusals named."""

from __future__ import annotations

import pytest
from paged_engine.cli import build_parser, engine_config, main
from paged_engine.lora.registry import LoraModule


def test_lora_flags_reach_the_engine_config():
    args = build_parser().parse_args(
        ["serve", "m", "--lora-modules", "sql=/a", "chat=/b", "--max-loras", "2", "--max-lora-rank", "32"]
    )
    config = engine_config(args)
    assert config.lora_modules == (LoraModule("sql", "/a"), LoraModule("chat", "/b"))
    assert (config.max_loras, config.max_lora_rank, config.lora_enabled) == (2, 32, True)
    assert engine_config(build_parser().parse_args(["serve", "m"])).lora_enabled is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lora-modules", "sql"], "expected NAME=PATH"),
        (["--lora-modules", "a=/a", "b=/b", "--max-loras", "1"], "more than max_loras=1"),
        (["--max-lora-rank", "0"], "max_lora_rank must be in [1, 1024]"),
        (["--served-model-name", "sql", "--lora-modules", "sql=/a"], "'sql' is the served model name"),
    ],
)
def test_bad_lora_flags_exit_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve", "m", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
