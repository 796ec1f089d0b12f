#!/usr/bin/env bash
# `npm run test:deploy`: the production deployment of docker/compose.yaml, run for real with podman on this machine
# (on demand, not part of `npm test`; docs/deployment.md, "Testing the deployment").
#
#   1. a container engine: podman (installed with apt-get where missing and allowed); skips with a message otherwise
#   2. our images, built by scripts/build-images.sh (the GPU worker's with the CPU torch)
#   3. stand-ins for the third-party images where no image registry is reachable (docker/standins/), passed to
#      compose through its image variables; everything else is docker/compose.yaml as shipped
#   4. the stack up with podman-compose (docker/deploy-requirements.txt) under the project name tbt-deploy-test,
#      with fresh secrets and other host ports, the GPU worker included (on the CPU torch; its one override below);
#      and Worker Versioning on; then: every service's containers run, setup exited 0, every worker polls Temporal
#      (scripts/deploy-pollers.ts), the build that polled is made current (scripts/deploy-first-version.ts),
#      and the rollout workers run with the compose file's user, capabilities, seccomp profile and volumes, under
#      which the dataset sandbox works (scripts/deploy-sandbox-probe.ts) and the hostile fixture's tool server, started
#      as an episode starts its tool servers, stays contained (scripts/deploy-hostile-probe.ts)
#   5. a campaign through the containers (config/deploy-test.yaml: 3 steps on the bundled model, which is copied into
#      the tbt-models volume; the GPU worker's embedded CPU policy server, reached over the compose network),
#      submitted with the `tbt` CLI in the GPU worker container; during step 2 the rollout and GPU workers are
#      recreated (podman-compose up --force-recreate) and the bookkeeping worker too, on a new, empty state volume;
#      the campaign must finish and pass the crash suite's checks of a run (scripts/deploy-campaign.ts: steps 1..N
#      once each, lineage, ledger, no episode twice, no leaked rows)
#   6. every container of the project, the recreated and the one-shot ones included, ran with the compose file's
#      volumes, user, capabilities and seccomp profile, and the test overrode nothing else
#      (scripts/deploy-compose-match.ts)
#   7. the stack and its volumes removed (TBT_DEPLOY_KEEP=1 keeps them, for a look)
#
# Not run: temporal-ui (no stand-in serves its web app without a registry) and the policy-server service (vLLM's
# image; the campaign uses the GPU worker's embedded server instead). TBT_DEPLOY_CAMPAIGN=0 stops after step 4.
#
# Last line: `deploy: images=N services=M campaign=done recreated=K steps=S wall=Ts ok` (`campaign=not-run
# recreated=0 steps=0` with TBT_DEPLOY_CAMPAIGN=0), `deploy: failed after Ts: WHY` (exit 1), or
# `deploy: skipped: WHY`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/podman-engine.sh

started=$SECONDS
state="${TBT_IMAGE_STATE_DIR:-$PWD/.state/images}"
project=tbt-deploy-test
temporal_port="${TBT_DEPLOY_TEMPORAL_PORT:-27233}"
control_db_port="${TBT_DEPLOY_CONTROL_DB_PORT:-25432}"
campaign_timeout_min="${TBT_DEPLOY_CAMPAIGN_TIMEOUT_MIN:-90}"
campaign_config=config/deploy-test.yaml
# The CPU side of docker/compose.yaml, in two waves (see "up" below). temporal-ui is left out: no stand-in serves its
# web app without a registry.
first_wave=(temporal-db temporal control-db typesense setup)
workers=(orchestrator-worker bookkeeping-worker rollout-worker gpu-worker)
services=("${first_wave[@]}" "${workers[@]}")
gpu_host=gpu-0
rollout_replicas=2

say() { echo "[deploy] $*" >&2; }
fail() {
  echo "[deploy] error: $*" >&2
  echo "deploy: failed after $((SECONDS - started))s: $1" | head -1
  exit 1
}

mkdir -p "$state"
if ! podman_engine_setup "$state" 2>"$state/engine.err"; then
  echo "deploy: skipped: no container engine: $(tail -1 "$state/engine.err")"
  exit 0
