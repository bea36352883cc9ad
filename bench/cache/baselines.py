"""The tools a user would pick instead of datahub, for the cold-read benchmark (the only
bench module that imports boto3 and s3fs directly)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import boto3
import s3fs
from botocore.config import Config as BotoConfig


def boto3_client(url: str, key: str, secret: str, pool: int = 32):
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=BotoConfig(s3={"addressing_style": "path"}, max_pool_connections=pool),
    )


def upload(client, bucket: str, objects: dict[str, bytes], threads: int = 16) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))


def boto3_threaded_read(client, bucket: str, keys: list[str], threads: int = 16) -> int:
    def get(key: str) -> int:
        return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(get, keys))


def s3fs_sequential_read(url: str, key: str, secret: str, bucket: str, keys: list[str]) -> int:
    fs = s3fs.S3FileSystem(
        key=key,
        secret=secret,
        client_kwargs={"endpoint_url": url, "region_name": "us-east-1"},
        skip_instance_cache=True,
    )
    return sum(len(fs.cat_file(f"{bucket}/{k}")) for k in keys)


def delete_all(client, bucket: str, keys: list[str]) -> None:
    """Leave a reused server (the dev Ceph cluster) as it was: objects, then the bucket."""
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]})
    client.delete_bucket(Bucket=bucket)
