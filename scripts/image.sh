#!/usr/bin/env bash
# Builds sluice's runtime image without a Docker engine or an image registry: the same
# image as the Dockerfile's runtime stage (Debian bookworm, CA certificates, user 10001,
# the binary, the example plugins, the schemas and docs, the same entrypoint, command,
# port and stop signal), from
#   - a root file system made by debootstrap from Debian's package mirror,
#   - the binary and plugins built on this machine (cargo build),
# assembled and committed with buildah, and saved as an OCI archive that `podman load` and
# `docker load` take. Then it checks the image starts: `podman run` of `--version`, of
# `validate`, and of `run` on the embedded default, stopped with SIGTERM within the grace
# period.
#
#   scripts/image.sh [--debug] [--tag NAME:VERSION] [--no-run]
#
# Needs root (debootstrap, buildah's mounts) and Debian's buildah, podman and debootstrap
# (installed when missing). The root file system is kept in target/image/ for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "image: $*" >&2; }
die() { log "$*"; exit 1; }
# A directory that commands below write into, mount on or copy over: never empty, never /.
checked_dir() {
  [ -n "$1" ] && [ "$1" != / ] && [ -d "$1" ] || die "internal error: \"$1\" is not a directory to work in"
}

profile=release
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
tag=sluice:$version
run_checks=1
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) profile=debug ;;
    --tag) tag=$2; shift ;;
    --no-run) run_checks=0 ;;
    *) die "unknown argument $1 (use --debug, --tag NAME:VERSION, --no-run)" ;;
  esac
  shift
done

[ "$(id -u)" = 0 ] || die "needs root: debootstrap and buildah's mounts do (or build with the Dockerfile where a Docker engine runs)"
missing=()
for tool in buildah podman debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
fi

# 1. The binary and the plugins, built here.
if [ "$profile" = release ]; then
  log "building sluice (release; the plugins build with it)"
  cargo build --release --locked --workspace --bins
else
  # The same build as scripts/test.sh's (a package alone would unify features otherwise
  # and build its dependencies again).
  log "building sluice (debug; the plugins build with it)"
  cargo build --locked --workspace --all-targets
