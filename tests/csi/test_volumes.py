"""Volume attributes, capabilities, secrets and the per-volume config file, without gRPC or mounts."""

from __future__ import annotations

import pytest

from csi.volume_config import renew_platform_keys, write_volume_config
from csi.volumes import Capability, check_capability, parse_context, parse_secrets, workspace_name
from datahub.config import load_config
from datahub.errors import InvalidInput

RW = Capability("mount", "SINGLE_NODE_WRITER")


def test_dataset_attributes() -> None:
    spec = parse_context({"dataset": "imgs", "version": "v3", "prefix": "/train/", "cache": "none"}, "v")
    assert (spec.kind, spec.dataset, spec.version, spec.prefix, spec.cache) == (
        "dataset",
        "imgs",
        "v3",
        "train",
        "none",
    )
    assert parse_context({"dataset": "imgs"}, "v").version == "latest"
    assert not spec.writable


def test_kubernetes_pod_info_is_ignored() -> None:
    context = {
        "bucket": "my-bucket",
        "prefix": "raw",
        "csi.storage.k8s.io/ephemeral": "true",
        "csi.storage.k8s.io/pod.name": "trainer-0",
    }
    spec = parse_context(context, "csi-123")
    assert spec.kind == "bucket" and spec.bucket_url == "s3://my-bucket/raw" and not spec.refresh


def test_workspace_attributes() -> None:
    spec = parse_context({"workspace": "run-1", "commitTo": "outputs", "uid": "1000"}, "v")
    assert (spec.kind, spec.workspace, spec.commit_to, spec.uid) == ("workspace", "run-1", "outputs", 1000)
    assert spec.writable


def test_workspace_names_from_pod_info() -> None:
    info = {"csi.storage.k8s.io/pod.name": "eval-7f9c", "csi.storage.k8s.io/pod.namespace": "team-a"}
    spec = parse_context({"workspace": "out-${pod.namespace}-${pod.name}", **info}, "csi-1")
    assert spec.workspace == "out-team-a-eval-7f9c"
    for bad in ("out-${pod.name}", "out-${node.name}"):  # no pod info / unknown placeholder
        with pytest.raises(InvalidInput):
            parse_context({"workspace": bad}, "csi-1")


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"dataset": "a", "bucket": "b-b-b"},
        {"dataset": "Bad Name"},
        {"dataset": "imgs", "version": "a b"},
        {"dataset": "imgs", "prefix": "a/../b"},
        {"dataset": "imgs", "cache": "fast"},
        {"dataset": "imgs", "commitTo": "x"},  # a workspace attribute on a dataset volume
        {"bucket": "s3://bucket"},
        {"bucket": "bucket", "refresh": "maybe"},
        {"dataset": "imgs", "prefetch": "yes"},
        {"workspace": "w", "prefetch": "true"},  # nothing to warm in a writable workspace
        {"workspace": "w", "commitTo": "Bad Name"},
        {"workspace": "w", "uid": "-1"},
    ],
)
def test_bad_attributes_are_invalid_input(context: dict) -> None:
    with pytest.raises(InvalidInput):
        parse_context(context, "vol")


def test_capabilities() -> None:
    ws = parse_context({"workspace": "w"}, "v")
    ds = parse_context({"dataset": "d"}, "v")
    assert check_capability(ws, RW, "v") == RW
    assert check_capability(
        ds, Capability("mount", "MULTI_NODE_MULTI_WRITER"), "v"
    )  # published read-only anyway
    for bad_spec, cap in [
        (ds, None),
        (ds, Capability("block", "SINGLE_NODE_WRITER")),
        (ds, Capability("mount", "UNKNOWN")),
        (ws, Capability("mount", "MULTI_NODE_READER_ONLY")),
        (ws, Capability("mount", "MULTI_NODE_SINGLE_WRITER")),
    ]:
        with pytest.raises(InvalidInput):
            check_capability(bad_spec, cap, "v")


def test_workspace_names_from_volume_names() -> None:
    assert workspace_name("pvc-1234") == "pvc-1234"
    odd = workspace_name("PVC_Ünïcode/name")
    assert odd == workspace_name("PVC_Ünïcode/name") and odd != workspace_name("pvc_Ünïcode/name")
    assert len(workspace_name("x" * 200)) <= 63
    with pytest.raises(InvalidInput):
        workspace_name("")


