"""One engine configuration: the CLI's flags and LLM's keyword arguments are the same settings, with the same
defaults and environment variables, and bad values are refused with the setting named."""

from __future__ import annotations

import dataclasses

import pytest
from paged_engine.cli import build_parser, engine_config
from paged_engine.config_fields import flag_name
from paged_engine.core.scheduler_config import SchedulerConfig
from paged_engine.engine.config import EngineConfig, settings
from paged_platform.engine_contract.budgets import (
    CPU_SERVING_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    SettingError,
)


def serve_args(*flags: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["serve", *flags])


def test_every_setting_is_a_flag_of_serve() -> None:
    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    names = {f.name for _, f in settings()}
    assert names == {f.name for f in dataclasses.fields(EngineConfig)} - {"model", "scheduler"} | {
        f.name for f in dataclasses.fields(SchedulerConfig)
    }
    for _, f in settings():
        assert flag_name(f) in help_text, f.name


def test_the_cli_and_llm_share_one_set_of_defaults() -> None:
    assert engine_config(serve_args()) == EngineConfig.from_kwargs()
    assert EngineConfig().scheduler == SchedulerConfig()


def test_flags_and_keyword_arguments_reach_the_same_fields() -> None:
    flags = serve_args(
        "tiny", "--device", "cpu", "--dtype", "bfloat16", "--kv-cache-memory", "512MiB", "--max-num-seqs", "8",
        "--long-prefill-token-threshold", "64", "--scheduling-policy", "priority", "--no-enable-prefix-caching",
        "--num-threads", "2", "--max-logprobs", "5", "--prefix-cache-hash", "builtin",
    )  # fmt: skip
    kwargs = EngineConfig.from_kwargs(
        model="tiny", device="cpu", dtype="bfloat16", kv_cache_memory="512MiB", max_num_seqs=8,
        long_prefill_token_threshold=64, scheduling_policy="priority", enable_prefix_caching=False, num_threads=2,
        max_logprobs=5, hash_algorithm="builtin",
    )  # fmt: skip
    assert engine_config(flags) == kwargs
    assert kwargs.kv_cache_memory == 512 << 20 and kwargs.scheduler.policy == "priority"


@pytest.mark.parametrize(
    ("written", "meaning"),
    [("2Gi", 2 << 30), ("512MiB", 512 << 20), ("1.5G", 1_500_000_000), ("2147483648", 2 << 30), ("0.9", 0.9),
     ("1", 1.0), (None, None)],
)  # fmt: skip
def test_kv_cache_memory_is_a_size_or_a_fraction_or_left_to_the_device(written, meaning) -> None:
    flags = ("--kv-cache-memory", written) if written is not None else ()
    assert engine_config(serve_args("tiny", *flags)).kv_cache_memory == meaning
    assert EngineConfig.from_kwargs(kv_cache_memory=written).kv_cache_memory == meaning


@pytest.mark.parametrize("written", ["0", "0Gi", "500m", "2 gigs", "-1Gi"])
def test_a_kv_cache_memory_that_is_neither_is_refused_naming_the_forms(written) -> None:
    with pytest.raises(ValueError, match=r"give a size .* or a fraction"):
        EngineConfig.from_kwargs(kv_cache_memory=written)


@pytest.mark.parametrize(("env", "field", "value"), [("PAGED_ATTENTION_BACKEND", "attention_backend", "reference"),
                                                    ("PAGED_GEMM_BACKEND", "gemm_backend", "torch"),
                                                    ("PAGED_CPU_ISA", "cpu_isa", "avx2")])  # fmt: skip
