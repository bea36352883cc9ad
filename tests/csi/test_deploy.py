"""The manifests in csi/deploy parse, and say what a working install needs."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from csi.__main__ import DRIVER_NAME, build_parser
from csi.volumes import parse_context

DEPLOY = Path(__file__).resolve().parents[2] / "csi" / "deploy"


def load_all() -> dict[str, list[dict]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in sorted(DEPLOY.glob("*.yaml"))
    }


def objects(kind: str) -> list[dict]:
    return [d for docs in load_all().values() for d in docs if d.get("kind") == kind]


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"] if "template" in obj.get("spec", {}) else obj["spec"]


def container(obj: dict, name: str) -> dict:
    [c] = [c for c in pod_spec(obj)["containers"] if c["name"] == name]
    return c


def test_every_manifest_parses_and_names_its_object() -> None:
    docs = load_all()
    assert {"csidriver.yaml", "node.yaml", "controller.yaml", "rbac.yaml", "example-inline-pod.yaml"} <= set(
        docs
    )
    for name, items in docs.items():
        assert items, name
        for d in items:
            assert d.get("apiVersion") and d.get("kind"), name
            assert d.get("metadata", {}).get("name") or d["kind"] == "Kustomization", name


def test_kustomization_lists_existing_files() -> None:
    [k] = objects("Kustomization")
    for resource in k["resources"]:
        assert (DEPLOY / resource).is_file(), resource


def test_csidriver() -> None:
    [driver] = objects("CSIDriver")
    assert driver["metadata"]["name"] == DRIVER_NAME
    assert driver["spec"]["attachRequired"] is False
    assert set(driver["spec"]["volumeLifecycleModes"]) == {"Persistent", "Ephemeral"}


def test_node_daemonset_has_registrar_fuse_propagation_and_privileges() -> None:
    [ds] = objects("DaemonSet")
    registrar = container(ds, "node-driver-registrar")
    assert f"--kubelet-registration-path=/var/lib/kubelet/plugins/{DRIVER_NAME}/csi.sock" in registrar["args"]
    plugin = container(ds, "datahub-csi")
    assert plugin["securityContext"]["privileged"] is True
    mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pods"]["mountPropagation"] == "Bidirectional"
    # NodeStageVolume binds staged volumes under the kubelet's staging dir
    assert mounts["/var/lib/kubelet/plugins/kubernetes.io/csi"]["mountPropagation"] == "Bidirectional"
    assert mounts["/var/lib/datahub-csi"]["mountPropagation"] == "Bidirectional"
    volumes = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    assert volumes[mounts["/dev/fuse"]["name"]]["hostPath"] == {"path": "/dev/fuse", "type": "CharDevice"}
    assert volumes[mounts["/var/lib/datahub-csi"]["name"]]["hostPath"]["path"] == "/var/lib/datahub-csi"
    args = build_parser().parse_args(plugin["args"])  # the plugin accepts its manifest's flags
    assert (
        args.mode == "node"
        and args.endpoint == "unix:///csi/csi.sock"
        and args.state_dir == "/var/lib/datahub-csi"
    )


def test_controller_deployment_runs_the_provisioner() -> None:
    [deploy] = objects("Deployment")
    assert "--csi-address=/csi/csi.sock" in container(deploy, "csi-provisioner")["args"]
    args = build_parser().parse_args(container(deploy, "datahub-csi")["args"])
    assert args.mode == "controller"
    service_accounts = {sa["metadata"]["name"] for sa in objects("ServiceAccount")}
    assert pod_spec(deploy)["serviceAccountName"] in service_accounts
    assert pod_spec(objects("DaemonSet")[0])["serviceAccountName"] in service_accounts


def test_rbac_bindings_point_at_existing_roles_and_accounts() -> None:
    roles = {(r["kind"], r["metadata"]["name"]) for r in objects("ClusterRole") + objects("Role")}
    accounts = {sa["metadata"]["name"] for sa in objects("ServiceAccount")}
    for binding in objects("ClusterRoleBinding") + objects("RoleBinding"):
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
        assert all(s["name"] in accounts for s in binding["subjects"])
    [provisioner] = objects("ClusterRole")
    pv_rule = [r for r in provisioner["rules"] if "persistentvolumes" in r["resources"]]
    assert {"create", "delete"} <= set(pv_rule[0]["verbs"])


def test_examples_use_the_driver_with_valid_attributes_and_no_secrets_in_pods() -> None:
    csi_sources = [pv["spec"]["csi"] for pv in objects("PersistentVolume")]
    pod_info = {"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/pod.namespace": "default"}
    for pod in objects("Pod"):
        csi_sources += [{**v["csi"], "info": pod_info} for v in pod_spec(pod)["volumes"] if "csi" in v]
        for c in pod_spec(pod)["containers"]:
            assert "envFrom" not in c and not any("secretKeyRef" in str(e) for e in c.get("env", []))
    assert len(csi_sources) >= 3
    for source in csi_sources:
        assert source["driver"] == DRIVER_NAME
        parse_context({**source["volumeAttributes"], **source.get("info", {})}, "example")  # raises if bad
    [pv] = objects("PersistentVolume")
    assert pv["spec"]["csi"]["readOnly"] is True
    [sc] = objects("StorageClass")
    assert sc["provisioner"] == DRIVER_NAME


@pytest.mark.parametrize("line", ["FROM ", 'ENTRYPOINT ["python", "-m", "csi"]', "fuse3"])
def test_dockerfile(line: str) -> None:
    assert line in (DEPLOY / "Dockerfile").read_text()


# --- issue 14: what a production install needs, and Kubernetes' own schemas ------------------------
def test_both_workloads_have_a_liveness_probe_sidecar_and_health_port() -> None:
    for workload in objects("DaemonSet") + objects("Deployment"):
        name = workload["metadata"]["name"]
        sidecar = container(workload, "liveness-probe")
        assert sidecar["image"].startswith("registry.k8s.io/sig-storage/livenessprobe:"), name
        assert "--csi-address=/csi/csi.sock" in sidecar["args"] and "--health-port=9808" in sidecar["args"]
        plugin = container(workload, "datahub-csi")
        assert {"name": "healthz", "containerPort": 9808, "protocol": "TCP"} in plugin["ports"], name
        assert plugin["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}, name
        # the sidecar reaches the plugin's socket through the same volume
        socket_volume = {m["name"] for m in plugin["volumeMounts"] if m["mountPath"] == "/csi"}
        assert {m["name"] for m in sidecar["volumeMounts"] if m["mountPath"] == "/csi"} == socket_volume


def test_every_container_has_resource_requests_and_limits() -> None:
    for workload in objects("DaemonSet") + objects("Deployment"):
        for c in pod_spec(workload)["containers"]:
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), (
                    workload["metadata"]["name"],
                    c["name"],
                )


def test_the_controller_has_a_disruption_budget_and_leader_election_rbac() -> None:
    [deploy] = objects("Deployment")
    [pdb] = objects("PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == deploy["metadata"]["namespace"]
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["minAvailable"] < deploy["spec"]["replicas"]  # a drain can still proceed
    assert "--leader-election" in container(deploy, "csi-provisioner")["args"]
    lease_rules = [
        rule
        for role in objects("Role")
        for rule in role["rules"]
        if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]
    ]
    assert lease_rules and {"get", "watch", "list", "create", "update", "delete"} <= set(
        lease_rules[0]["verbs"]
    )
    [binding] = [b for b in objects("RoleBinding") if b["roleRef"]["name"] == "datahub-csi-leader-election"]
    assert {s["name"] for s in binding["subjects"]} == {pod_spec(deploy)["serviceAccountName"]}


def test_example_pods_see_repaired_mounts() -> None:
    """docs/csi.md: every example pod's CSI volumeMount sets HostToContainer propagation."""
    for pod in objects("Pod"):
        csi_volumes = {
            v["name"] for v in pod_spec(pod)["volumes"] if "csi" in v or "persistentVolumeClaim" in v
        }
        for c in pod_spec(pod)["containers"]:
            for m in c["volumeMounts"]:
                if m["name"] in csi_volumes:
                    assert m.get("mountPropagation") == "HostToContainer", (
                        pod["metadata"]["name"],
                        m["name"],
                    )


