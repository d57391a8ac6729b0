#!/usr/bin/env bash
# `make test`'s pytest run, in three streams at once:
#   - the integration tests, in two shards at once, each on a dev cluster of its own:
#     shard A in the foreground on the cluster `make cluster` brought up ($SLURM_ML_DEVCLUSTER),
#     shard B beside it on a second cluster this script brings up in <state>-b, its ports
#     moved up by 100 (`devcluster up --ports-offset`) and down again at the end. They
#     mostly wait on Slurm and on real time (protected runtimes, fair-share windows, daemon
#     cycles), so two clusters halve the run on the same cores. devcluster/integration-shards.txt
#     names shard B's modules; every other one (a new one too) runs in shard A;
#   - beside them, niced, the unit tests (CPU only) and, at the same time, the compose
#     tests (tests/compose: a Docker engine building and starting the compose cluster,
#     ~11 minutes, mostly waiting on containers; they skip, saying why, where none
#     answers). One after the other they would take ~19 minutes where an engine answers,
#     longer than the sharded integration run.
# Shard B's and the side streams' output is held in logs and printed once shard A ends, so
# nothing interleaves; a last line counts each shard's tests (from their JUnit reports), so
# a reader sees none was dropped.
# SLURM_ML_TEST_SERIAL=1 runs one pytest over everything on the one cluster instead.
# Usage: devcluster/test-all.sh PYTEST [PYTEST_ARGS...]; exit 0 only if every stream
# passed (a stream that collected nothing, pytest's 5, passes while another ran tests).
set -uo pipefail
pytest=$1
shift
state=${SLURM_ML_DEVCLUSTER:?source the dev cluster env.sh first}

if [[ ${SLURM_ML_TEST_SERIAL:-0} == 1 ]]; then
  exec "$pytest" "$@"
