#!/usr/bin/env bash
# Validates the Kubernetes manifests offline, with no cluster.
#
#   scripts/validate-kubernetes.sh [DIR]      # DIR defaults to deploy/kubernetes
#
# 1. Every *.yaml in DIR except kustomization.yaml is checked by `kubernetes-validate
#    --strict` (PyPI, pinned below; the schemas of each Kubernetes version ship inside
#    it) against the oldest Kubernetes the manifests support (1.30: the preStop `sleep`
#    action; gRPC probes need 1.27) and the newest it bundles. Strict: a field the API
#    does not know fails, so a misspelled key fails; so does a kind or apiVersion it has
#    no schema for (the tool only warns about those) and a file holding no resource.
# 2. What a schema cannot see, across files: kustomization.yaml lists every manifest
#    but the *.example.yaml ones (and nothing else); each Deployment's selector matches
#    its pod labels, and each Service's and PodDisruptionBudget's selector a Deployment;
#    a Service's named targetPort is a port of those pods; every Secret and ConfigMap the
#    pods read (and each Secret key) is defined in DIR (the Secrets by the example file);
#    a pod's terminationGracePeriodSeconds covers its preStop sleep plus its
#    SHUTDOWN_GRACE_MS.
# Prints every problem and exits 1 if there is any.
#
# The venv lives at target/kubernetes-validate-venv (KUBERNETES_VALIDATE_VENV overrides
# it), kept by scripts/lib/pinned-venv.sh: ~145 MB (the schemas of 13 Kubernetes versions),
# set up in ~75 s the first time on a busy two-core machine; later runs take ~4 s.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pinned-venv.sh
source "$root/scripts/lib/pinned-venv.sh"
venv="${KUBERNETES_VALIDATE_VENV:-$root/target/kubernetes-validate-venv}"
dir="${1:-$root/deploy/kubernetes}"
oldest=1.30
newest=1.37

# kubernetes-validate and every dependency it pulls in, pinned.
requirements="kubernetes-validate==1.37.0
attrs==26.1.0
importlib_resources==7.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
packaging==26.4
PyYAML==6.0.4
referencing==0.37.0
rpds-py==2026.9.1
typing_extensions==4.16.0"

pinned_venv validate-kubernetes "$venv" "$requirements" 'kubernetes_validate, yaml'

[[ -d "$dir" ]] || { echo "validate-kubernetes: no directory $dir" >&2; exit 1; }
mapfile -t manifests < <(find "$dir" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml | sort)
if [[ ${#manifests[@]} -eq 0 ]]; then
    echo "validate-kubernetes: no manifests in $dir" >&2
    exit 1
fi

failed=0
for version in "$oldest" "$newest"; do
    out="$("$venv/bin/kubernetes-validate" --strict -k "$version" "${manifests[@]}" 2>&1)" || failed=1
    # Anything but a pass (a WARN for an unknown kind, an ERROR, a YAML error) fails.
    if grep -v '^INFO .* passed for resource ' <<<"$out"; then
        failed=1
    fi
    for file in "${manifests[@]}"; do
        if ! grep -q -F " $file " <<<"$out"; then
            echo "validate-kubernetes: $file holds no resource"
            failed=1
        fi
    done
done

"$venv/bin/python" - "$dir" <<'PY' || failed=1
"""Cross-file checks kubernetes-validate cannot make (see the script's header)."""
import glob, os, sys
import yaml

directory = sys.argv[1]
problems = []
resources = []  # (file, resource)
for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
    if os.path.basename(path) == "kustomization.yaml":
        continue
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc:
                resources.append((os.path.basename(path), doc))

# kustomization.yaml lists exactly the manifests that are not examples.
kustomization = os.path.join(directory, "kustomization.yaml")
if os.path.exists(kustomization):
    listed = set((yaml.safe_load(open(kustomization)) or {}).get("resources") or [])
    present = {f for f, _ in resources if not f.endswith(".example.yaml")}
    for f in sorted(present - listed):
        problems.append(f"kustomization.yaml does not list {f}")
    for f in sorted(listed - present):
        problems.append(f"kustomization.yaml lists {f}, which is not a manifest here")
    for f in sorted(listed & {f for f, _ in resources if f.endswith(".example.yaml")}):
        problems.append(f"kustomization.yaml lists the example {f}")

def of_kind(kind):
    return [(f, r) for f, r in resources if r.get("kind") == kind]

def name(r):
    return r.get("metadata", {}).get("name", "?")

def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

secrets = {name(r): set((r.get("stringData") or {}) | (r.get("data") or {})) for _, r in of_kind("Secret")}
config_maps = {name(r) for _, r in of_kind("ConfigMap")}
pods = []  # (file, deployment name, pod labels, pod spec)
for f, d in of_kind("Deployment"):
    template = d["spec"]["template"]
    labels = template.get("metadata", {}).get("labels", {})
    if not matches(d["spec"]["selector"].get("matchLabels"), labels):
        problems.append(f"{f}: the selector of deployment/{name(d)} does not match its pod labels")
    pods.append((f, name(d), labels, template["spec"]))

for f, r in of_kind("Service") + of_kind("PodDisruptionBudget"):
    selector = r["spec"].get("selector") or {}
    selector = selector.get("matchLabels", selector) if r["kind"] == "PodDisruptionBudget" else selector
    chosen = [p for p in pods if matches(selector, p[2])]
    if not chosen:
        problems.append(f"{f}: {r['kind'].lower()}/{name(r)} selects no Deployment's pods")
    if r["kind"] == "Service":
        for port in r["spec"].get("ports", []):
            target = port.get("targetPort")
            for _, deployment, _, spec in chosen:
                names = {p.get("name") for c in spec["containers"] for p in c.get("ports", [])}
                if isinstance(target, str) and target not in names:
                    problems.append(f"{f}: service/{name(r)} targets port {target!r}, which deployment/{deployment} does not name")

for f, deployment, _, spec in pods:
    for c in spec["containers"]:
        for source in c.get("envFrom", []):
            ref = source.get("configMapRef", {}).get("name")
            if ref and ref not in config_maps:
                problems.append(f"{f}: deployment/{deployment} reads configmap/{ref}, defined nowhere here")
        env = {}
        for e in c.get("env", []):
            env[e["name"]] = e.get("value")
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref.get("key") not in secrets.get(ref["name"], set()):
                problems.append(f"{f}: deployment/{deployment} reads key {ref.get('key')!r} of secret/{ref['name']}, defined nowhere here")
        sleep = ((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds", 0)
        grace_ms = int(env.get("SHUTDOWN_GRACE_MS") or 0)
        period = spec.get("terminationGracePeriodSeconds", 30)
        if period * 1000 < sleep * 1000 + grace_ms:
            problems.append(f"{f}: deployment/{deployment}: terminationGracePeriodSeconds {period} is shorter than its preStop sleep ({sleep} s) + SHUTDOWN_GRACE_MS ({grace_ms} ms)")

for p in problems:
    print(f"validate-kubernetes: {p}")
sys.exit(1 if problems else 0)
PY

if [[ "$failed" -ne 0 ]]; then
    echo "validate-kubernetes: $dir is NOT valid (above)" >&2
    exit 1
fi
echo "validate-kubernetes: ${#manifests[@]} manifests in $dir valid against Kubernetes $oldest and $newest (strict), and consistent with each other"
