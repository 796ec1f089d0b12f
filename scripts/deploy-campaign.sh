# The campaign of `npm run test:deploy`, sourced by scripts/deploy-test.sh once the stack is up (its compose, fail,
# say, logs and host_node; it sets campaign_id, recreated and steps):
#
#   1. the bundled model copied into the tbt-models volume, as an operator puts weights there before a campaign
#   2. config/deploy-test.yaml submitted with the `tbt` CLI in the GPU worker's container (`podman exec`)
#   3. once training step 2 is under way (scripts/deploy-campaign.ts wait): the rollout and GPU workers recreated
#      with `podman-compose up --force-recreate` (the GPU worker's learner and embedded policy server die with its
#      container), and the bookkeeping worker removed, its state volume deleted and the worker started again on a
#      new, empty one
#   4. the campaign waited for and checked as the crash suite checks a run (scripts/deploy-campaign.ts finish), the
#      learner's files read from the tbt-checkpoints volume's folder on this host

campaign_id="deploy-$(date -u +%Y%m%d-%H%M%S)"

# The GPU worker's model store finds the folder complete and never downloads at run time; podman cp gives the files
# to the container's user. The volume outlives the container, so the recreated worker finds it too.
model_dir=$(cd gpu-learner && "$(cat ../.tools/python-venv)/bin/python" -m tbt_gpu.model_store 2>/dev/null) ||
  fail "no bundled model on this host (bash scripts/setup.sh converts it)"
podman cp "$model_dir" "${project}_gpu-worker_1:/models/" || fail "could not copy $model_dir into the tbt-models volume"
podman exec "${project}_gpu-worker_1" test -r "/models/$(basename "$model_dir")/model.safetensors" ||
  fail "the GPU worker cannot read the model copied into tbt-models"

say "campaign $campaign_id: $campaign_config submitted with the tbt CLI in the GPU worker container"
campaign_started=$SECONDS
# In the GPU worker's container: `tbt train` checks the learner section with the learner's own Python (and resolves
# `model_path: embedded` through its model store), which the worker image of compose's `tbt` service does not hold.
podman exec "${project}_gpu-worker_1" node --import tsx cli/tbt.ts train --config "$campaign_config" \
  --id "$campaign_id" </dev/null >"$state/campaign-submit.log" 2>&1 ||
  fail "tbt train failed: $(tail -5 "$state/campaign-submit.log")"

waited=$(host_node scripts/deploy-campaign.ts wait "$campaign_config" "$campaign_id" 2 "$campaign_timeout_min" 2>&1) ||
  fail "$waited
$(for c in orchestrator-worker_1 gpu-worker_1 rollout-worker_1; do logs "${project}_$c"; done)"
say "${waited##*$'\n'}"
# Episodes of step 2 in flight when the containers go.
sleep 5

# SERVICE...: the ids of their containers, one a line.
ids() {
  for service in "$@"; do
    podman ps -a -q --no-trunc --filter "label=io.podman.compose.project=$project" \
      --filter "label=io.podman.compose.service=$service"
  done | sort
}
recreate=(rollout-worker gpu-worker bookkeeping-worker)
before=$(ids "${recreate[@]}")
state_volume="${project}_tbt-state"
old_volume=$(podman volume inspect --format '{{.CreatedAt}} {{.Mountpoint}}' "$state_volume")
say "recreating rollout-worker x$rollout_replicas, gpu-worker (up --force-recreate), bookkeeping-worker (new volume)"
t=$SECONDS
compose up -d --no-build --no-deps --force-recreate rollout-worker gpu-worker >>"$state/compose-up.log" 2>&1 ||
  fail "podman-compose up --force-recreate failed: $(grep -iE 'error|failed' "$state/compose-up.log" | tail -3)"
podman rm -f -t 20 "${project}_bookkeeping-worker_1" >/dev/null || fail "could not remove the bookkeeping worker"
podman volume rm "$state_volume" >/dev/null || fail "could not remove $state_volume"
compose up -d --no-build --no-deps bookkeeping-worker >>"$state/compose-up.log" 2>&1 ||
  fail "podman-compose up bookkeeping-worker failed: $(grep -iE 'error|failed' "$state/compose-up.log" | tail -3)"
after=$(ids "${recreate[@]}")
recreated=$(comm -13 <(echo "$before") <(echo "$after") | grep -c .) || true
[ "$recreated" = $((rollout_replicas + 2)) ] || fail "recreated $recreated containers, not $((rollout_replicas + 2))"
new_volume=$(podman volume inspect --format '{{.CreatedAt}} {{.Mountpoint}}' "$state_volume")
[ "$new_volume" != "$old_volume" ] || fail "$state_volume is the old volume"
left=$(podman exec "${project}_bookkeeping-worker_1" find /var/lib/tbt/state -mindepth 1 -maxdepth 1 | wc -l)
for c in $after; do
  [ "$(podman inspect --format '{{.State.Status}}' "$c")" = running ] || fail "recreated $c is not running
$(logs "$c")"
done
say "recreated $recreated containers in $((SECONDS - t))s; bookkeeping state volume new ($left entries now)"

checkpoints=$(podman volume inspect --format '{{.Mountpoint}}' "${project}_tbt-checkpoints")
TBT_STATE_DIR="$checkpoints" host_node scripts/deploy-campaign.ts finish "$campaign_config" "$campaign_id" \
  "$campaign_timeout_min" >"$state/campaign.log" 2>&1 || fail "campaign $campaign_id: $(grep -E 'FAIL|campaign:' \
  "$state/campaign.log" | tail -8)
$(for c in orchestrator-worker_1 bookkeeping-worker_1 gpu-worker_1 rollout-worker_1; do logs "${project}_$c"; done)"
sed 's/^/[deploy]   /' "$state/campaign.log" | grep -E 'PASS|FAIL|campaign:' >&2
steps=$(sed -n 's/^campaign: steps=\([0-9]*\) .*/\1/p' "$state/campaign.log")
say "campaign $campaign_id done in $((SECONDS - campaign_started))s"