fi

for port in "$temporal_port" "$control_db_port"; do
  ! ss -Hltn "sport = :$port" 2>/dev/null | grep -q . ||
    fail "host port $port is in use (set TBT_DEPLOY_TEMPORAL_PORT / TBT_DEPLOY_CONTROL_DB_PORT)"
done

# podman-compose in a venv of its own, keyed by its requirements.
compose_hash=$(sha256sum docker/deploy-requirements.txt | cut -c1-16)
compose_venv="${XDG_CACHE_HOME:-$HOME/.cache}/thinkingbox-temporal/podman-compose-$compose_hash"
if [ ! -f "$compose_venv/.tbt-ready" ]; then
  say "installing podman-compose into $compose_venv"
  rm -rf "$compose_venv" && python3 -m venv "$compose_venv"
  "$compose_venv/bin/pip" install -q -r docker/deploy-requirements.txt >"$state/podman-compose-install.log" 2>&1 ||
    fail "podman-compose did not install: $(tail -3 "$state/podman-compose-install.log")"
  touch "$compose_venv/.tbt-ready"
fi

say "building the images (scripts/build-images.sh)"
bash scripts/build-images.sh >"$state/build-images.out" || fail "scripts/build-images.sh failed"
images=$(grep -c '^images: localhost/tbt-\(worker\|gpu-worker\):' "$state/build-images.out")

# NAME TAG: builds docker/standins/NAME.Dockerfile on the local Debian base as localhost/tbt-standin/NAME:TAG.
standin() {
  local image="localhost/tbt-standin/$1:$2" t=$SECONDS
  say "building stand-in $image"
  podman build "${podman_build_flags[@]}" --layers -t "$image" -f "docker/standins/$1.Dockerfile" \
    --ignorefile docker/worker.Dockerfile.dockerignore . >"$state/standin-$1.log" 2>&1 ||
    fail "stand-in $1 failed to build: $(tail -5 "$state/standin-$1.log")"
  say "stand-in $image: $(($(podman image inspect --format '{{.Size}}' "$image") / 1000000))MB, $((SECONDS - t))s"
}
standin postgres 15-bookworm
standin temporal 1.9.1
standin typesense lexical

# Compose reads only this file: a user's docker/.env stays out of the test.
env_file="$state/deploy.env"
secret() { od -An -tx1 -N24 /dev/urandom | tr -d ' \n'; }
control_db_password=$(secret)
(
  umask 077
  cat >"$env_file" <<EOF
TEMPORAL_DB_PASSWORD=$(secret)
CONTROL_DB_SUPERUSER_PASSWORD=$(secret)
CONTROL_DB_PASSWORD=$control_db_password
TBT_AGENT_DB_PASSWORD=$(secret)
TBT_READER_DB_PASSWORD=$(secret)
TBT_POLICY_API_KEY=$(secret)
TBT_BIND_ADDRESS=127.0.0.1
TBT_WORKER_DEPLOYMENT_NAME=$project
TBT_TEMPORAL_PORT=$temporal_port
CONTROL_DB_PUBLISH_PORT=$control_db_port
TBT_POSTGRES_IMAGE=localhost/tbt-standin/postgres:15-bookworm
TBT_TEMPORAL_IMAGE=localhost/tbt-standin/temporal:1.9.1
TBT_TYPESENSE_IMAGE=localhost/tbt-standin/typesense:lexical
EOF
)