def test_secrets_map_to_config_overrides_and_unknown_keys_are_refused() -> None:
    overrides = parse_secrets({"s3AccessKeyId": "ak", "s3SecretAccessKey": "sk", "s3Endpoint": "http://e"})
    assert overrides == {"s3": {"access_key_id": "ak", "secret_access_key": "sk", "endpoint_url": "http://e"}}
    assert parse_secrets({}) == {}
    with pytest.raises(InvalidInput) as exc:
        parse_secrets({"password": "hunter2"})
    assert "hunter2" not in str(exc.value)


def test_a_secret_cannot_choose_the_catalog() -> None:
    """The catalog decides the pod's access check and names what the plugin reads as root."""
    with pytest.raises(InvalidInput) as exc:
        parse_secrets({"s3AccessKeyId": "ak", "catalogUrl": "mongodb://attacker/db"})
    assert "catalogUrl" in str(exc.value) and "plugin's configuration" in str(exc.value)
    assert "attacker" not in str(exc.value)


def test_volume_config_round_trips_through_load_config(tmp_path) -> None:
    base = load_config(env={}, overrides={"home": str(tmp_path / "home"), "cache": {"ram_bytes": 12345}})
    tricky = 'quote " backslash \\ newline \n unicode é'
    path = tmp_path / "vol" / "datahub.toml"
    loaded = write_volume_config(
        base,
        {"s3": {"secret_access_key": tricky}, "cache": {"profile": "write-back"}},
        path,
        catalog_authorised=True,
    )
    assert loaded.s3.secret_access_key == tricky
    assert loaded.cache.ram_bytes == 12345 and loaded.cache.profile == "write-back"
    assert loaded.home_path == base.home_path and loaded.s3.path_style is True
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_volumes_secrets_set_its_s3_and_never_the_shared_tiers(tmp_path) -> None:
    """cache.shared_s3 of a volume's config is the plugin's S3 settings (its own
    cache.shared_s3 if set, else its [s3]), whatever the secrets give [s3]."""
    plugin_s3 = {
        "endpoint_url": "http://rgw:7480",
        "access_key_id": "plugin",
        "secret_access_key": "p-secret",
    }
    base = load_config(env={}, overrides={"home": str(tmp_path / "home"), "s3": plugin_s3})
    secrets = parse_secrets({"s3AccessKeyId": "pod", "s3SecretAccessKey": "pod-secret"})
    loaded = write_volume_config(base, secrets, tmp_path / "a" / "datahub.toml", catalog_authorised=True)
    assert (loaded.s3.access_key_id, loaded.s3.secret_access_key) == ("pod", "pod-secret")
    assert loaded.cache.shared_s3 == base.s3
    cache_key = {"access_key_id": "cache", "secret_access_key": "c-secret", "region": "eu-1"}
    base = load_config(env={}, overrides={"home": str(tmp_path / "home"), "cache": {"shared_s3": cache_key}})
    loaded = write_volume_config(base, secrets, tmp_path / "b" / "datahub.toml", catalog_authorised=True)
    assert loaded.cache.shared_s3 == base.cache.shared_s3 and loaded.cache.shared_s3.region == "eu-1"
    assert loaded.s3.access_key_id == "pod"


def test_a_remount_renews_the_shared_tiers_settings_and_keeps_the_secrets(tmp_path) -> None:
    """A file written before cache.shared_s3 existed gets the plugin's settings there."""
    path = tmp_path / "vol" / "datahub.toml"
    path.parent.mkdir()
    path.write_text('[s3]\naccess_key_id = "pod"\nsecret_access_key = "pod-secret"\n')
    base = load_config(env={}, overrides={"s3": {"access_key_id": "plugin", "secret_access_key": "p"}})
    loaded = renew_platform_keys(base, path, catalog_authorised=True)
    assert (loaded.s3.access_key_id, loaded.s3.secret_access_key) == ("pod", "pod-secret")
    assert loaded.cache.shared_s3 == base.s3 and loaded.objects_s3 == base.s3
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_only_a_catalog_authorised_volume_gets_the_plugins_objects_keys(tmp_path) -> None:
    """objects_s3 of a dataset or workspace volume's config is the plugin's (its own
    objects_s3 if set, else its [s3]); a bucket volume's config has none, even when the
    plugin sets one, and a remount of it drops one it was given."""
    plugin_s3 = {"access_key_id": "plugin", "secret_access_key": "p-secret"}
    objects = {"access_key_id": "objects", "secret_access_key": "o-secret", "region": "eu-1"}
    secrets = parse_secrets({"s3AccessKeyId": "pod", "s3SecretAccessKey": "pod-secret"})
    base = load_config(env={}, overrides={"home": str(tmp_path / "home"), "s3": plugin_s3})
    loaded = write_volume_config(base, secrets, tmp_path / "a" / "datahub.toml", catalog_authorised=True)
    assert loaded.objects_s3 == base.s3 and loaded.s3.access_key_id == "pod"
    base = load_config(
        env={}, overrides={"home": str(tmp_path / "home"), "s3": plugin_s3, "objects_s3": objects}
    )
    loaded = write_volume_config(base, secrets, tmp_path / "b" / "datahub.toml", catalog_authorised=True)
    assert loaded.objects_s3 == base.objects_s3 and loaded.objects_s3.region == "eu-1"
    path = tmp_path / "c" / "datahub.toml"
    loaded = write_volume_config(base, secrets, path, catalog_authorised=False)
    assert loaded.objects_s3 is None and loaded.s3.access_key_id == "pod"
    assert "objects_s3" not in path.read_text() and "o-secret" not in path.read_text()
    (tmp_path / "d").mkdir()
    path = tmp_path / "d" / "datahub.toml"
    path.write_text(
        '[s3]\naccess_key_id = "pod"\nsecret_access_key = "pod-secret"\n[objects_s3]\naccess_key_id = "x"\n'
    )
    assert renew_platform_keys(base, path, catalog_authorised=False).objects_s3 is None


