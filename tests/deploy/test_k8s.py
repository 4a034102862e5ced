"""deploy/k8s/: valid against the Kubernetes schemas, and every probe reaching what it probes.

The listening address of each `deja` container comes from the project's own CLI (see
listeners.py), so a bind set in the ConfigMap, the environment or a flag is judged alike.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from modelserver.cli import default_cache_dir
from tests.deploy.dockerfile import image
from tests.deploy.k8s import (
    Doc,
    PodTemplate,
    all_documents,
    container_env,
    documents,
    find,
    manifest_files,
    peer_is_narrow,
    pod_templates,
    policies_selecting,
    probe_targets,
    rules_opening,
    scrape_target,
    volume_mounts,
    write_config_maps,
)
from tests.deploy.listeners import Listener, listener_of, proxy_config

# What the startup probe must allow for loading the models: 58 s measured on a busy 2-core
# machine (tests/deploy/test_sidecar_memory.py prints it), five times that for a slower node.
STARTUP_BUDGET_S = 290
WRITABLE_VOLUMES = ("emptyDir", "persistentVolumeClaim", "ephemeral")
DEJA_IMAGE = "deja"  # built from deploy/Dockerfile (its header says `-t deja`)


@dataclass(frozen=True, slots=True)
class DejaContainer:
    template: PodTemplate
    spec: Doc
    env: dict[str, str]
    listener: Listener
    # The folder semantic snapshots are written to ("" when none).
    snapshot_dir: str

    @property
    def name(self) -> str:
        return f"{self.template.workload}/{self.spec['name']}"


def deja_containers(docs: list[Doc], tmp_path: Path) -> list[DejaContainer]:
    """Every container of every pod template that runs `deja`, with what it listens on."""
    built = image()
    out = []
    for template in pod_templates(docs):
        for container in template.spec["containers"]:
            if container["image"].rsplit("/", 1)[-1].split(":")[0] != DEJA_IMAGE:
                continue
            # command replaces the image's ENTRYPOINT (it has none), args its CMD.
            argv = container.get("command", []) + container.get("args", []) or built.cmd
            where = tmp_path / template.workload / container["name"]
            files = {**built.folders(), **write_config_maps(docs, template, container, where)}
            env = {**built.env, **container_env(container)}
            listener = listener_of(argv, env, files)
            snapshots = str(proxy_config(argv, env, files)["semantic"]["snapshot_dir"])
            out.append(DejaContainer(template, container, env, listener, snapshots))
    return out


def probe_problems(docs: list[Doc], tmp_path: Path) -> list[str]:
    problems = []
    found = deja_containers(docs, tmp_path)
    assert found, "no container of deploy/k8s/ runs deja"
    for each in found:
        listener = each.listener
        bound = f"{listener.program} listens on {listener.host}:{listener.port}"
        for target in probe_targets(each.spec):
            to = f"{target.host or 'the pod IP'}:{target.port}{target.path or ''}"
            if not listener.accepts(target.origin, target.host, target.port):
                problems.append(f"{each.name}: {target.what} goes to {to}, but {bound}")
            elif target.path is not None and target.path not in listener.paths:
                problems.append(f"{each.name}: {target.what} asks for {to}, not served")
    for template in pod_templates(docs):
        scrape = scrape_target(template)
        listeners = [c.listener for c in found if c.template == template]
        if scrape is not None and not any(
            listener.accepts(scrape.origin, scrape.host, scrape.port)
            and scrape.path in listener.paths
            for listener in listeners
        ):
            to = f"the pod IP:{scrape.port}{scrape.path}"
            problems.append(f"{template.workload}: {scrape.what} of {to} reaches no listener")
    return problems


@pytest.mark.parametrize(
    "doc",
    [doc for path in manifest_files() for doc in documents(path)],
    ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}",
)
def test_every_object_is_valid_against_the_kubernetes_schemas(doc: Doc) -> None:
    # strict: a field the API server does not know (a misspelled probe setting) is an error.
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_schema_check_refuses_what_the_api_server_would() -> None:
    deployment = copy.deepcopy(find(all_documents(), "Deployment", "my-app"))
    probe = deployment["spec"]["template"]["spec"]["containers"][1]["startupProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError, match="periodSecond"):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_every_probe_and_the_scrape_reach_an_address_the_process_listens_on(
    tmp_path: Path,
) -> None:
    assert probe_problems(all_documents(), tmp_path) == []


def _with_loopback_bind(docs: list[Doc], how: str) -> list[Doc]:
    docs = copy.deepcopy(docs)
    config = find(docs, "ConfigMap", "deja-config")["data"]
    (deja,) = [
        c
        for c in find(docs, "Deployment", "my-app")["spec"]["template"]["spec"]["containers"]
        if c["name"] == "deja"
    ]
    if how == "config file":
        parsed: dict[str, Any] = yaml.safe_load(config["deja.yaml"])
        parsed["server"]["host"] = "127.0.0.1"
        config["deja.yaml"] = yaml.safe_dump(parsed)
    elif how == "environment":
        deja["env"].append({"name": "DEJA_SERVER__HOST", "value": "127.0.0.1"})
    else:
        deja["args"] += ["--host", "127.0.0.1"]
    return docs


@pytest.mark.parametrize("how", ["config file", "environment", "flag"])
def test_a_loopback_bind_fails_the_probe_check_however_it_is_set(tmp_path: Path, how: str) -> None:
    # As the old sidecar was: the kubelet and Prometheus reach the pod IP, never 127.0.0.1.
    problems = probe_problems(_with_loopback_bind(all_documents(), how), tmp_path)
    kinds = sorted(p.split(": ")[1].split(" ")[0] for p in problems)
    assert kinds == ["livenessProbe", "prometheus.io/scrape", "readinessProbe", "startupProbe"]
    assert all("127.0.0.1:8080" in p for p in problems if "Probe" in p)


def test_the_startup_probe_waits_for_the_models_then_liveness_and_readiness_take_over(
    tmp_path: Path,
) -> None:
    for each in deja_containers(all_documents(), tmp_path):
        startup = each.spec["startupProbe"]
        assert startup["httpGet"]["path"] == "/readyz", each.name  # 503 until models load
        budget_s = startup.get("initialDelaySeconds", 0) + startup.get(
            "periodSeconds", 10
        ) * startup.get("failureThreshold", 3)
        assert budget_s >= STARTUP_BUDGET_S, f"{each.name}: {budget_s} s to load the models"
        # Liveness must not depend on readiness: a Redis rebuild must not restart the pod.
        assert each.spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert each.spec["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_proxy_runs_unprivileged_on_a_read_only_root(tmp_path: Path) -> None:
    uid = int(image().user.split(":")[0])
    for each in deja_containers(all_documents(), tmp_path):
        context = {**each.template.spec.get("securityContext", {}), **each.spec["securityContext"]}
        assert context["runAsNonRoot"] is True and context["runAsUser"] == uid != 0, each.name
        assert context["readOnlyRootFilesystem"] is True, each.name
        assert context["allowPrivilegeEscalation"] is False, each.name
        assert context["capabilities"]["drop"] == ["ALL"], each.name
        assert context["seccompProfile"]["type"] == "RuntimeDefault", each.name


def test_what_the_proxy_writes_is_on_writable_volumes(tmp_path: Path) -> None:
    for each in deja_containers(all_documents(), tmp_path):
        mounts = volume_mounts(each.template, each.spec)
        read_only = {m["mountPath"] for m in each.spec["volumeMounts"] if m.get("readOnly")}
        # /tmp: edge mode's socket folder and torch's scratch folder; the model cache; the
        # semantic index's snapshots.
        paths = ["/tmp", str(default_cache_dir(each.env))]
        for path in [*paths, *([each.snapshot_dir] if each.snapshot_dir else [])]:
            holders = [m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")]
            assert holders, f"{each.name}: {path} is on the read-only root filesystem"
            holder = max(holders, key=len)
            assert any(k in mounts[holder] for k in WRITABLE_VOLUMES), f"{each.name}: {holder}"
            assert holder not in read_only, f"{each.name}: {holder} is mounted read-only"


def exposure_problems(docs: list[Doc], tmp_path: Path) -> list[str]:
    """A proxy bound to every address must be reachable from outside its pod only by peers a
    NetworkPolicy names (the kubelet's probes from the node are always let through)."""
    problems = []
    for each in deja_containers(docs, tmp_path):
        if not each.listener.accepts("outside", "203.0.113.9", each.listener.port):
            continue
        policies = policies_selecting(docs, each.template)
        if not policies:
            problems.append(f"{each.name}: no NetworkPolicy selects the pod")
        for rule in rules_opening(policies, each.template, each.listener.port):
            peers = rule.get("from", [])
            if not peers or not all(peer_is_narrow(p) for p in peers):
                problems.append(f"{each.name}: port {each.listener.port} is open to {peers}")
    return problems


def test_the_proxy_port_is_private_to_the_pod_and_the_scraper(tmp_path: Path) -> None:
    assert exposure_problems(all_documents(), tmp_path) == []


def test_a_policy_opening_the_proxy_port_to_all_fails_the_exposure_check(tmp_path: Path) -> None:
    docs = copy.deepcopy(all_documents())
    find(docs, "NetworkPolicy", "deja-sidecar")["spec"]["ingress"][0].pop("from")
    assert exposure_problems(docs, tmp_path / "open") == ["my-app/deja: port 8080 is open to []"]
    without = [d for d in docs if d["kind"] != "NetworkPolicy"]
    assert sorted(exposure_problems(without, tmp_path / "none")) == [
        "deja-worker/deja: no NetworkPolicy selects the pod",
        "my-app/deja: no NetworkPolicy selects the pod",
        "my-light-app/deja: no NetworkPolicy selects the pod",
    ]


def test_the_memory_request_and_limit_are_set(tmp_path: Path) -> None:
    # Their values come from the measurement in test_sidecar_memory.py (slow).
    for each in deja_containers(all_documents(), tmp_path):
        resources = each.spec["resources"]
        assert resources["requests"]["memory"] and resources["limits"]["memory"], each.name
