"""The pure parts of model sources: what a MODEL string names, and which files serving needs."""

from __future__ import annotations

import pytest
from paged_engine.loader.sources.errors import ModelSourceError, SourceFailure
from paged_engine.loader.sources.selection import DISK_MARGIN_BYTES, check_space, missing_bytes, serving_files
from paged_engine.loader.sources.spec import HubSource, LocalSource, S3Source, parse_source


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, LocalSource(None)),
        ("default", LocalSource(None)),
        ("Qwen/Qwen2.5-0.5B", HubSource("Qwen/Qwen2.5-0.5B", "main")),
        ("/models/llama", LocalSource("/models/llama")),
        ("./llama", LocalSource("./llama")),
        ("org/model.gguf", LocalSource("org/model.gguf")),
        ("s3://weights/llama/8b", S3Source("weights", "llama/8b/")),
        ("s3://weights", S3Source("weights", "")),
        ("no-slash-name", LocalSource("no-slash-name")),
    ],
)
def test_parse(text: str | None, expected: object) -> None:
    assert parse_source(text) == expected


def test_an_existing_folder_wins_over_the_hub_id_spelled_the_same() -> None:
    assert parse_source("org/name", path_exists=lambda p: p == "org/name") == LocalSource("org/name")


def test_revision_is_for_hub_ids_only() -> None:
    assert parse_source("org/name", "v1.0") == HubSource("org/name", "v1.0")
    assert parse_source("org/name", "a" * 40).pinned
    for text in ("/models/x", "s3://bucket/x", None):
        with pytest.raises(ModelSourceError, match="--revision applies to a Hugging Face repo id"):
            parse_source(text, "v1")


@pytest.mark.parametrize("text", ["s3://Bad_Bucket/x", "s3://ab/x", "s3://bucket/a/../b"])
def test_bad_s3_uris_name_the_problem(text: str) -> None:
    with pytest.raises(ModelSourceError) as err:
        parse_source(text)
    assert err.value.reason is SourceFailure.INVALID


def test_serving_files_skip_what_serving_does_not_read() -> None:
    names = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
             "model.safetensors.index.json", "tokenizer.json", "pytorch_model.bin", "README.md",
             "original/consolidated.00.pth", "onnx/model.onnx", "generation_config.json"]  # fmt: skip
    assert serving_files(names, "x") == [
        "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
    ]  # fmt: skip


def test_no_safetensors_says_what_the_repo_has() -> None:
    with pytest.raises(ModelSourceError, match=r"repo has no \*\.safetensors weights \(it has only \*\.bin"):
        serving_files(["config.json", "pytorch_model.bin"], "repo")
    with pytest.raises(ModelSourceError, match=r"safetensors but no config\.json"):
        serving_files(["model.safetensors"], "repo")


def test_space_check_counts_what_is_left_to_fetch() -> None:
    sizes = {"a": 100 << 20, "b": 50 << 20}
    assert missing_bytes(sizes, {"a": 100 << 20, "b": 10 << 20}) == 40 << 20
    assert missing_bytes({"a": None}, {}) is None
    check_space(40 << 20, (40 << 20) + DISK_MARGIN_BYTES, "/cache")
    with pytest.raises(ModelSourceError, match=r"needs 40\.0 MiB more, 100\.0 MiB is free") as err:
        check_space(40 << 20, 100 << 20, "/cache")
    assert err.value.reason is SourceFailure.DISK_FULL
    check_space(None, 0, "/cache")  # unknown sizes: the write itself reports a full disk
