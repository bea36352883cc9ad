"""csi/deploy/server: the server's manifests pass the same Kubernetes schema checks as the CSI
driver's (tests/csi/test_deploy.py), and say what a working install needs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from datahub.cli.main import build_parser

SERVER = Path(__file__).resolve().parents[2] / "csi" / "deploy" / "server"
test_deploy = pytest.importorskip("tests.csi.test_deploy", reason="kubernetes-validate (dev extra)")


@pytest.fixture(scope="module", autouse=True)
def schemas_parsed_once() -> Iterator[None]:
    """``test_deploy.validate_strict``'s parsed schemas let go after this module, as after its own."""
    yield
    test_deploy._schema_contents.cache_clear()


def load_all() -> dict[str, list[dict]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in sorted(SERVER.glob("*.yaml"))
    }


def objects(kind: str) -> list[dict]:
    return [d for docs in load_all().values() for d in docs if d.get("kind") == kind]


@pytest.mark.parametrize("manifest", sorted(p.name for p in SERVER.glob("*.yaml")))
def test_manifests_pass_kubernetes_validate_strict(manifest: str) -> None:
    test_deploy.validate_strict(load_all()[manifest], f"server/{manifest}")


def test_kustomization_lists_every_manifest() -> None:
    [k] = objects("Kustomization")
    assert sorted(k["resources"]) == sorted(name for name in load_all() if name != "kustomization.yaml")


def test_deployment_serves_with_tokens_as_non_root_from_the_secret_and_config() -> None:
    [deploy] = objects("Deployment")
    spec = deploy["spec"]["template"]["spec"]
    [c] = spec["containers"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    args = build_parser().parse_args(c["args"])  # the image's `datahub` accepts its manifest's flags
    assert args.command == "serve" and args.local_mode is False and args.host == "0.0.0.0"
    [secret] = objects("Secret")
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in c["envFrom"]
    assert "DATAHUB_CATALOG_URL" in secret["stringData"]
    assert secret["stringData"]["DATAHUB_CATALOG_URL"].startswith("mongodb://")
    [config] = objects("ConfigMap")
    mounted = {
        v["name"] for v in spec["volumes"] if v.get("configMap", {}).get("name") == config["metadata"]["name"]
    }
    [mount] = [m for m in c["volumeMounts"] if m["name"] in mounted]
    assert {"name": "DATAHUB_CONFIG", "value": f"{mount['mountPath']}/datahub.toml"} in c["env"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(
        c["resources"]["limits"]
    )


def test_service_and_budget_select_the_deployment_pods() -> None:
    [deploy] = objects("Deployment")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    [service] = objects("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    [port] = deploy["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    [pdb] = objects("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] < deploy["spec"]["replicas"]


def test_the_config_parses_as_datahub_settings(tmp_path: Path) -> None:
    from datahub.config import load_config

    [config] = objects("ConfigMap")
    path = tmp_path / "datahub.toml"
    path.write_text(config["data"]["datahub.toml"])
    loaded = load_config(path, env={})
    assert loaded.api.local_mode is False


def test_kustomize_renders_objects_kubernetes_accepts() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize csi/deploy/server` cannot be checked here")
    proc = subprocess.run([kubectl, "kustomize", str(SERVER)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert {"Deployment", "Service", "Secret", "ConfigMap"} <= {d["kind"] for d in rendered}
    test_deploy.validate_strict(rendered, "kubectl kustomize csi/deploy/server")