fi
binary=target/$profile/sluice
plugins=target/plugins/wasm32-wasip2/release
ls "$plugins"/*.wasm >/dev/null 2>&1 || die "no plugins in $plugins: the build should have made them"

# 2. The runtime root file system: Debian bookworm, minimal, with CA certificates and the
#    sluice user; made once.
work=target/image
rootfs=$work/rootfs-bookworm
if [ ! -f "$rootfs/.complete" ]; then
  # An interrupted debootstrap can leave /proc and /sys mounted in it.
  umount -R "$rootfs" 2>/dev/null || true
  rm -rf --one-file-system "$rootfs"
  mkdir -p "$work"
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
  mirror=${mirror:-http://deb.debian.org/debian}
  log "making the root file system with debootstrap from $mirror (a few minutes, once)"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" >&2
  chroot "$rootfs" groupadd --system --gid 10001 sluice
  chroot "$rootfs" useradd --system --uid 10001 --gid sluice --home-dir /var/lib/sluice --create-home sluice
  mkdir -p "$rootfs/etc/sluice" "$rootfs/var/cache/sluice"
  chroot "$rootfs" chown sluice:sluice /var/cache/sluice
  # What a runtime image does not need: package lists, caches, documentation.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  touch "$rootfs/.complete"
fi

# Every library the binary links must be in the root file system.
present=$(chroot "$rootfs" /sbin/ldconfig -p)
for lib in $(ldd "$binary" | awk '/=>/ { print $1 }'); do
  if ! grep -q "^[[:space:]]*$lib " <<<"$present"; then
    die "$binary links $lib, which the runtime file system does not have"
  fi
done

# 3. The image: the root file system, then sluice's files, then its configuration.
log "assembling $tag with buildah"
container=$(buildah from scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
mount=$(buildah mount "$container")
checked_dir "$mount"
cp -a "$rootfs"/. "$mount"/
rm -f "$mount/.complete"
install -D -m 0755 "$binary" "$mount/usr/local/bin/sluice"
install -d "$mount/usr/local/lib/sluice/plugins" "$mount/usr/local/share/sluice" "$mount/usr/local/share/doc/sluice"
install -m 0644 "$plugins"/*.wasm "$mount/usr/local/lib/sluice/plugins/"
cp -r schemas "$mount/usr/local/share/sluice/schemas"
cp -r docs/. "$mount/usr/local/share/doc/sluice/"
# The binary runs in the image's file system (its libraries, its loader).
chroot "$mount" /usr/local/bin/sluice --version >&2
buildah unmount "$container" >/dev/null
buildah config \
  --user 10001:10001 \
  --workingdir /var/lib/sluice \
  --env SLUICE_CACHE_DIR=/var/cache/sluice \
  --port 8083 \
  --stop-signal SIGTERM \
  --entrypoint '["/usr/local/bin/sluice"]' \
  --cmd 'run --config /etc/sluice/connectors.yaml' \
  --label org.opencontainers.image.title=sluice \
  --label "org.opencontainers.image.version=$version" \
  "$container"
buildah commit --quiet --rm "$container" "$tag" >/dev/null
trap - EXIT
archive=$work/sluice-$version-oci.tar
rm -f "$archive"
buildah push --quiet "$tag" "oci-archive:$archive:$tag"
log "built $tag: $(du -h "$archive" | cut -f1) as an OCI archive in $archive (podman load / docker load -i)"
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$tag" >&2

[ "$run_checks" = 1 ] || exit 0

# 4. Does it start? --version, validate, and a run on the embedded default, SIGTERMed.
#    With podman when this machine lets it start containers; else (a sandbox that refuses
#    the resource limits a container runtime sets) in the image's own file system under
#    chroot, as the image's user, with its working directory, environment and command.
config=$(mktemp -d)
cat >"$config/connectors.yaml" <<'EOF'
kafka: { brokers: embedded }
connectors:
  - name: words
    topics: [words]
    transforms:
      - name: parse
        plugin: /usr/local/lib/sluice/plugins/word_parse.wasm
    sink:
      url: sqlite:///var/lib/sluice/words.db
      table: words
      mode: upsert
      key: [uid]
      columns:
        uid:  { from: /uid, type: bigint }
        word: { from: /word, type: text }
      create_table: true
EOF
chmod 0755 "$config"
chmod 0644 "$config/connectors.yaml"

check_container() {
  podman run --rm --network none -v "$config:/etc/sluice:ro" "$tag" validate --config /etc/sluice/connectors.yaml
  podman run -d --name sluice-image-check --network none -v "$config:/etc/sluice:ro" "$tag" >/dev/null
  for _ in $(seq 1 60); do
    podman logs sluice-image-check 2>&1 | grep -q "connector started" && break
    sleep 1
  done
  podman logs sluice-image-check 2>&1 | grep -q "connector started" \
    || { podman logs sluice-image-check >&2; die "sluice did not start its connector in the container"; }
  started=$(date +%s)
  podman stop --time 30 sluice-image-check >/dev/null
  code=$(podman inspect --format '{{.State.ExitCode}}' sluice-image-check)
  took=$(($(date +%s) - started))
  podman rm -f sluice-image-check >/dev/null
}

check_chroot() {
  checker=$(buildah from "$tag")
  root=$(buildah mount "$checker")
  checked_dir "$root"
  trap 'umount "$root/proc" 2>/dev/null || true; umount "$root/dev" 2>/dev/null || true; buildah rm "$checker" >/dev/null 2>&1 || true; rm -rf "$config"' EXIT
  mkdir -p "$root/dev" "$root/proc"
  mount --bind /dev "$root/dev"
  mount -t proc proc "$root/proc"
  cp "$config/connectors.yaml" "$root/etc/sluice/connectors.yaml"
  # The image's own user, working directory, environment and entrypoint, as committed.
  local user workdir entrypoint
  user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$tag")
  workdir=$(buildah inspect --type image --format '{{.OCIv1.Config.WorkingDir}}' "$tag")
  entrypoint=$(buildah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$tag")
  mapfile -t environment < <(buildah inspect --type image --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$tag" | sed '/^$/d')
  [ -n "$user" ] && [ -n "$workdir" ] && [ -n "$entrypoint" ] || die "the image has no user, working directory or entrypoint"
  as_image_user() {
    exec chroot --userspec="$user" "$root" /usr/bin/env -i HOME="$workdir" "${environment[@]}" \
      /bin/sh -c "cd $workdir && exec $entrypoint $*"
  }
  # Each in a subshell that becomes sluice (chroot, env and the shell exec it).
  (as_image_user --version)
  (as_image_user validate --config /etc/sluice/connectors.yaml)
  (as_image_user run --config /etc/sluice/connectors.yaml) 2>"$config/run.log" &
  local pid=$!
  for _ in $(seq 1 60); do
    grep -q "connector started" "$config/run.log" && break
    sleep 1
  done
  if ! grep -q "connector started" "$config/run.log"; then
    cat "$config/run.log" >&2
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    die "sluice did not start its connector in the image's file system"
  fi
  started=$(date +%s)
  # The subshell, chroot, env and the shell exec into sluice: $pid is sluice itself.
  kill -TERM "$pid"
  code=0
  wait "$pid" || code=$?
  took=$(($(date +%s) - started))
  tail -n 3 "$config/run.log" >&2
}

trap 'rm -rf "$config"; podman rm -f sluice-image-check >/dev/null 2>&1 || true' EXIT
if podman run --rm --network none "$tag" --version 2>"$config/podman.err"; then
  how="in a container (podman run)"
  check_container
elif ! grep -q "setrlimit" "$config/podman.err"; then
  cat "$config/podman.err" >&2
  die "the image does not start under podman"
else
  log "podman cannot start a container on this machine: $(tail -n1 "$config/podman.err")"
  log "checking the image's file system under chroot instead, as user 10001, with the image's working directory, environment and command"
  how="in the image's file system under chroot (this machine refuses containers)"
  check_chroot
fi
[ "$code" = 0 ] || die "sluice exited with $code after SIGTERM ($how)"
[ "$took" -le 25 ] || die "sluice took ${took} s to stop after SIGTERM (the stop bound is 25 s)"
log "the image runs $how: --version, validate, and run on the embedded default, stopped by SIGTERM in ${took} s with exit 0"
