#!/usr/bin/env bash
# `make test`'s pytest run in two lanes on one lab (tests/helpers/lanes.py, issue 42):
#
#   bash scripts/test-lanes.sh PYTHON [PYTEST_ARGS...]
#
# Lane b, the ring-3 tests that mostly wait (deadlines, heartbeat timeouts, requeue holds,
# killed nodes), runs in the background on nodes reserved for it, its output in
# build/test-results/lane-b.log; lane a, everything else (rings 1 and 2 first), runs in front.
# Strict (tests/helpers/need.py): a missing prerequisite fails, never skips. Image builds go
# through tests/helpers/bin/make, one at a time. At the end: lane b's output, then what the
# whole run cost (total, per ring, the ten slowest). The exit status is lane a's, else lane b's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
py=${1:?usage: test-lanes.sh PYTHON [PYTEST_ARGS...]}
shift
out=build/test-results
mkdir -p "$out"
rm -f "$out"/junit-a.xml "$out"/junit-b.xml "$out"/lane-b.log "$out"/lane-b.ready
export TORCHRUN_JSC_TESTS_STRICT=1 TORCHRUN_JSC_LAB_READY=$PWD/$out/lane-b.ready
export PATH=$PWD/tests/helpers/bin:$PATH
marks="not emulated and not scale"

TORCHRUN_JSC_LAB_LANE=b "$py" -m pytest -ra -p no:cacheprovider --junitxml="$out/junit-b.xml" \
    -m "lane_b and $marks" "$@" tests >"$out/lane-b.log" 2>&1 &
lane_b=$!
trap 'kill "$lane_b" 2>/dev/null' INT TERM
TORCHRUN_JSC_LAB_LANE=a "$py" -m pytest -ra --junitxml="$out/junit-a.xml" \
    -m "not lane_b and $marks" "$@" tests
rc_a=$?
echo "test-lanes: lane a done (exit $rc_a); waiting for lane b ($out/lane-b.log)"
wait "$lane_b"
rc_b=$?
echo "==== lane b: the ring-3 tests that wait, on nodes of their own ($out/lane-b.log) ===="
cat "$out/lane-b.log"
echo "==== what the tests cost (both lanes) ===="
python3 tests/helpers/durations.py "$out/junit-a.xml" "$out/junit-b.xml"
echo "test-lanes: lane a exit $rc_a, lane b exit $rc_b"
[ "$rc_a" = 0 ] || exit "$rc_a"
exit "$rc_b"
