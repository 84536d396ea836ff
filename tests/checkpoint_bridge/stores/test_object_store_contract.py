"""What the backends do beyond the conformance suite (test_conformance.py): folders left
behind, unsafe deletes, and opening stores from URLs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from store_backends import Backend, make_bucket

from checkpoint_bridge.stores import FileObjectStore, S3ObjectStore, open_object_store, parse_store_url
from checkpoint_bridge.checkpoints.store import DEFAULT_STORE_URL, open_checkpoint_store
from workflows.vocabulary.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    InvalidIdError,
    StoreUnavailableError,
)


async def test_delete_prefix_deletes_only_that_prefix(backend: Backend) -> None:
    objects = backend.objects()
    for key in ["runs/a/1.json", "runs/a/deep/2.json", "runs/ab/3.json"]:
        await objects.put_if_absent(key, b"{}")
    await objects.delete_prefix("runs/a/")
    assert await objects.list("") == ["runs/ab/3.json"]
    await objects.delete_prefix("runs/a/")  # nothing left: fine
    if isinstance(objects, FileObjectStore):
        assert not (objects.root / "runs" / "a").exists()  # no empty folders left behind


async def test_delete_removes_one_object_and_says_whether_it_was_there(backend: Backend) -> None:
    objects = backend.objects()
    for key in ["segments/ab/abc.json", "segments/ab/abd.json", "segments/ac/ace.json"]:
        await objects.put_if_absent(key, b"{}")
    assert await objects.delete("segments/ab/abc.json") is True
    with pytest.raises(CheckpointNotFoundError):
        await objects.get("segments/ab/abc.json")
    assert await objects.delete("segments/ab/abc.json") is False  # twice: harmless, and says so
    assert await objects.delete("segments/zz/never.json") is False
    assert await objects.list("") == ["segments/ab/abd.json", "segments/ac/ace.json"]
    # Another process sees it gone; the key can be written again (a rebuilt run).
    twin = backend.reopen(objects)
    backend.opened.append(twin)
    assert await twin.list("segments/ac/") == ["segments/ac/ace.json"]
    assert await objects.delete("segments/ac/ace.json") is True
    assert await twin.put_if_absent("segments/ac/ace.json", b"again") is True
    if isinstance(objects, FileObjectStore):
        await objects.delete("segments/ab/abd.json")
        assert not (objects.root / "segments" / "ab").exists()  # the emptied folder goes too
        assert (objects.root / "segments" / "ac").is_dir()


async def test_delete_refuses_unsafe_keys_and_names_a_store_that_is_down(backend: Backend) -> None:
    objects = backend.objects()
    for key in ["../outside.json", "/abs.json", "a/../b.json", ""]:
        with pytest.raises(InvalidIdError):
            await objects.delete(key)
    broken = backend.broken()
    backend.opened.append(broken)
    with pytest.raises(StoreUnavailableError) as caught:
        await broken.delete("segments/ab/abc.json")
    assert broken.url in str(caught.value) and "delete" in str(caught.value)


def test_open_object_store_accepts_the_documented_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_object_store("file://data/checkpoints")
    assert isinstance(relative, FileObjectStore) and relative.root == tmp_path / "data" / "checkpoints"
    absolute = open_object_store(f"file://{tmp_path}/abs")
    assert isinstance(absolute, FileObjectStore) and absolute.root == tmp_path / "abs"
    assert absolute.url == (tmp_path / "abs").as_uri()
    bare = open_object_store("plain/folder")
    assert isinstance(bare, FileObjectStore) and bare.root == tmp_path / "plain" / "folder"
    s3 = open_object_store("s3://my-bucket/team/rewind/", endpoint_url="http://127.0.0.1:9000")
    assert isinstance(s3, S3ObjectStore)
    assert (s3.bucket, s3.prefix, s3.url) == ("my-bucket", "team/rewind", "s3://my-bucket/team/rewind")
    assert s3.endpoint_url == "http://127.0.0.1:9000"
    assert open_object_store("s3://my-bucket").url == "s3://my-bucket"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "url", ["", "   ", "http://example.com/x", "gs://bucket/x", "s3://", "s3:///prefix", "file://",
            "s3://Bad_Bucket/x", "s3://bucket/../x", "s3:/bucket/x", "s3//bucket/x"],
)
def test_open_object_store_rejects_other_urls_and_shows_the_accepted_forms(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_object_store(url)
    assert repr(url) in str(caught.value) or "bucket" in str(caught.value)
    if "://" in url and not url.startswith(("s3://", "file://")):
        assert "s3://bucket" in str(caught.value) and "file://" in str(caught.value)


@pytest.mark.parametrize("url, named, fix", [
    ("dynamodb://rewind-checkpoints?region=us-east-1", "?region=us-east-1", "set AWS_REGION=us-east-1 in the environment"),
    ("s3://bucket/cp?endpoint_url=http://127.0.0.1:9000", "?endpoint_url=http://127.0.0.1:9000",
     "set AWS_ENDPOINT_URL=http://127.0.0.1:9000 in the environment"),
    ("s3://bucket?aws_secret_access_key=hunter2", "?aws_secret_access_key=...", "set AWS_SECRET_ACCESS_KEY in the"),
    ("dynamodb://table?consistent=1", "?consistent=...", "its settings are environment variables (AWS_REGION"),
    ("sqlite:///tmp/x.db?mode=ro", "?mode=...", "it takes no options; use sqlite:///path/file.db"),
    ("file:///tmp/cp?fsync=0", "?fsync=...", "it takes no options; use file://path"),
])
def test_a_query_no_backend_reads_is_refused_naming_it_and_where_it_goes(url: str, named: str, fix: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_object_store(url)
    text = str(caught.value)
    assert named in text and fix in text and "reads no query" in text, text
    assert "invalid" not in text and "hunter2" not in text, text


def test_a_query_its_backend_reads_is_kept() -> None:
    assert parse_store_url("postgresql://rewind@db:5432/rewind?schema=team").url.endswith("?schema=team")
    assert parse_store_url("redis://cache:6379/0?namespace=a").url.endswith("?namespace=a")


def test_default_checkpoint_store_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rewind.settings.config import Settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REWIND_STORE", raising=False)
    monkeypatch.delenv("REWIND_HOME", raising=False)
    assert DEFAULT_STORE_URL == "file://.rewind/checkpoints"
    assert open_checkpoint_store(Settings.from_env().store_url).url == (tmp_path / ".rewind" / "checkpoints").as_uri()
    monkeypatch.setenv("REWIND_STORE", "file://elsewhere")
    assert open_checkpoint_store(Settings.from_env().store_url).url == (tmp_path / "elsewhere").as_uri()
    assert open_checkpoint_store("file://explicit").url == (tmp_path / "explicit").as_uri()


async def test_s3_endpoint_comes_from_the_environment(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rewind.settings.config import Settings
    from rewind.stores import object_store

    _client, bucket = make_bucket(moto_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    async with object_store(Settings.from_env(), f"s3://{bucket}/env") as objects:  # type: ignore[attr-defined]
        assert await objects.put_if_absent("x.json", b"{}") is True
        assert await objects.get("x.json") == b"{}"