# The GPU worker's differences here, and only its: no GPU to reserve (the image runs the CPU torch), and its
# explicit ulimits within this host's hard limits (memlock: -1 is above them, and with any explicit ulimit podman
# drops the engine's default nofile and nproc, which must then be given too: podman_engine_limit).
hard_memlock=$(ulimit -Hl)
[ "$hard_memlock" = unlimited ] && hard_memlock=-1 || hard_memlock=$((hard_memlock * 1024))
gpu_override="$state/deploy-test.gpu-override.yaml"
cat >"$gpu_override" <<EOF
# Written by scripts/deploy-test.sh: this machine has no GPU and no CAP_SYS_RESOURCE.
services:
  gpu-worker:
    ulimits:
      memlock: $hard_memlock
      nofile: {soft: $(podman_engine_limit 1024 "$(ulimit -Hn)"), hard: $(podman_engine_limit "$(ulimit -Hn)" 65536)}
      nproc: {soft: $(podman_engine_limit "$(ulimit -Hu)" 32768), hard: $(podman_engine_limit "$(ulimit -Hu)" 32768)}
    deploy: !reset {}
EOF

# From docker/: podman resolves the compose file's `seccomp=./seccomp-bubblewrap.json` against its working folder
# (Docker Compose against the compose file's), and podman-compose passes the path on as it is. With only the engine's
# settings in its environment: podman-compose lets the environment win over --env-file, and a TBT_* variable of the
# caller (or this script's own, below) would change the stack.
compose() {
  (cd docker && env -i PATH="$PATH" HOME="$HOME" CONTAINERS_CONF="$CONTAINERS_CONF" \
    "$compose_venv/bin/podman-compose" -p "$project" -f compose.yaml -f "$gpu_override" \
    --env-file "$env_file" --profile gpu --profile cli "$@")
}
cli_container="${project}_tbt_campaign"
cleanup() {
  if [ "${TBT_DEPLOY_KEEP:-}" = 1 ]; then
    say "kept: cd docker && $compose_venv/bin/podman-compose -p $project --env-file $env_file ps | down -v -t 20"
    return
  fi
  say "removing the stack and its volumes"
  podman rm -f "$cli_container" >/dev/null 2>&1 || true
  compose down -v -t 20 >"$state/compose-down.log" 2>&1 || say "down failed: see $state/compose-down.log"
}
trap cleanup EXIT

# CONTAINER: its last log lines, for a failure message.
logs() { podman logs --tail 15 "$1" 2>&1 | sed "s/^/  $1| /"; }

# Two waves, as compose itself orders them: the servers and the one-shot setup, then, once setup exited 0, the
# workers (depends_on: setup: service_completed_successfully). Done here because podman 4.3 cannot start a
# container whose --requires names an exited container (setup) that itself requires running ones ("generating
# dependency graph ... not found in input list"); --no-deps leaves --requires out for the second wave.
say "starting ${first_wave[*]} with podman-compose"
up_started=$SECONDS
compose down -v -t 5 >/dev/null 2>&1 || true
compose up -d --no-build "${first_wave[@]}" >"$state/compose-up.log" 2>&1 ||
  fail "podman-compose up failed: $(grep -iE 'error|failed' "$state/compose-up.log" | tail -3)"
setup_exit=$(timeout 300 podman wait "${project}_setup_1" 2>/dev/null) || setup_exit=timeout
[ "$setup_exit" = 0 ] || fail "setup ended with $setup_exit
$(logs "${project}_setup_1")"
say "setup done after $((SECONDS - up_started))s; starting ${workers[*]}"
compose up -d --no-build --no-deps "${workers[@]}" >>"$state/compose-up.log" 2>&1 ||
  fail "podman-compose up failed: $(grep -iE 'error|failed' "$state/compose-up.log" | tail -3)"

# What the host-side scripts need to reach the stack (never in compose's environment: see compose() above); exported
# in a subshell, so the password is on no command line.
host_env=(TBT_TEMPORAL_ADDRESS="127.0.0.1:$temporal_port" TBT_TEMPORAL_NAMESPACE=tbt TBT_TASK_QUEUE_PREFIX=tbt
  TBT_WORKER_DEPLOYMENT_NAME=$project DATABASE_URL="postgres://tbt:$control_db_password@127.0.0.1:$control_db_port/tbt")
host_node() { (export "${host_env[@]}" && exec node --import tsx "$@"); }
pollers=$(host_node scripts/deploy-pollers.ts "$rollout_replicas" 180 "$gpu_host" 2>&1) ||
  fail "$pollers
