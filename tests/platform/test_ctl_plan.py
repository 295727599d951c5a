"""paged-ctl plan: the KV-cache and weight arithmetic (checked against published figures and by hand), the
safetensors headers it reads, its output and its refusals."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from paged_platform import sizing
from paged_platform.checkpoint_meta import CheckpointError, load_checkpoint
from paged_platform.ctl import app
from typer.testing import CliRunner

runner = CliRunner()

#: Qwen2.5-72B's published config.json (the fields that size it).
QWEN_72B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
    "sliding_window": 131072,
    "use_sliding_window": False,
}

#: Small enough to compute by hand: head dim 64 / 4 = 16, tied embeddings (Hugging Face's default).
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 100,
}


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A safetensors file: the 8-byte header length, the JSON header, then zeroed data of each tensor."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def invoke(*args: str):
    return runner.invoke(app, ["plan", *args], env={"COLUMNS": "200"})


def test_qwen2_5_72b_matches_the_published_figures() -> None:
    shape = sizing.model_shape(QWEN_72B)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (80, 8, 128)
    assert sizing.kv_bytes_per_token(shape, 2) == 327_680  # 2 × 80 × 8 × 128 × 2 bytes
    parameters = sizing.estimate_parameters(shape)
    assert parameters == pytest.approx(72.7e9, rel=0.02)
    assert parameters * 2 == pytest.approx(145e9, rel=0.02)


def test_a_tiny_config_by_hand() -> None:
    shape = sizing.model_shape(TINY)
    assert shape.head_dim == 16
    assert sizing.kv_bytes_per_token(shape, 4) == 2 * 2 * 2 * 16 * 4 == 512
    assert sizing.kv_bytes_per_token(shape, 4, tp=2) == 256  # one KV head per rank
    assert sizing.kv_bytes_per_token(shape, 4, tp=4) == 256  # still one: two heads cannot split four ways
    # embedding 100×64; per layer q 64×64, k and v 64×32 each, o 64×64, MLP 3×64×128, two norms of 64; final norm
    layer = 4096 + 2 * 2048 + 4096 + 3 * 64 * 128 + 2 * 64
    assert sizing.estimate_parameters(shape) == 100 * 64 + 2 * layer + 64 == 80_448
    untied = sizing.model_shape({**TINY, "tie_word_embeddings": False})
    assert sizing.estimate_parameters(untied) == 80_448 + 100 * 64

    # float32 weights: 80,448 × 4 = 321,792 B. The KV cache gets half of what they leave free (--memory-fraction
    # 0.5); a request of 100 tokens is 51,200 B on one GPU, 25,600 B per GPU split two or four ways (one KV head).
    def sized(gpu_memory: int) -> sizing.Plan:
        return sizing.plan(shape, parameters=80_448, context=100, concurrency=10, gpu_memory_bytes=gpu_memory,
                           dtype="float32", memory_fraction=0.5)  # fmt: skip

    def tried(plan: sizing.Plan) -> list[tuple[int | None, ...]]:
        return [(t.tp, t.kv_budget_bytes_per_gpu, t.requests, t.replicas, t.gpus) for t in plan.tried]

    # 1 MiB: (1,048,576 − 321,792) / 2 = 363,392 B hold 7 requests, 2 replicas; TP 2: (1,048,576 − 160,896) / 2 =
    # 443,840 B hold 17, one replica of 2 GPUs; TP 4: 484,064 B hold 18, 4 GPUs. A tie at 2 GPUs: the smaller TP.
    one = sized(2**20)
    assert (one.weight_bytes, one.kv_bytes_per_request) == (321_792, 51_200)
    assert tried(one) == [(1, 363_392, 7, 2, 2), (2, 443_840, 17, 1, 2), (4, 484_064, 18, 1, 4)]
    assert one.chosen is not None and one.chosen.tp == 1

    # 512 KiB: one GPU holds a single request (10 GPUs for the load) where TP 2 holds 7 (2 replicas, 4 GPUs):
    # the fewest GPUs, not the smallest size that fits.
    two = sized(2**19)
    assert tried(two) == [(1, 101_248, 1, 10, 10), (2, 181_696, 7, 2, 4), (4, 221_920, 8, 2, 8)]
    assert two.chosen is not None and two.chosen.tp == 2

    # 300,000 B: one GPU cannot hold the weights at all.
    split = sized(300_000)
    assert tried(split) == [(1, 0, 0, None, None), (2, 69_552, 2, 5, 10), (4, 109_776, 4, 3, 12)]
    assert split.chosen is not None and split.chosen.tp == 2

    # bfloat16 halves both the weights and the KV cache (the KV cache follows the weights' dtype unless told).
    half = sizing.plan(shape, parameters=80_448, context=100, concurrency=1, gpu_memory_bytes=2**20)
    assert (half.dtype, half.kv_dtype, half.weight_bytes, half.kv_bytes_per_token) == ("bfloat16", "bfloat16",
                                                                                       160_896, 256)  # fmt: skip
    assert sizing.plan(shape, parameters=1, context=1, concurrency=1, gpu_memory_bytes=2**20,
                       kv_dtype="float32").kv_bytes_per_token == 512  # fmt: skip


def test_mixtral_experts_and_gemma3_text_config(tmp_path: Path) -> None:
    mixtral = {
        "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 32, "vocab_size": 32000, "num_local_experts": 8, "tie_word_embeddings": False,
    }  # fmt: skip
    assert sizing.estimate_parameters(sizing.model_shape(mixtral)) == pytest.approx(46.7e9, rel=0.005)

    gemma3 = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "num_attention_heads": 8, "head_dim": 256,
                        "num_key_value_heads": 4, "num_hidden_layers": 34, "vocab_size": 262208,
                        "sliding_window": 1024},
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
    }  # fmt: skip
    shape = sizing.model_shape(gemma3)
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.sliding_window) == (34, 4, 256, 1024)
    assert sizing.kv_bytes_per_token(shape, 2) == 2 * 34 * 4 * 256 * 2
    folder = write_config(tmp_path / "gemma3", gemma3)
    data = json.loads(invoke(str(folder), "--context", "4096", "--concurrency", "1", "-o", "json").stdout)
    assert data["kvBytesPerToken"] == 2 * 34 * 4 * 256 * 2
    assert any("sliding window of 1024" in n for n in data["notes"])
    assert any("not the vision tower" in n for n in data["notes"])
    no_gqa = {k: v for k, v in TINY.items() if k != "num_key_value_heads"}
    assert sizing.model_shape(no_gqa).kv_heads == 4


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "lacks num_hidden_layers, hidden_size, num_attention_heads"),
        ({**TINY, "num_hidden_layers": 0}, "num_hidden_layers=0 must be positive integers"),
        ({**TINY, "hidden_size": 66}, "hidden_size 66 is not a multiple of num_attention_heads 4"),
        ({**TINY, "kv_lora_rank": 512}, "multi-head latent attention"),
    ],
)
def test_configs_the_arithmetic_does_not_cover_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(sizing.SizingError, match=message):
        sizing.model_shape(config)


def test_parameters_that_cannot_be_estimated_are_refused() -> None:
    with pytest.raises(sizing.SizingError, match="lacks vocab_size"):
        sizing.estimate_parameters(sizing.model_shape({k: v for k, v in TINY.items() if k != "vocab_size"}))
    layered = {**TINY, "num_experts": 8, "moe_intermediate_size": 32, "mlp_only_layers": [0]}
    with pytest.raises(sizing.SizingError, match=r"differs between layers.*safetensors"):
        sizing.estimate_parameters(sizing.model_shape(layered))


def test_safetensors_headers_give_the_real_count(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "m", TINY)
    write_safetensors(folder / "model-00001-of-00002.safetensors", {"a": ("BF16", [10, 20], 400)})
    write_safetensors(folder / "model-00002-of-00002.safetensors", {"b": ("BF16", [7], 14), "c": ("F32", [3], 12)})
    tensors = load_checkpoint(folder).safetensors
    assert tensors is not None and (tensors.files, tensors.parameters, tensors.data_bytes) == (2, 210, 426)
    assert not tensors.quantized
    assert load_checkpoint(folder / "config.json").safetensors is None  # a bare config: only its numbers

    result = invoke(str(folder), "--context", "8", "--concurrency", "1", "--gpu-memory", "1Mi", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["parameters"] == 210 and data["weightBytes"] == 420  # bfloat16, as the engine loads it
    assert data["model"]["weightsFrom"] == "counted from the headers of 2 safetensors files"

    write_safetensors(folder / "model-00002-of-00002.safetensors", {"q": ("I8", [100], 100)})
    data = json.loads(invoke(str(folder), "--context", "8", "--concurrency", "1", "-o", "json").stdout)
    assert data["weightBytes"] == 500 and "quantized" in data["model"]["weightsFrom"]


def test_the_table_shows_the_arithmetic_and_json_and_yaml_carry_it(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "qwen", QWEN_72B)
    args = (str(folder), "--context", "32768", "--concurrency", "64", "--gpu-memory", "80Gi")
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    for shown in ("327,680 B", "2 × 80 layers × 8 KV heads × 128 head dim × 2 B", "estimated from config.json",
                  "135.4 GiB (145.4 GB)", "⌈64 concurrent / 16⌉"):  # fmt: skip
        assert shown in table.stdout, shown
    data = json.loads(invoke(*args, "-o", "json").stdout)
    assert (data["kvBytesPerToken"], data["kvBytesPerRequest"]) == (327_680, 10 * 2**30)
    # The KV cache gets 0.9 of what the weights leave: at TP 2, 11.1 GiB for 2 requests of 5 GiB (64 GPUs for the
    # load); at TP 4, 41.5 GiB for 16 of 2.5 GiB (16 GPUs); TP 8 also needs 16 GPUs (45 requests, 2 replicas).
    got = [(t["tensorParallel"], t["requests"], t["gpus"]) for t in data["tried"]]
    assert got == [(1, 0, None), (2, 2, 64), (4, 16, 16), (8, 45, 16)]
    assert (data["tensorParallel"], data["replicas"], data["gpus"], data["fits"]) == (4, 4, 16, True)
    assert yaml.safe_load(invoke(*args, "-o", "yaml").stdout) == data


def test_a_model_no_node_holds_is_explained(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "qwen", QWEN_72B)
    weights = invoke(str(folder), "--context", "4096", "--concurrency", "1", "--gpu-memory", "16Gi")
    assert weights.exit_code == 0, weights.output
    assert "Does not fit." in weights.stdout and "the weights alone take 16.9 GiB per GPU" in weights.stdout
    long = json.loads(invoke(str(folder), "--context", "2000000", "--concurrency", "1", "-o", "json").stdout)
    assert not long["fits"] and long["replicas"] is None and long["gpus"] is None
    assert "one request of 2000000 tokens needs" in long["explanation"] and "a shorter --context" in long["explanation"]
    assert any("max_position_embeddings (32768)" in note for note in long["notes"])


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (None, ["missing", "--context", "1", "--concurrency", "1"], "missing does not exist"),
        ({}, ["--context", "1", "--concurrency", "1"], "lacks num_hidden_layers"),
        ("not json", ["--context", "1", "--concurrency", "1"], "not JSON"),
        (TINY, ["--context", "0", "--concurrency", "1"], "Invalid value for '--context'"),
        (TINY, ["--context", "1", "--concurrency", "0"], "Invalid value for '--concurrency'"),
        (TINY, ["--context", "1", "--concurrency", "1", "--gpu-memory", "80GB"], "'80GB' is not a Kubernetes quantity"),
        (TINY, ["--context", "1", "--concurrency", "1", "--gpu-memory", "0"], "'0' is not a positive size"),
        (TINY, ["--context", "1", "--concurrency", "1", "--dtype", "int4"], "'int4' is not one of"),
    ],
)
def test_bad_input_is_a_usage_error(tmp_path: Path, setup: Any, args: list[str], message: str) -> None:
    target = tmp_path / "config.json"
    if isinstance(setup, dict):
        target.write_text(json.dumps(setup))
    elif isinstance(setup, str):
        target.write_text(setup)
    result = invoke(str(target) if setup is not None else str(tmp_path / args[0]), *args[setup is None :])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output  # rich may wrap or box the message
    assert "Traceback" not in result.output


def test_folders_without_a_config_and_broken_headers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"holds no config\.json"):
        load_checkpoint(tmp_path)
    write_config(tmp_path, TINY)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4)
    result = invoke(str(tmp_path), "--context", "1", "--concurrency", "1")
    assert result.exit_code == 2 and "not a safetensors file" in result.stderr