def test_access_lists() -> None:
    from csi.access import pod_principal, require
    from datahub.catalog.model import Dataset
    from datahub.errors import AccessDenied

    sa = pod_principal(
        {"csi.storage.k8s.io/pod.namespace": "ns", "csi.storage.k8s.io/serviceAccount.name": "sa"}
    )
    assert sa == "system:serviceaccount:ns:sa" and pod_principal({}) is None
    require(Dataset("open"), None, "writer")  # no acl, no owner: every pod
    require(Dataset("mine", owner=sa), sa, "writer")
    require(Dataset("shared", acl={"*": "reader"}), None, "reader")
    require(Dataset("team", acl={sa: "writer"}), sa, "reader")  # writer includes reader
    for dataset, principal, role in [
        (Dataset("team", acl={sa: "reader"}), sa, "writer"),
        (Dataset("team", acl={sa: "reader"}), "system:serviceaccount:other:sa", "reader"),
        (Dataset("team", acl={sa: "reader"}), None, "reader"),
        (Dataset("owned", owner="alice"), sa, "reader"),
    ]:
        with pytest.raises(AccessDenied):
            require(dataset, principal, role)


def _args_of(context: dict) -> list[str]:
    from csi.node import _mount_args
    from csi.state import Published

    spec = parse_context(context, "v")
    p = Published("/t", "v", spec, True, "f", ["src"], "", "/vol")
    return _mount_args(p, first=True)


def test_prefetch_attribute_reaches_the_mount_and_defaults_to_the_mounts_default() -> None:
    """Dataset volumes are warmed in the background by default (the mount's default, issue 13
    item 5); ``prefetch: "false"`` turns it off, and a bucket volume warms only when asked."""
    assert parse_context({"dataset": "imgs"}, "v").prefetch is None
    assert parse_context({"dataset": "imgs", "prefetch": "False"}, "v").prefetch is False
    assert parse_context({"bucket": "my-bucket", "prefetch": "true"}, "v").prefetch is True
    default = _args_of({"dataset": "imgs"})
    assert "--prefetch" not in default and "--no-prefetch" not in default
    assert "--no-prefetch" in _args_of({"dataset": "imgs", "prefetch": "false"})
    assert "--prefetch" in _args_of({"bucket": "my-bucket", "prefetch": "true"})
    no_cache = _args_of({"dataset": "imgs", "cache": "none", "prefetch": "true"})
    assert "--no-cache" in no_cache and "--prefetch" not in no_cache  # nothing to keep a warmed page in


def test_the_mount_warms_dataset_versions_by_default_and_buckets_by_policy_unless_told() -> None:
    import argparse

    from fuse_adapter.mount_cmd import bucket_warmup_mode, register, warm_up_wanted

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())

    def parse(*argv: str) -> argparse.Namespace:
        return parser.parse_args(["mount", "/mnt", "src", *argv])

    assert warm_up_wanted(parse()) and bucket_warmup_mode(parse()) is None  # None: the automatic policy
    assert not warm_up_wanted(parse("--no-prefetch")) and bucket_warmup_mode(parse("--no-prefetch")) is False
    assert bucket_warmup_mode(parse("--prefetch")) is True
    assert (
        not warm_up_wanted(parse("--no-cache"))
        and bucket_warmup_mode(parse("--no-cache", "--prefetch")) is False
    )
    with pytest.raises(SystemExit):  # one or the other
        parser.parse_args(["mount", "/mnt", "src", "--prefetch", "--no-prefetch"])
