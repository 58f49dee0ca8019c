#!/usr/bin/env bash
# compose_test.sh: docker/compose.py's files pass `docker-compose config` (no engine needed) for
# one host with 3 servers and 4 trainers and for both halves of the two-host recipe, have the
# services and ranks asked for, and docker/docker-compose.yml is the generator's default output.
#   compose_test.sh SOURCE_DIR
set -uo pipefail
src="${1:?source dir}"
command -v docker-compose > /dev/null || { echo "SKIP: no docker-compose"; exit 77; }
tmp="$(mktemp -d "$src/docker/.compose-test.XXXXXX")"  # beside the real file: same ../examples
trap 'rm -rf "$tmp"' EXIT
gen() { python3 "$src/docker/compose.py" "$@"; }
fail=0
check_config() {  # file, expected services (sorted, space-separated)
  docker-compose -f "$1" config -q || { echo "FAIL: docker-compose config rejects $1"; fail=1; return; }
  local got
  got="$(docker-compose -f "$1" config --services | sort | tr '\n' ' ' | sed 's/ $//')"
  [ "$got" = "$2" ] || { echo "FAIL: $1 has services '$got', expected '$2'"; fail=1; }
}
gen -s 3 -t 4 > "$tmp/one.yml"
check_config "$tmp/one.yml" "scheduler server0 server1 server2 trainer0 trainer1 trainer2 trainer3"
docker-compose -f "$tmp/one.yml" config > "$tmp/one.resolved"
for r in 0 1 2; do
  grep -q "strata-nvme-$r:/var/lib/strata:rw" "$tmp/one.resolved" ||
    { echo "FAIL: server$r has no volume of its own"; fail=1; }
done
[ "$(grep -c 'healthcheck:' "$tmp/one.resolved")" = 8 ] ||
  { echo "FAIL: every service needs a health check"; fail=1; }
[ "$(grep -c 'restart: on-failure' "$tmp/one.resolved")" = 4 ] ||
  { echo "FAIL: the scheduler and every server restart after a crash"; fail=1; }
[ "$(grep -c 'STRATA_RANK' "$tmp/one.resolved")" = 7 ] ||
  { echo "FAIL: every server and trainer needs STRATA_RANK"; fail=1; }

gen -s 2 -t 4 --roles scheduler,server --network host --advertise 10.0.0.1 > "$tmp/a.yml"
gen -s 2 -t 4 --roles trainer --network host --advertise 10.0.0.2 --scheduler 10.0.0.1:7000 > "$tmp/b.yml"
check_config "$tmp/a.yml" "scheduler server0 server1"
check_config "$tmp/b.yml" "trainer0 trainer1 trainer2 trainer3"
grep -q 'STRATA_SCHEDULER: "10.0.0.1:7000"' "$tmp/b.yml" || { echo "FAIL: host B's scheduler"; fail=1; }
grep -q 'tcp://0.0.0.0:7203' "$tmp/b.yml" || { echo "FAIL: host networking needs a port per trainer"; fail=1; }
gen --roles trainer > /dev/null 2> "$tmp/err" && { echo "FAIL: trainers without a scheduler accepted"; fail=1; }
grep -q -- "--scheduler" "$tmp/err" || { echo "FAIL: the error does not name --scheduler"; fail=1; }

gen | cmp -s - "$src/docker/docker-compose.yml" ||
  { echo "FAIL: docker/docker-compose.yml is not docker/compose.py's default output (regenerate it)"; fail=1; }
[ $fail = 0 ] && echo "PASS: one host 3x4, two hosts (scheduler+servers | trainers), default file current"
exit $fail
