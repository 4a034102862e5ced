"""The Kubernetes manifests of deploy/k8s/ read as the kubelet and the API server read them:
pod templates, what each container runs with, where its probes go, and which NetworkPolicies
select its pod."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.listeners import LOOPBACK, POD_IP, urls_in

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "deploy" / "k8s"
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")

Doc = dict[str, Any]


def manifest_files() -> list[Path]:
    return sorted(K8S_DIR.glob("*.yaml"))


def documents(path: Path) -> list[Doc]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def all_documents() -> list[Doc]:
    return [doc for path in manifest_files() for doc in documents(path)]


@dataclass(frozen=True, slots=True)
class PodTemplate:
    workload: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: Doc


def pod_templates(docs: list[Doc]) -> list[PodTemplate]:
    out = []
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            template = doc["spec"]["template"]
            meta = template.get("metadata", {})
            out.append(
                PodTemplate(
                    doc["metadata"]["name"],
                    meta.get("labels", {}),
                    meta.get("annotations", {}),
                    template["spec"],
                )
            )
    return out


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind} {name} is not in deploy/k8s/ exactly once"
    return matches[0]


def container_env(container: Doc) -> dict[str, str]:
    """Literal values as they are; values from Secrets as a stand-in naming the key (the checks
    need their presence, not their content)."""
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            ref = item["valueFrom"].get("secretKeyRef") or item["valueFrom"].get("configMapKeyRef")
            assert ref is not None, f"{item['name']}: only secret/configMap refs are read"
            env[item["name"]] = f"from-{ref['name']}-{ref['key']}"
    return env


def volume_mounts(template: PodTemplate, container: Doc) -> dict[str, Doc]:
    """Each mount path of the container with the pod volume mounted there."""
    volumes = {v["name"]: v for v in template.spec.get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}


def write_config_maps(
    docs: list[Doc], template: PodTemplate, container: Doc, into: Path
) -> dict[str, Path]:
    """The container's ConfigMap volumes written under `into`: mount path -> local folder."""
    files = {}
    for mount_path, volume in volume_mounts(template, container).items():
        if "configMap" in volume:
            data = find(docs, "ConfigMap", volume["configMap"]["name"]).get("data", {})
            folder = into / volume["name"]
            folder.mkdir(parents=True)
            for key, text in data.items():
                (folder / key).write_text(text)
            files[mount_path] = folder
    return files


@dataclass(frozen=True, slots=True)
class Target:
    """Where one probe (or scrape) goes: from `origin`, to `host` (None: the pod IP)."""

    what: str
    origin: str
    host: str | None
    port: int
    path: str | None


def _port(containers: list[Doc], port: int | str) -> int:
    """A port number, or the number of the port these containers declare under that name."""
    if isinstance(port, int):
        return port
    named = {p.get("name"): p["containerPort"] for c in containers for p in c.get("ports", [])}
    assert port in named, f"port {port!r} is not declared by {[c['name'] for c in containers]}"
    return int(named[port])


def probe_targets(container: Doc) -> Iterator[Target]:
    for kind in PROBES:
        probe = container.get(kind)
        if probe is None:
            continue
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = _port([container], get["port"])
            yield Target(kind, POD_IP, get.get("host"), port, get.get("path", "/"))
        elif "tcpSocket" in probe:
            port = _port([container], probe["tcpSocket"]["port"])
            yield Target(kind, POD_IP, probe["tcpSocket"].get("host"), port, None)
        elif "grpc" in probe:
            yield Target(kind, POD_IP, None, int(probe["grpc"]["port"]), None)
        else:
            # An exec probe runs inside the container: whatever URL it fetches.
            for host, port, path in urls_in(" ".join(probe["exec"]["command"])):
                yield Target(kind, LOOPBACK, host, port, path)


def scrape_target(template: PodTemplate) -> Target | None:
    """Prometheus' annotation-based discovery scrapes the pod IP at prometheus.io/port."""
    notes = template.annotations
    if notes.get("prometheus.io/scrape") != "true":
        return None
    path = notes.get("prometheus.io/path", "/metrics")
    return Target("prometheus.io/scrape", POD_IP, None, int(notes["prometheus.io/port"]), path)


def policies_selecting(docs: list[Doc], template: PodTemplate) -> list[Doc]:
    """The ingress NetworkPolicies whose podSelector matches the template's labels."""
    out = []
    for doc in docs:
        if doc["kind"] != "NetworkPolicy":
            continue
        spec = doc["spec"]
        selector = spec.get("podSelector", {})
        assert "matchExpressions" not in selector, "only matchLabels selectors are read"
        wanted = selector.get("matchLabels", {})
        types = spec.get("policyTypes", ["Ingress"])
        if "Ingress" in types and all(template.labels.get(k) == v for k, v in wanted.items()):
            out.append(doc)
    return out


def rules_opening(policies: list[Doc], template: PodTemplate, port: int) -> list[Doc]:
    """The ingress rules of `policies` that let some traffic reach `port` of the pod."""
    containers = template.spec["containers"]
    out = []
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports is None or any(_port(containers, p["port"]) == port for p in ports):
                out.append(rule)
    return out


def peer_is_narrow(peer: Doc) -> bool:
    """A peer naming some pods or namespaces by label; not "every pod" nor "every address"."""
    if "ipBlock" in peer:
        return peer["ipBlock"]["cidr"] not in ("0.0.0.0/0", "::/0")
    selectors = [peer.get("podSelector"), peer.get("namespaceSelector")]
    return any(s and (s.get("matchLabels") or s.get("matchExpressions")) for s in selectors)