$(for c in orchestrator-worker_1 bookkeeping-worker_1 rollout-worker_1 gpu-worker_1; do logs "${project}_$c"; done)"
say "$pollers (after $((SECONDS - up_started))s)"
# Worker Versioning is on (compose passes the deployment name; the image its bundle's build id): the operator's first
# step, making the build that polled current.
versioning=$(host_node scripts/deploy-first-version.ts 2>&1) || fail "Worker Versioning: $versioning"
say "$versioning"

# Every long-running service's containers are up (setup is one-shot and done).
running=0
for service in "${services[@]}"; do
  [ "$service" = setup ] && continue
  names=$(podman ps -a --filter "label=io.podman.compose.project=$project" \
    --filter "label=io.podman.compose.service=$service" --format '{{.Names}}')
  [ -n "$names" ] || fail "service $service has no container"
  for name in $names; do
    status=$(podman inspect --format '{{.State.Status}}' "$name")
    [ "$status" = running ] || fail "service $service: $name is $status
$(logs "$name")"
    running=$((running + 1))
  done
done

# The rollout workers run as the compose file says: the image's user, every capability dropped, no new privileges,
# the bubblewrap seccomp profile, the datasets volume read-only.
for n in $(seq 1 "$rollout_replicas"); do
  c="${project}_rollout-worker_$n"
  summary=$(podman inspect --format '{{.Config.User}}|{{.HostConfig.CapDrop}}|{{.HostConfig.SecurityOpt}}' "$c")
  [[ "$summary" == 10001:10001\|* ]] || fail "$c runs as '${summary%%|*}', not the image's user 10001:10001"
  [[ "$summary" == *seccomp=./seccomp-bubblewrap.json* ]] || fail "$c: not the compose file's seccomp profile"
  caps=$(podman exec "$c" grep CapEff /proc/self/status | awk '{print $2}')
  [ "$caps" = 0000000000000000 ] || fail "$c has effective capabilities $caps (cap_drop: [ALL])"
  nnp=$(podman exec "$c" grep NoNewPrivs /proc/self/status | awk '{print $2}')
  [ "$nnp" = 1 ] || fail "$c: no_new_privs is off"
  seccomp=$(podman exec "$c" grep '^Seccomp:' /proc/self/status | awk '{print $2}')
  [ "$seccomp" = 2 ] || fail "$c: no seccomp filter (Seccomp: $seccomp)"
  podman exec "$c" sh -c 'touch /var/lib/tbt/datasets/x' 2>/dev/null && fail "$c can write the datasets volume"
  # Under those settings the dataset sandbox still works: bubblewrap's namespaces, mounts and /proc.
  probe=$(podman exec "$c" node --import tsx scripts/deploy-sandbox-probe.ts 2>&1) ||
    fail "$c: the dataset sandbox refuses to run: $probe"
done
say "rollout workers: user 10001, no capabilities, no_new_privs, seccomp filter, datasets read-only, sandbox ok"
say "${probe##*$'\n'}"
# Hostile dataset code in the rollout container, under the shipped seccomp profile, not --privileged.
c="${project}_rollout-worker_1"
hostile=$(podman exec "$c" node --import tsx scripts/deploy-hostile-probe.ts 2>&1) || fail "$c: $hostile"
say "${hostile##*$'\n'}"

recreated=0
steps=0
campaign=not-run
if [ "${TBT_DEPLOY_CAMPAIGN:-1}" != 0 ]; then
  source scripts/deploy-campaign.sh
  campaign=done
fi

# Every container of the project, the recreated ones and the one-shot setup and CLI ones included.
match=$(host_node scripts/deploy-compose-match.ts "$project" "$env_file" "$gpu_override" 2>&1) || fail "$match"
say "$match"
ran=$(grep -o '[a-z-]*=[1-9]' <<<"$match" | wc -l)

trap - EXIT
cleanup
echo "deploy: images=$images services=$ran campaign=$campaign recreated=$recreated steps=$steps" \
  "wall=$((SECONDS - started))s ok"
