"""Checks of deploy/kubernetes/ that Kubernetes' schemas cannot make (scripts/check-kubernetes.sh).

KEDA's ScaledObject and TriggerAuthentication are validated against the openAPIV3Schema of the
CRDs vendored in schemas/, strictly: a field the schema does not know is an error, as the API
server's strict field validation would report it. Then the manifests against each other and
against the worker's configuration in the ConfigMap. Writes the configuration, the Secret's
values and the readiness command into WORK for the shell script's next steps.

    python check-kubernetes.py MANIFEST_DIR WORK
"""
import os
import re
import sys

import jsonschema
import yaml

manifests, work = sys.argv[1:]
failures = []


def fail(message):
    failures.append(message)
    print(f"check-kubernetes: FAIL: {message}", file=sys.stderr)


def load(name):
    with open(os.path.join(manifests, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def unknown_fields(document, schema, path="$"):
    """Fields of document that schema does not declare (where it declares its fields)."""
    found = []
    if isinstance(document, dict) and schema.get("type") == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or (properties is None and extra is None):
            return found
        for key, value in document.items():
            if properties and key in properties:
                found += unknown_fields(value, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, f"{path}.{key}")
            elif extra is not True:
                found.append(f"{path}.{key}")
    elif isinstance(document, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(document):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found


# --- KEDA resources against the vendored CRDs --------------------------------------------------
crds = {}
for name in os.listdir(os.path.join(manifests, "schemas")):
    if name.endswith(".yaml"):
        crd = load(os.path.join("schemas", name))[0]
        for version in crd["spec"]["versions"]:
            key = (f'{crd["spec"]["group"]}/{version["name"]}', crd["spec"]["names"]["kind"])
            crds[key] = version["schema"]["openAPIV3Schema"]
keda = load("keda-scaledobject.yaml")
for document in keda:
    key = (document.get("apiVersion"), document.get("kind"))
    schema = crds.get(key)
    if schema is None:
        fail(f"keda-scaledobject.yaml: no vendored CRD for {key}")
        continue
    for error in jsonschema.Draft7Validator(schema).iter_errors(document):
        fail(f"{key[1]} {document['metadata']['name']}: {error.json_path}: {error.message}")
    for field in unknown_fields(document, schema):
        fail(f"{key[1]} {document['metadata']['name']}: unknown field {field}")
if failures:
    sys.exit(f"check-kubernetes: {len(failures)} problem(s) in the KEDA resources")
print(f"check-kubernetes: ok: {len(keda)} KEDA resources against the vendored CRD schemas")

# --- the manifests against each other ----------------------------------------------------------
configmap = load("configmap.yaml")[0]
secret = load("secret.example.yaml")[0]
deployment = load("deployment.yaml")[0]
pdb = load("poddisruptionbudget.yaml")[0]
scaled = next(d for d in keda if d["kind"] == "ScaledObject")
trigger_auth = next(d for d in keda if d["kind"] == "TriggerAuthentication")
kustomization = load("kustomization.yaml")[0]

conf = configmap["data"]["apns-worker.conf"]
pod = deployment["spec"]["template"]["spec"]
container = pod["containers"][0]
secret_keys = set(secret["stringData"])


def duration_seconds(text):
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text.strip())
    return int(match.group(1)) * units[match.group(2)]


deadline = re.search(r"^shutdownDeadline = (\S+)", conf, re.M)
grace = pod.get("terminationGracePeriodSeconds", 30)
if not deadline or not grace > duration_seconds(deadline.group(1)):
    fail(f"terminationGracePeriodSeconds {grace} must exceed [worker] shutdownDeadline ({deadline and deadline.group(1)})")

listen = re.search(r"^listen = \S+:(\d+)", conf, re.M)
admin_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "admin")
if not listen or int(listen.group(1)) != admin_port:
    fail(f"the admin port {admin_port} is not [admin] listen's ({listen and listen.group(0)})")
for probe in ("livenessProbe", "startupProbe"):
    get = container[probe]["httpGet"]
    if get["path"] != "/health" or get["port"] not in ("admin", admin_port):
        fail(f"{probe} must GET /health on the admin port")
readiness = " ".join(container["readinessProbe"]["exec"]["command"][2:])
if "GET /ready " not in readiness or f"/127.0.0.1/{admin_port}" not in readiness or "APNS_WORKER_ADMIN_TOKEN" not in readiness:
    fail("readinessProbe must GET /ready on the admin port with the admin token")

env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
for name in ("APNS_WORKER_AMQP_URL", "APNS_WORKER_ADMIN_TOKEN", "APNS_WORKER_REGISTRY_URL"):
    ref = env.get(name)
    if not ref or ref["name"] != secret["metadata"]["name"] or ref["key"] not in secret_keys:
        fail(f"{name} must come from a key of Secret {secret['metadata']['name']}")
if len(secret["stringData"]["admin-token"]) < 16:
    fail("the admin token must have 16 characters or more")

volumes = {v["name"]: v for v in pod["volumes"]}
mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
if volumes["config"]["configMap"]["name"] != configmap["metadata"]["name"]:
    fail("the config volume must be the ConfigMap")
config_path = container["args"][container["args"].index("--config") + 1]
if config_path != f'{mounts["config"]}/apns-worker.conf':
    fail(f"--config {config_path} is not the ConfigMap's file")
mounted_files = {f'{mounts["credentials"]}/{item["path"]}': item["key"] for item in volumes["credentials"]["secret"]["items"]}
for key_file in re.findall(r"^(?:tokenKeyFile|certFile|keyFile) = (\S+)", conf, re.M):
    if mounted_files.get(key_file) not in secret_keys:
        fail(f"{key_file} is not mounted from a key of the Secret")
if volumes["credentials"]["secret"]["secretName"] != secret["metadata"]["name"]:
    fail("the credentials volume must be the Secret")

resources = container["resources"]
def mebibytes(quantity):
    return int(quantity[:-2]) * {"Mi": 1, "Gi": 1024}[quantity[-2:]]
# docs/benchmarks.md: the highest peak RSS measured is 62 MB.
if not 62 < mebibytes(resources["requests"]["memory"]) <= mebibytes(resources["limits"]["memory"]):
    fail("the memory request must exceed the measured peak RSS (62 MB) and not the limit")

labels = deployment["spec"]["template"]["metadata"]["labels"]
for name, selector in (("Deployment", deployment["spec"]["selector"]), ("PodDisruptionBudget", pdb["spec"]["selector"])):
    if not all(labels.get(k) == v for k, v in selector["matchLabels"].items()):
        fail(f"the {name}'s selector does not select the worker's pods")

if scaled["spec"]["scaleTargetRef"]["name"] != deployment["metadata"]["name"]:
    fail("the ScaledObject must scale the Deployment")
bundles = re.findall(r'^\[apns "([^"]+)"\]', conf, re.M)
queues = [t["metadata"]["queueName"] for t in scaled["spec"]["triggers"]]
if sorted(queues) != sorted(f"apns.{b}" for b in bundles):
    fail(f"KEDA triggers {queues} must be the work queues of the bundles {bundles}")
for t in scaled["spec"]["triggers"]:
    if t["type"] != "rabbitmq" or t["metadata"].get("mode") != "QueueLength" or t["authenticationRef"]["name"] != trigger_auth["metadata"]["name"]:
        fail(f"trigger {t['metadata']['queueName']}: a rabbitmq QueueLength trigger with the TriggerAuthentication")
for ref in trigger_auth["spec"]["secretTargetRef"]:
    if ref["name"] != secret["metadata"]["name"] or ref["key"] != env["APNS_WORKER_AMQP_URL"]["key"]:
        fail("KEDA must read the broker URL the worker uses")
unavailable = pdb["spec"].get("maxUnavailable", 0)
if not scaled["spec"]["minReplicaCount"] > unavailable:
    fail("minReplicaCount must exceed the PodDisruptionBudget's maxUnavailable: a drain would leave no consumer")

listed = set(kustomization["resources"])
present = {n for n in os.listdir(manifests) if n.endswith(".yaml") and n != "kustomization.yaml"}
if listed != present:
    fail(f"kustomization.yaml lists {sorted(listed)}, the folder has {sorted(present)}")

with open(os.path.join(work, "apns-worker.conf"), "w") as f:
    f.write(conf)
for key in ("amqp-url", "admin-token", "registry-url"):
    with open(os.path.join(work, key), "w") as f:
        f.write(secret["stringData"][key])
with open(os.path.join(work, "readiness.sh"), "w") as f:
    f.write(container["readinessProbe"]["exec"]["command"][2] + "\n")

if failures:
    sys.exit(f"check-kubernetes: {len(failures)} problem(s)")
print("check-kubernetes: ok: the manifests agree with each other and with the configuration")
