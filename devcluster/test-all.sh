#!/usr/bin/env bash
# `make test`'s pytest run, in two streams at once on the running dev cluster:
#   - the integration tests, in the foreground: they mostly wait on Slurm and on real
#     time (protected runtimes, fair-share windows), so a core is idle most of the run;
#   - beside them, niced, the unit tests (CPU only, held to the coverage floor), then the
#     compose tests (tests/compose: a Docker engine building and starting the compose
#     cluster; they skip, saying why, where none answers). Their output is held in a log
#     and printed once the integration run ends, so the two never interleave.
# On 2 cores this takes the CI run from about 35 minutes to the integration suite's length.
# SLURM_ML_TEST_SERIAL=1 runs the three one after the other instead (one output, in order).
# Usage: devcluster/test-all.sh PYTEST [PYTEST_ARGS...]; exit 0 only if every stream
# passed (a stream that collected nothing, pytest's 5, passes while another ran tests).
set -uo pipefail
pytest=$1
shift
state=${SLURM_ML_DEVCLUSTER:?source the dev cluster env.sh first}

if [[ ${SLURM_ML_TEST_SERIAL:-0} == 1 ]]; then
  exec "$pytest" "$@"
fi

side_log=$state/test-side.log
# their own temporary roots (pytest prunes old numbered ones: not the running ones), short
# enough for the Unix sockets some tests bind there
side_tmp=$(mktemp -d /tmp/slurm-ml-tests.XXXXXX)
# The unit tests' coverage floor (pyproject.toml [tool.coverage.report]) holds for the whole
# unit suite only: a run narrowed to some tests (a path or -k in PYTEST_ARGS) is not held
# to it.
cov=(--cov --cov-report=term)
for arg in "$@"; do
  [[ $arg == tests* || $arg == -k* || $arg == *::* ]] && cov=()
done
(
  rc=0
  # the unit tests over both cores (pytest-xdist), niced below the integration tests; the
  # ones marked slow (whole simulated weeks) after the rest, without the coverage tracer,
  # which makes them about four times slower
  nice -n 10 "$pytest" -n 2 -m 'not integration and not compose and not slow' "${cov[@]}" \
    --basetemp="$side_tmp/unit" "$@" || rc=$?
  src=0
  nice -n 10 "$pytest" -n 2 -m 'slow and not integration and not compose' \
    --basetemp="$side_tmp/slow" "$@" || src=$?
  [[ $rc == 0 && $src != 0 && $src != 5 ]] && rc=$src  # 5: nothing selected
  echo "test-all: unit tests exit $rc"
  crc=0
  "$pytest" -m compose --basetemp="$side_tmp/compose" "$@" || crc=$?
  echo "test-all: compose tests exit $crc"
) >"$side_log" 2>&1 &
side=$!
trap 'pkill -TERM -P "$side" 2>/dev/null; kill "$side" 2>/dev/null' INT TERM

"$pytest" -m integration "$@"
irc=$?
wait "$side"
echo
echo "======== unit and compose tests (ran beside the integration tests) ========"
cat "$side_log"
urc=$(sed -n 's/^test-all: unit tests exit //p' "$side_log")
crc=$(sed -n 's/^test-all: compose tests exit //p' "$side_log")
urc=${urc:-1}
crc=${crc:-1}
echo "test-all: integration tests exit $irc, unit tests exit $urc, compose tests exit $crc"

# pytest's 5 (nothing collected) passes while another stream ran tests: a path in
# PYTEST_ARGS selects from one stream only.
ran=0
for rc in "$irc" "$urc" "$crc"; do
  [[ $rc == 0 ]] && ran=1
done
status=0
for rc in "$irc" "$urc" "$crc"; do
  if [[ $rc != 0 && ! ($rc == 5 && $ran == 1) ]]; then
    status=1
  fi
done
[[ $status == 0 ]] && rm -rf "$side_tmp"  # kept after a failure, for its files
exit "$status"