def test_environment_variables_set_the_default_for_both(monkeypatch, env: str, field: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(EngineConfig.from_kwargs(), field) == value
    assert getattr(engine_config(serve_args()), field) == value


def test_bad_settings_are_refused_with_their_name() -> None:
    with pytest.raises(TypeError, match=r"unknown engine settings \['max_num_sequences'\]"):
        EngineConfig.from_kwargs(max_num_sequences=4)
    with pytest.raises(SettingError, match=r"max_num_seqs must be in \[1, 4096\], got 0"):
        EngineConfig.from_kwargs(max_num_seqs=0)
    with pytest.raises(SettingError, match=r"max_num_batched_tokens \(64\) must be at least max_num_seqs \(65\)"):
        EngineConfig.from_kwargs(max_num_seqs=65, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match="device must be auto, cpu, cuda or cuda:N, got 'tpu'"):
        EngineConfig.from_kwargs(device="tpu")
    with pytest.raises(ValueError, match="cpu_isa must be auto or one of avx2, avx512, amx, got 'sse4'"):
        EngineConfig.from_kwargs(cpu_isa="sse4")
    with pytest.raises(ValueError, match="invalid KV-cache memory '2 gigs'"):
        EngineConfig.from_kwargs(kv_cache_memory="2 gigs")
    with pytest.raises(SystemExit):
        serve_args("--max-num-seqs", "many")


def test_the_budget_defaults_are_one_rule_by_device_and_use() -> None:
    unset = SchedulerConfig()
    assert unset.max_num_batched_tokens is None and unset.max_num_seqs is None
    assert unset.resolved("cpu", serving=True).max_num_batched_tokens == CPU_SERVING_MAX_NUM_BATCHED_TOKENS
    assert unset.resolved("cpu", serving=False).max_num_batched_tokens == DEFAULT_MAX_NUM_BATCHED_TOKENS
    assert unset.resolved("cuda", serving=True).max_num_batched_tokens == DEFAULT_MAX_NUM_BATCHED_TOKENS
    assert unset.resolved("cuda", serving=True).max_num_seqs == DEFAULT_MAX_NUM_SEQS
    given = SchedulerConfig(max_num_batched_tokens=4096)
    assert given.resolved("cpu", serving=True).max_num_batched_tokens == 4096
    # the defaults keep "tokens >= sequences": a small token budget lowers the sequences, many sequences raise it
    assert SchedulerConfig(max_num_batched_tokens=16).resolved("cpu", serving=True).budgets.max_num_seqs == 16
    assert SchedulerConfig(max_num_seqs=1024).resolved("cpu", serving=True).budgets.max_num_batched_tokens == 1024


def test_the_budgets_an_engine_starts_with_come_from_the_operators_environment(monkeypatch) -> None:
    monkeypatch.setenv("PAGED_MAX_NUM_SEQS", "12")
    monkeypatch.setenv("PAGED_MAX_NUM_BATCHED_TOKENS", "96")
    assert EngineConfig.from_kwargs().scheduler.resolved("cpu", serving=True).budgets.max_num_seqs == 12
    assert engine_config(serve_args()).scheduler.max_num_batched_tokens == 96
    assert engine_config(serve_args("--max-num-seqs", "3")).scheduler.max_num_seqs == 3  # a flag wins
    monkeypatch.setenv("PAGED_MAX_NUM_SEQS", "twelve")
    with pytest.raises(ValueError, match=r"environment variable PAGED_MAX_NUM_SEQS='twelve': expected a positive"):
        EngineConfig.from_kwargs()


def test_live_limits_are_refused_below_the_starting_budgets() -> None:
    with pytest.raises(SettingError, match=r"max_num_seqs_limit \(64\) is below max_num_seqs \(128\)"):
        SchedulerConfig(max_num_seqs_limit=64).resolved("cpu", serving=True)
    limits = SchedulerConfig(max_num_seqs=300).resolved("cpu", serving=True).live_limits()
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == (300, 32768)


def test_parallel_settings_from_flags_or_torchrun_style_environment(monkeypatch) -> None:
    hosts = ("--tensor-parallel-size", "4", "--nnodes", "2", "--node-rank", "1", "--master-port", "29500")
    config = engine_config(serve_args(*hosts))
    assert (config.world_size, config.local_world_size, config.node_rank, config.master_port) == (4, 2, 1, 29500)
    for name, value in {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29501"}.items():
        monkeypatch.setenv(name, value)
    config = EngineConfig.from_kwargs(tensor_parallel_size=2)
    assert (config.nnodes, config.node_rank, config.master_addr, config.master_port) == (2, 1, "10.0.0.1", 29501)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tensor_parallel_size": 0}, r"tensor_parallel_size must be in \[1, 64\], got 0"),
        (
            {"tensor_parallel_size": 3, "nnodes": 2, "master_port": 29500},
            r"tensor x pipeline parallel: 3\) must be a multiple of nnodes 2",
        ),
        ({"tensor_parallel_size": 2, "nnodes": 2}, "several hosts need --master-port"),
        ({"tensor_parallel_size": 2, "nnodes": 2, "node_rank": 2, "master_port": 1}, r"node_rank must be in \[0, "),
        ({"worker_step_timeout": 0}, "worker_step_timeout must be positive seconds"),
    ],
)
def test_bad_parallel_settings_are_refused_naming_the_limit(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig.from_kwargs(**settings)