fi

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
bin=$(dirname "$pytest")
state_b=$state-b
# Cluster B's ports: cluster A's offset (recorded by `devcluster up`) + 100, so that the
# two never share a port, nor with a third cluster at the defaults.
a_offset=$("$bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("ports_offset", 0))' \
  "$state/state.json" 2>/dev/null || echo 0)
b_offset=$((a_offset + 100))

# Shard B: the listed modules; shard A: the others. By --deselect (node id prefixes, from
# the repository root), not --ignore, which a path given in PYTEST_ARGS would override:
# PYTEST_ARGS (-k, a path) still narrow both shards, and no test runs in both.
mapfile -t listed < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$here/integration-shards.txt" | grep -v '^$')
a_args=()
b_args=()
for f in "$repo"/tests/integration/test_*.py; do
  rel=${f#"$repo"/}
  if printf '%s\n' "${listed[@]}" | grep -qxF "$rel"; then
    a_args+=("--deselect=$rel")
  else
    b_args+=("--deselect=$rel")
  fi
done

side_log=$state/test-side.log
compose_log=$state/test-compose.log
b_log=$state/test-shard-b.log
# their own temporary roots (pytest prunes old numbered ones: not the running ones), short
# enough for the Unix sockets some tests bind there
tmp=$(mktemp -d /tmp/slurm-ml-tests.XXXXXX)

(
  rc=0
  nice -n 10 "$pytest" -m 'not integration and not compose' --basetemp="$tmp/unit" "$@" \
    || rc=$?
  echo "test-all: unit tests exit $rc"
) >"$side_log" 2>&1 &
side=$!
(
  crc=0
  nice -n 10 "$pytest" -m compose --basetemp="$tmp/compose" "$@" || crc=$?
  echo "test-all: compose tests exit $crc"
) >"$compose_log" 2>&1 &
compose=$!

(
  rc=0
  # --no-install: `make cluster` installed the packages for cluster A a moment ago.
  if "$bin/slurm-ml" devcluster up --state-dir "$state_b" --ports-offset "$b_offset" \
      --no-install; then
    # its own environment (SLURM_CONF, SLURM_ML_DSN, ...), in a subshell
    (source "$state_b/env.sh" && exec "$pytest" -m integration --basetemp="$tmp/int-b" \
      --junitxml="$tmp/shard-b.xml" -o junit_family=xunit1 "${b_args[@]}" "$@") || rc=$?
  else
    echo "test-all: cluster B ($state_b) did not come up; shard B did not run"
    rc=1
  fi
  echo "test-all: integration shard B exit $rc"
) >"$b_log" 2>&1 &
shard_b=$!

cluster_b_down() {
  echo "test-all: bringing cluster B down ($state_b)"
  # Its jobs first: a shard stopped early (Ctrl-C) leaves running jobs whose processes
  # would outlive slurmd. Cluster B runs nothing but shard B's jobs.
  (
    source "$state_b/env.sh" 2>/dev/null || exit 0
    squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null
    for _ in {1..30}; do
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
      sleep 1
    done
  )
  "$bin/slurm-ml" devcluster down --state-dir "$state_b" || echo "test-all: cluster B down failed"
}
trap 'pkill -TERM -P "$side" 2>/dev/null; kill "$side" 2>/dev/null
      pkill -INT -P "$compose" 2>/dev/null; wait "$compose" 2>/dev/null
      pkill -TERM -P "$shard_b" 2>/dev/null; kill "$shard_b" 2>/dev/null
      wait "$shard_b" 2>/dev/null; cluster_b_down; exit 130' INT TERM

"$pytest" -m integration --basetemp="$tmp/int-a" --junitxml="$tmp/shard-a.xml" \
  -o junit_family=xunit1 "${a_args[@]}" "$@"
arc=$?
wait "$shard_b"
wait "$side"
wait "$compose"
echo
echo "======== integration shard B (cluster B, $state_b; ran beside shard A) ========"
cat "$b_log"
echo
echo "======== unit tests (ran beside the integration tests) ========"
cat "$side_log"
echo
echo "======== compose tests (ran beside the integration tests) ========"
cat "$compose_log"
echo
cluster_b_down
brc=$(sed -n 's/^test-all: integration shard B exit //p' "$b_log")
urc=$(sed -n 's/^test-all: unit tests exit //p' "$side_log")
crc=$(sed -n 's/^test-all: compose tests exit //p' "$compose_log")
brc=${brc:-1}
urc=${urc:-1}
crc=${crc:-1}
# Each shard's count from its JUnit report: together they are the whole integration suite.
# (xunit1: pytest's default xunit2 turns record_property, which some tests use, into a
# warning, and every warning is an error here.)
"$bin/python" - "$tmp/shard-a.xml" "$tmp/shard-b.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

total, parts = 0, []
for name, path in zip("AB", sys.argv[1:]):
    try:
        suites = ET.parse(path).getroot().iter("testsuite")
    except (OSError, ET.ParseError):
        parts.append(f"shard {name}: no report")
        continue
    n = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
    for s in suites:
        for k in n:
            n[k] += int(s.get(k, 0))
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    total += n["tests"]
    parts.append(f"shard {name}: {n['tests']} tests, {passed} passed, {n['failures']} failed, "
                 f"{n['errors']} errors, {n['skipped']} skipped")
print(f"test-all: integration {'; '.join(parts)}; {total} tests in all")
PY
echo "test-all: integration shard A exit $arc, shard B exit $brc, unit tests exit $urc," \
  "compose tests exit $crc"

# pytest's 5 (nothing collected) passes while another stream ran tests: a path in
# PYTEST_ARGS selects from one stream only.
ran=0
for rc in "$arc" "$brc" "$urc" "$crc"; do
  [[ $rc == 0 ]] && ran=1
done
status=0
for rc in "$arc" "$brc" "$urc" "$crc"; do
  if [[ $rc != 0 && ! ($rc == 5 && $ran == 1) ]]; then
    status=1
  fi
done
[[ $status == 0 ]] && rm -rf "$tmp"  # kept after a failure, for its files
exit "$status"
