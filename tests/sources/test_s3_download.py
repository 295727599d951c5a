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
    def run(*args: str, env: dict[str, str] | None = None) -> Run:
        env = {**os.environ, **s3_env, "PAGED_CACHE": str(tmp_path / "cache"), **(env or {})}
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
    log = tmp_path / "termination-log"
    again = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(dest), "--termination-log", str(log))
    assert again.returncode == 0 and "already holds" in again.stderr
    version = json.loads((dest / "paged_source.json").read_text())["version"]
    assert log.read_text() == f"Downloaded: s3://{BUCKET}/acme/tiny/ at version {version}"


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


def test_a_killed_attempts_leftovers_are_never_published(bucket, s3_download, tmp_path: Path) -> None:
    """What a SIGKILL mid-file leaves in the staging folder (moto answers too fast to kill a real download in its
    middle): whole files, and the transfer manager's half-written temporary file. The next run keeps the whole
    files, fetches the rest, and publishes only the listing's files."""
    dest = tmp_path / "volume" / "tiny"
    staging = dest.parent / ".staging" / dest.name
    staging.mkdir(parents=True)
    (staging / "config.json").write_bytes(repo_files()["config.json"])
    (staging / ".model.safetensors.part.3fA9c2B1").write_bytes(WEIGHTS[: len(WEIGHTS) // 2])
    (staging / "tokenizer.json").write_bytes(b"{")  # cut short
    run = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(dest))
    assert run.returncode == 0, run.stderr
    assert {f.name for f in dest.iterdir()} == SERVING | {"paged_source.json"}
    for name in SERVING:
        assert (dest / name).read_bytes() == repo_files()[name], name
    assert not staging.exists()


@pytest.fixture
def s3_auth(s3_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """moto checking credentials and IAM policies (it accepts anything otherwise); yields the keys of a user
    with no permission. Checking is turned off again afterwards, for the module's other tests."""
    import boto3
    import httpx

    iam = boto3.client("iam", endpoint_url=s3_env["AWS_ENDPOINT_URL"], aws_access_key_id="test-key",
                       aws_secret_access_key="test-secret", region_name="us-east-1")  # fmt: skip
    iam.create_user(UserName="no-access")
    key = iam.create_access_key(UserName="no-access")["AccessKey"]
    reset = f"{s3_env['AWS_ENDPOINT_URL']}/moto-api/reset-auth"
    httpx.post(reset, content=b"0").raise_for_status()
    try:
        yield {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    finally:
        httpx.post(reset, content=b"inf").raise_for_status()
        iam.delete_access_key(UserName="no-access", AccessKeyId=key["AccessKeyId"])
        iam.delete_user(UserName="no-access")


def test_access_denied_reads_clearly(bucket, s3_auth: dict[str, str], s3_download, tmp_path: Path) -> None:
    """A key S3 does not know, and a known key whose policy does not allow reading: each a clear message and exit
    code 1, and nothing left at the destination."""
    dest = tmp_path / "volume" / "tiny"
    unknown = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(dest), env={"AWS_ACCESS_KEY_ID": "AKIAWRONG"})
    assert unknown.returncode == 1
    assert f"ModelUnauthorized: S3 refused access to s3://{BUCKET}/acme/tiny/ (InvalidAccessKeyId)" in unknown.stderr
    assert "check the credentials and the bucket policy" in unknown.stderr and "Traceback" not in unknown.stderr
    denied = s3_download(f"s3://{BUCKET}/acme/tiny", "--dest", str(dest), env=s3_auth)
    assert denied.returncode == 1
    assert f"ModelUnauthorized: S3 refused access to s3://{BUCKET}/acme/tiny/ (AccessDenied)" in denied.stderr
    assert "Traceback" not in denied.stderr
    assert not dest.exists()


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