kubernetes_validate = pytest.importorskip(
    "kubernetes_validate.utils", reason="kubernetes-validate (dev extra)"
)
#: kubernetes-validate reads and parses the version's whole ``_definitions.json`` (and the
#: kind's schema) at every ``validate`` call: 1.6 CPU-s for this directory's manifests against
#: 0.2 with each file parsed once (docs/benchmarks.md, suite31). The bundled files do not
#: change during a run; ``validate_strict`` reads them through this cache, emptied after each
#: module that uses it (``schemas_parsed_once``: ~25 MB of parsed schemas).
_schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.schema_contents)


@pytest.fixture(scope="module", autouse=True)
def schemas_parsed_once() -> Iterator[None]:
    yield
    _schema_contents.cache_clear()


def schema_versions() -> list[str]:
    """From 1.31 to the newest the installed kubernetes-validate bundles (at least the last three)."""
    versions = sorted({kubernetes_validate.major_minor(v) for v in kubernetes_validate.all_versions()},
                      key=lambda v: tuple(int(x) for x in v.split(".")))  # fmt: skip
    supported = [v for v in versions if tuple(int(x) for x in v.split(".")) >= (1, 31)]
    assert len(supported) >= 3, versions
    return supported


def validate_strict(docs: list[dict], where: str) -> None:
    with pytest.MonkeyPatch.context() as patch:  # the library's own validate, its files read once
        patch.setattr(kubernetes_validate, "schema_contents", _schema_contents)
        _validate_strict(docs, where)


