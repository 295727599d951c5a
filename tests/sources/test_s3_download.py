"""``paged-engine download s3://BUCKET/PREFIX`` with boto3 against moto's S3 server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sources.conftest import SERVING, WEIGHTS, Run, repo_files

BUCKET = "weights"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_env(s3_endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@pytest.fixture
def bucket(s3_env: dict[str, str]):  # type: ignore[no-untyped-def]
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], aws_access_key_id="test-key",
                      aws_secret_access_key="test-secret", region_name="us-east-1")  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    for name, data in repo_files().items():
        s3.put_object(Bucket=BUCKET, Key=f"acme/tiny/{name}", Body=data)
    s3.put_object(Bucket=BUCKET, Key="acme/bin-only/config.json", Body=b"{}")
    s3.put_object(Bucket=BUCKET, Key="acme/bin-only/pytorch_model.bin", Body=b"\0")
    yield s3
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
    s3.delete_bucket(Bucket=BUCKET)


@pytest.fixture
def s3_download(s3_env: dict[str, str], tmp_path: Path):  # type: ignore[no-untyped-def]
    def run(*args: str) -> Run:
        env = {**os.environ, **s3_env, "PAGED_CACHE_DIR": str(tmp_path / "cache")}
        done = subprocess.run([sys.executable, "-m", "paged_engine.cli", "download", *args], capture_output=True,
                              text=True, env=env, timeout=120)  # fmt: skip
        return Run(done.returncode, done.stdout.strip(), done.stderr)

    return run


def test_downloads_the_serving_files_of_a_prefix(bucket, s3_download, tmp_path: Path) -> None:
    run = s3_download(f"s3://{BUCKET}/acme/tiny")
    assert run.returncode == 0, run.stderr
    folder = Path(run.stdout)
    assert folder.parent.parent == tmp_path / "cache" / "models" / "s3" / BUCKET / "acme--tiny"
    assert {f.name for f in folder.iterdir()} == SERVING | {"paged_source.json"}
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert json.loads((folder / "paged_source.json").read_text())["uri"] == f"s3://{BUCKET}/acme/tiny/"


def test_unchanged_objects_are_reused_and_changed_ones_land_in_a_new_folder(bucket, s3_download) -> None:
    first = s3_download(f"s3://{BUCKET}/acme/tiny/")
    assert first.returncode == 0, first.stderr
    again = s3_download(f"s3://{BUCKET}/acme/tiny/")
    assert again.stdout == first.stdout and "downloading" not in again.stderr
    bucket.put_object(Bucket=BUCKET, Key="acme/tiny/config.json", Body=b'{"model_type": "llama", "changed": 1}')
    changed = s3_download(f"s3://{BUCKET}/acme/tiny/")
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout != first.stdout
    assert b"changed" in (Path(changed.stdout) / "config.json").read_bytes()


def test_dest_mode(bucket, s3_download, tmp_path: Path) -> None:
    dest = tmp_path / "volume" / "tiny"
    run = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(dest))
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout) == dest and (dest / "model.safetensors").read_bytes() == WEIGHTS
    again = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(dest))
    assert again.returncode == 0 and "already holds" in again.stderr


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (f"s3://{BUCKET}/acme/nothing", f"ModelNotFound: no objects under s3://{BUCKET}/acme/nothing/"),
        ("s3://no-such-bucket/x", "ModelNotFound: s3://no-such-bucket/x/: NoSuchBucket"),
        (f"s3://{BUCKET}/acme/bin-only", "NoSafetensors: s3://weights/acme/bin-only/ has no *.safetensors"),
    ],
)
def test_failures_read_clearly(bucket, s3_download, uri: str, expected: str) -> None:
    run = s3_download(uri)
    assert run.returncode == 1
    assert expected in run.stderr and "Traceback" not in run.stderr


def test_disk_full(bucket, s3_download, tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        run = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(mount / "tiny"))
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert run.returncode == 1
    assert "DiskFull: not enough space in" in run.stderr
