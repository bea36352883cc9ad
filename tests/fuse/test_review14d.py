"""review14d: adversarial checks of d8f1ec5 (a mount that fails before serving closes its
cache) on real mounts: a bucket mount that failed after its listing thread and warm-up were
made, at the kernel mount itself (its fsname), and left its cache open."""

from __future__ import annotations

import pytest

from tests.fuse.conftest import FuseEnv


@pytest.mark.parametrize("prefix", ["a,b", "données"], ids=["comma", "non-ascii"])
def test_a_bucket_prefix_with_a_comma_or_non_ascii_mounts_and_closes_its_cache(
    env: FuseEnv, prefix: str
) -> None:
    """S3 keys may hold commas and any UTF-8; a bucket mount names its source in the mount's
    fsname, which libfuse splits at commas and pyfuse3 encodes as ASCII. Before, such a
    prefix could not be mounted at all ('fuse_session_new() failed' / UnicodeEncodeError,
    both reported as 'a datahub bug'), and that failure, at the kernel mount, came after the
    cache was opened and was not closed (d8f1ec5 closes it only for failures before the
    threads start), so the next start rebuilt its index as after a crash."""
    env.endpoint.client().put_object(Bucket=env.bucket, Key=f"{prefix}/x.txt", Body=b"hello")
    mnt = env.mountpoint("odd-prefix")
    with env.mounted(mnt, f"s3://{env.bucket}/{prefix}"):
        assert (mnt / "x.txt").read_bytes() == b"hello"
    with env.mounted(mnt, f"s3://{env.bucket}/{prefix}"):  # the first closed its cache
        pass
    log = (env.root / f"mount-{mnt.name}.log").read_text()
    assert "a previous process did not close it" not in log, log
