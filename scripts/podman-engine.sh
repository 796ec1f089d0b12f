# How this project's scripts run podman (sourced by scripts/build-images.sh and scripts/deploy-test.sh).
#
# podman_engine_setup STATE_DIR   installs podman, runc and debootstrap with apt-get where missing and allowed (root
#                                 with apt-get, as scripts/setup.sh installs its tools), then exports CONTAINERS_CONF
#                                 naming an engine configuration written under STATE_DIR; returns 1, saying why,
#                                 where no engine can be had
#
# The configuration is what makes containers start on machines like ours (docs/deployment.md, "Engines"): podman's
# default runtime crun raises RLIMIT_NOFILE above the hard limit and refuses hybrid cgroups, so runc runs them, and
# without CAP_SYS_RESOURCE every container's limits must be given explicitly within the host's hard limits. Kept in
# a containers.conf rather than in flags, so that podman-compose's `podman run`s get them as the builds do, and the
# compose file needs no override. TBT_PODMAN_RUNTIME picks another runtime (crun where it works).

podman_engine_packages=(podman runc debootstrap catatonit)

podman_engine_install() {
  local missing=() cmd
  for cmd in podman runc debootstrap; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
  # catatonit is the init that compose's `init: true` runs; podman only recommends it.
  [ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "not installed: ${missing[*]}; install ${podman_engine_packages[*]} (Debian/Ubuntu package names)" >&2
    return 1
  fi
  echo "[podman] installing ${podman_engine_packages[*]} with apt-get (first time only)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${podman_engine_packages[@]}" \
      >/dev/null
}

# The soft and hard limit to give containers: the host's hard limit, capped at CAP (a container asking for more than
# the hard limit fails to start here).
podman_engine_limit() {
  local hard="$1" cap="$2"
  if [ "$hard" = unlimited ] || [ "$hard" -gt "$cap" ]; then echo "$cap"; else echo "$hard"; fi
}

podman_engine_setup() {
  local state="${1:?podman_engine_setup STATE_DIR}"
  podman_engine_install || return 1
  local runtime="${TBT_PODMAN_RUNTIME:-runc}" nofile nproc
  nofile=$(podman_engine_limit "$(ulimit -Hn)" 65536)
  nproc=$(podman_engine_limit "$(ulimit -Hu)" 32768)
  mkdir -p "$state"
  cat >"$state/containers.conf" <<EOF
# Written by scripts/podman-engine.sh; rewritten on every run.
[containers]
default_ulimits = ["nofile=$(podman_engine_limit 1024 "$nofile"):$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "$runtime"
EOF
  export CONTAINERS_CONF="$state/containers.conf"
  # Builds take the same limits explicitly: buildah's RUN steps do not read default_ulimits in every version.
  podman_build_flags=(--runtime "$runtime" --ulimit "nofile=$(podman_engine_limit 1024 "$nofile"):$nofile"
    --ulimit "nproc=$nproc:$nproc")
}