def _validate_strict(docs: list[dict], where: str) -> None:
    for version in schema_versions():
        for doc in docs:
            if doc["kind"] == "Kustomization":
                continue  # a kustomize input, not a Kubernetes object
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(
                    f"{where}: {doc['kind']}/{doc['metadata']['name']} is invalid for Kubernetes {version}: "
                    f"{exc.message} at {'.'.join(map(str, exc.path))}"
                ) from exc


def test_strict_validation_refuses_a_misspelt_field() -> None:
    [deploy] = objects("Deployment")
    container(deploy, "datahub-csi")["livenessprobe"] = container(deploy, "datahub-csi").pop("livenessProbe")
    with pytest.raises(AssertionError, match="livenessprobe"):
        validate_strict([deploy], "controller.yaml with a typo")


@pytest.mark.parametrize("manifest", sorted(p.name for p in DEPLOY.glob("*.yaml")))
def test_manifests_pass_kubernetes_validate_strict(manifest: str) -> None:
    validate_strict(load_all()[manifest], manifest)


def test_kustomize_renders_objects_kubernetes_accepts() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize csi/deploy` cannot be checked here")
    proc = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    kinds = {d["kind"] for d in rendered}
    assert {"DaemonSet", "Deployment", "PodDisruptionBudget", "CSIDriver", "StorageClass", "Role"} <= kinds
    validate_strict(rendered, "kubectl kustomize csi/deploy")


# --- leftovers15: the socket is 0600, its owner's alone --------------------------------------------
def test_every_container_of_the_socket_runs_as_the_plugins_user() -> None:
    """The plugin makes its socket 0600 (csi.server.SOCKET_MODE): a sidecar running as any other
    user than the plugin's (root: the images set no USER) would be refused at connect."""
    for workload in objects("DaemonSet") + objects("Deployment"):
        name = workload["metadata"]["name"]
        plugin = container(workload, "datahub-csi")
        [socket_volume] = {m["name"] for m in plugin["volumeMounts"] if m["mountPath"] == "/csi"}
        sharing = [
            c
            for c in pod_spec(workload)["containers"]
            if any(m["name"] == socket_volume for m in c["volumeMounts"])
        ]
        assert len(sharing) >= 3, name  # the plugin, the livenessprobe and the registrar / provisioner
        for c in sharing:
            assert c.get("securityContext", {}).get("runAsUser") == 0, f"{name}/{c['name']}"
