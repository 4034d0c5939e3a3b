"""Checks of deploy/kubernetes/ that Kubernetes' schemas cannot make (scripts/check-kubernetes.sh).

Works on the kustomization as rendered (`kubectl kustomize`, or `render` below without kubectl),
with the test credentials the shell script wrote into the copy's secrets/. KEDA's ScaledObject
and TriggerAuthentication are validated against the openAPIV3Schema of the CRDs vendored in
schemas/, strictly: a field the schema does not know is an error, as the API server's strict
field validation would report it. Then the manifests against each other and against the
worker's configuration in the ConfigMap, and what makes them safe to apply twice: no
placeholder anywhere, the Secret generated from the operator's files, no replica count under
KEDA. Writes Kubernetes' own resources, the configuration, the Secret's values and the readiness
command into WORK for the shell script's next steps.

    python check-kubernetes.py MANIFEST_DIR RENDERED WORK
    python check-kubernetes.py render KUSTOMIZATION_DIR     (offline: resources + secretGenerator)
    python check-kubernetes.py mount RENDERED SECRET DIR    (a Secret's keys as the files a pod sees)
"""
import os
import re
import sys

import jsonschema
import yaml

import base64


def render(directory):
    """kustomize's output for what kustomization.yaml uses (resources, a secretGenerator from
    files with fixed names), for machines without kubectl; anything else is refused."""
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    known = {"apiVersion", "kind", "resources", "secretGenerator"}
    if set(kustomization) - known:
        sys.exit(f"check-kubernetes: the offline renderer does not know {sorted(set(kustomization) - known)}: install kubectl")
    documents = []
    for name in kustomization.get("resources", []):
        with open(os.path.join(directory, name)) as f:
            documents += [d for d in yaml.safe_load_all(f) if d]
    for generator in kustomization.get("secretGenerator", []):
        options = generator.get("options", {})
        if not options.get("disableNameSuffixHash") or set(generator) - {"name", "type", "options", "files"}:
            sys.exit("check-kubernetes: the offline renderer takes only fixed-name secretGenerators from files: install kubectl")
        data = {}
        for entry in generator["files"]:
            key, _, path = entry.rpartition("=")
            key = key or os.path.basename(path)
            with open(os.path.join(directory, path), "rb") as f:
                data[key] = base64.b64encode(f.read()).decode()
        metadata = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = options["labels"]
        documents.append({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": generator.get("type", "Opaque"), "data": data})
    print(yaml.safe_dump_all(documents, sort_keys=False), end="")


def mount(rendered_path, name, directory):
    """Writes the keys of Secret NAME as a secret volume without items shows them: one file per
    key, named by the key."""
    with open(rendered_path) as f:
        found = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "Secret" and d["metadata"]["name"] == name]
    if len(found) != 1:
        sys.exit(f"check-kubernetes: the rendering has {len(found)} Secrets named {name}")
    os.makedirs(directory, exist_ok=True)
    for key, value in found[0].get("data", {}).items():
        with open(os.path.join(directory, key), "wb") as f:
            f.write(base64.b64decode(value))


if len(sys.argv) == 3 and sys.argv[1] == "render":
    render(sys.argv[2])
    sys.exit(0)
if len(sys.argv) == 5 and sys.argv[1] == "mount":
    mount(*sys.argv[2:])
    sys.exit(0)

manifests, rendered_path, work = sys.argv[1:]
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
with open(rendered_path) as f:
    rendered_text = f.read()
rendered = [d for d in yaml.safe_load_all(rendered_text) if d]
keda = [d for d in rendered if d.get("apiVersion", "").startswith("keda.sh/")]
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
def one(kind):
    found = [d for d in rendered if d.get("kind") == kind]
    if len(found) != 1:
        sys.exit(f"check-kubernetes: the kustomization renders {len(found)} {kind}(s), not one")
    return found[0]


configmap = one("ConfigMap")
secrets_by_name = {d["metadata"]["name"]: d for d in rendered if d.get("kind") == "Secret"}
deployment = one("Deployment")
secret_name = next(
    e["valueFrom"]["secretKeyRef"]["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    if e["name"] == "APNS_WORKER_AMQP_URL")
if secret_name not in secrets_by_name:
    sys.exit(f"check-kubernetes: APNS_WORKER_AMQP_URL names Secret {secret_name}, which the kustomization does not render")
secret = secrets_by_name[secret_name]
pdb = one("PodDisruptionBudget")
policy = one("NetworkPolicy")
scaled = one("ScaledObject")
trigger_auth = one("TriggerAuthentication")
kustomization = load("kustomization.yaml")[0]

conf = configmap["data"]["apns-worker.conf"]
pod = deployment["spec"]["template"]["spec"]
container = pod["containers"][0]
secret_values = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
secret_values.update(secret.get("stringData", {}))
secret_keys = set(secret_values)

# --- safe to apply twice ----------------------------------------------------------
for marker in ("replace-me", "replace_me", "changeme", "change-me"):
    if marker in rendered_text.lower():
        fail(f"the rendered kustomization holds the placeholder {marker!r}")
for name in os.listdir(manifests):
    if name.endswith(".yaml") and name != "kustomization.yaml":
        if any(d.get("kind") == "Secret" for d in load(name)):
            fail(f"{name} is a Secret in the repository: generate it from the operator's files (secrets/README.md)")
generators = {g["name"]: g for g in kustomization.get("secretGenerator", [])}
for name in secrets_by_name:
    if name not in generators:
        fail(f"the Secret {name} must come from kustomization.yaml's secretGenerator (the operator's files)")
    elif not all(f.rpartition("=")[2].startswith("secrets/") for f in generators[name]["files"]):
        fail(f"the secretGenerator of {name} must read secrets/, which git ignores")
if "replicas" in deployment["spec"]:
    fail("the Deployment must not set replicas: KEDA owns the count, and apply would reset it")
if pdb["spec"].get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
    fail("the PodDisruptionBudget needs unhealthyPodEvictionPolicy: AlwaysAllow, or a fleet-wide 503 on /ready blocks drains")
if pod.get("automountServiceAccountToken") is not False:
    fail("the pod must set automountServiceAccountToken: false (the worker never calls the API)")


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

env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
plain_env = {e["name"]: e for e in container["env"]}
for name in ("APNS_WORKER_AMQP_URL", "APNS_WORKER_ADMIN_TOKEN", "APNS_WORKER_ADMIN_METRICSTOKEN", "APNS_WORKER_REGISTRY_URL"):
    ref = env.get(name)
    if not ref or ref["name"] != secret["metadata"]["name"] or ref["key"] not in secret_keys:
        fail(f"{name} must come from a key of Secret {secret['metadata']['name']}")
if env.get("APNS_WORKER_ADMIN_METRICSTOKEN", {}).get("key") == env.get("APNS_WORKER_ADMIN_TOKEN", {}).get("key"):
    fail("the metrics token must be a key of its own, not the admin token")
tracing = plain_env.get("APNS_WORKER_TRACING_ENDPOINT", {}).get("valueFrom", {}).get("configMapKeyRef", {})
if tracing.get("name") != configmap["metadata"]["name"] or not tracing.get("optional"):
    fail("APNS_WORKER_TRACING_ENDPOINT must come from an optional key of the ConfigMap (tracing settings)")
if plain_env.get("OTEL_EXPORTER_OTLP_PROTOCOL", {}).get("value") not in ("http/protobuf", "http/json"):
    fail("OTEL_EXPORTER_OTLP_PROTOCOL must be pinned to a protocol this build has (http/protobuf)")

volumes = {v["name"]: v for v in pod["volumes"]}
mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
if volumes["config"]["configMap"]["name"] != configmap["metadata"]["name"]:
    fail("the config volume must be the ConfigMap")
config_path = container["args"][container["args"].index("--config") + 1]
if config_path != f'{mounts["config"]}/apns-worker.conf':
    fail(f"--config {config_path} is not the ConfigMap's file")
# Each credential file the configuration names is a key of a mounted Secret. A secret volume
# without items shows every key under its own name; with items, the names are written here too.
mounted_files = {}
for volume_name, volume in volumes.items():
    source = volume.get("secret")
    if not source or volume_name not in mounts:
        continue
    data = secrets_by_name.get(source["secretName"], {}).get("data", {})
    pairs = [(item["path"], item["key"]) for item in source.get("items", [])] or [(key, key) for key in data]
    for path, key in pairs:
        mounted_files[f"{mounts[volume_name]}/{path}"] = (source["secretName"], key, key in data)
for key_file in re.findall(r"^(?:tokenKeyFile|certFile|keyFile) = (\S+)", conf, re.M):
    if not mounted_files.get(key_file, (None, None, False))[2]:
        fail(f"{key_file} is not mounted from a key of a Secret the kustomization renders")

# The APNs key travels with its key ID: the file is named as Apple names it, AuthKey_<keyId>.p8,
# by the Secret's key alone (the Deployment mounts its Secret whole and names no key file), and
# the name is the section's keyId, so a rotation that changed one but not the other is refused by
# the worker (a missing file, or a key of another ID) instead of signing with a mismatched pair.
for section in re.split(r"(?m)^(?=\[apns )", conf)[1:]:
    key_file = re.search(r"^tokenKeyFile = (\S+)", section, re.M)
    key_id = re.search(r"^keyId = (\S+)", section, re.M)
    if not key_file:
        continue
    name = os.path.basename(key_file.group(1))
    if not key_id or name != f"AuthKey_{key_id.group(1)}.p8":
        fail(f"tokenKeyFile {key_file.group(1)} must be named AuthKey_<keyId>.p8, as Apple names it (keyId {key_id and key_id.group(1)})")
    mounted = mounted_files.get(key_file.group(1))
    if mounted:
        volume = next(v for v in volumes.values() if v.get("secret", {}).get("secretName") == mounted[0])
        if volume["secret"].get("items"):
            fail(f"the volume of Secret {mounted[0]} must not list items: the key's file name would be pinned in the Deployment too")
        if set(secrets_by_name[mounted[0]].get("data", {})) != {name}:
            fail(f"Secret {mounted[0]} must hold the APNs key alone, under its file name {name}")
if "AuthKey_" in yaml.safe_dump(deployment):
    fail("the Deployment names an APNs key file: the key's name belongs to its Secret and the ConfigMap only")

resources = container["resources"]
def mebibytes(quantity):
    return int(quantity[:-2]) * {"Mi": 1, "Gi": 1024}[quantity[-2:]]


# The worker's memory bound (docs/operating.md, "Memory bound"): 48 MiB idle (release build) and the fleet
# view's 16 MiB, plus about 100 KiB per job in flight at the worst case: 86.5 KiB measured with every
# body at its 64 KiB bound (217 MiB at 2,000 jobs, docs/benchmarks.md, "Bodies held at once")
# and 16 KiB of headers at their bound. [amqp] maxInFlight bounds the jobs in flight.
def worst_case_mib(max_in_flight):
    return 48 + 16 + max_in_flight * (86.5 + 16) / 1024


max_in_flight = re.search(r"^maxInFlight = (\d+)", conf, re.M)
bound = worst_case_mib(int(max_in_flight.group(1)) if max_in_flight else 2000)
limit = mebibytes(resources["limits"]["memory"])
if not 62 < mebibytes(resources["requests"]["memory"]) <= limit:
    fail("the memory request must exceed the measured peak RSS (62 MB) and not the limit")
if limit < 1.25 * bound:
    fail(f"the memory limit {limit} MiB leaves too little room over the worker's worst case, {bound:.0f} MiB at maxInFlight "
         f"{max_in_flight.group(1) if max_in_flight else '2000 (default)'}: at least 1.25 times it ({1.25 * bound:.0f} MiB)")

# One node cannot take every replica: a hard spread over hosts (or a required anti-affinity).
labels = deployment["spec"]["template"]["metadata"]["labels"]
spread = [
    c for c in pod.get("topologySpreadConstraints", [])
    if c.get("topologyKey") == "kubernetes.io/hostname" and c.get("whenUnsatisfiable") == "DoNotSchedule" and c.get("maxSkew") == 1
    and all(labels.get(k) == v for k, v in c.get("labelSelector", {}).get("matchLabels", {}).items())
    and c.get("labelSelector", {}).get("matchLabels")]
anti = [
    t for t in pod.get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
    if t.get("topologyKey") == "kubernetes.io/hostname"]
if not spread and not anti:
    fail("the pods need a topologySpreadConstraint over kubernetes.io/hostname (maxSkew 1, DoNotSchedule) selecting them, "
         "or a required podAntiAffinity: otherwise one node can take both replicas")

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

policy_selects = policy["spec"]["podSelector"].get("matchLabels", {})
if not policy_selects or not all(labels.get(k) == v for k, v in policy_selects.items()):
    fail("the NetworkPolicy must select the worker's pods")
if set(policy["spec"].get("policyTypes", [])) != {"Ingress", "Egress"}:
    fail("the NetworkPolicy must restrict both directions")
ingress_ports = {p["port"] for rule in policy["spec"].get("ingress", []) for p in rule.get("ports", [])}
if ingress_ports != {admin_port}:
    fail(f"the NetworkPolicy must let in the admin port {admin_port} only, not {sorted(ingress_ports)}")
egress_ports = {p["port"] for rule in policy["spec"].get("egress", []) for p in rule.get("ports", [])}
needed = {53, 5671, 5672, 443}
if "[registry]" in conf:
    needed.add(5432)
for port in sorted(needed - egress_ports):
    fail(f"the NetworkPolicy blocks port {port}, which the worker needs")

listed = set(kustomization["resources"])
present = {n for n in os.listdir(manifests) if n.endswith(".yaml") and n != "kustomization.yaml"}
if listed != present:
    fail(f"kustomization.yaml lists {sorted(listed)}, the folder has {sorted(present)}")

with open(os.path.join(work, "apns-worker.conf"), "w") as f:
    f.write(conf)
for key in ("amqp-url", "admin-token", "metrics-token", "registry-url"):
    with open(os.path.join(work, key), "w") as f:
        f.write(secret_values[key])
# Kubernetes' own resources, for kubernetes-validate (KEDA's kinds are checked above).
with open(os.path.join(work, "core.yaml"), "w") as f:
    yaml.safe_dump_all([d for d in rendered if d not in keda], f, sort_keys=False)
with open(os.path.join(work, "readiness.sh"), "w") as f:
    f.write(container["readinessProbe"]["exec"]["command"][2] + "\n")

if failures:
    sys.exit(f"check-kubernetes: {len(failures)} problem(s)")
print("check-kubernetes: ok: the manifests agree with each other and with the configuration")
