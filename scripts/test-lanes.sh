#!/usr/bin/env bash
# `make test`'s pytest run in three lanes, two of them on one lab (tests/helpers/lanes.py,
# issue 42):
#
#   bash scripts/test-lanes.sh PYTHON [PYTEST_ARGS...]
#
# Lane a, the lab's ring-3 tests, runs in front and starts on the lab as soon as lane b has
# reserved its nodes. Lane b, the ring-3 tests that mostly wait (deadlines, heartbeat timeouts,
# requeue holds, killed nodes), runs in the background on those nodes; its output goes to
# build/test-results/lane-b.log. Lane c, everything that needs no lab (the launcher's real
# two-node test under the oldest supported torch, $TORCH_OLDEST, through scripts/torch-compat.sh;
# then rings 1 and 2 and the lab-free ring-3 files), runs in the background too, its output in
# build/test-results/lane-c.log. The 2 cores compute for one lane while another waits.
# Strict (tests/helpers/need.py): a missing prerequisite fails, never skips. Image builds go
# through tests/helpers/bin/make, one at a time. At the end: lane c's and lane b's output, the
# fault matrix's rows that passed (tests/helpers/faultrows.py), then
# what the whole run cost (total, per ring, the ten slowest). The exit status is the first
# failed lane's (a, b, c), else 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
py=${1:?usage: test-lanes.sh PYTHON [PYTEST_ARGS...]}
shift
out=build/test-results
mkdir -p "$out"
rm -f "$out"/junit-[abc].xml "$out"/lane-[bc].log "$out"/lane-b.ready
rm -rf "$out/faults"  # the fault matrix's rows (tests/helpers/faultrows.py)
export TORCHRUN_JSC_TESTS_STRICT=1 TORCHRUN_JSC_LAB_READY=$PWD/$out/lane-b.ready
export PATH=$PWD/tests/helpers/bin:$PATH
# The images the tests build are squashed with lz4, not the users' zstd (scripts/build-image.sh):
# the same code path; measured here, each torch process started from the image costs 0.5-0.7 s
# less CPU (zstd pages are decompressed again on every container's fresh mount) and a squash
# half the CPU, for images 40 % larger. On a 2-core run that is minutes (issue 42).
export COMPRESS=${COMPRESS:-lz4}
marks="not emulated and not scale and not matrix"
torch_oldest=${TORCH_OLDEST:-1.9.0}

TORCHRUN_JSC_LAB_LANE=b "$py" -m pytest -ra -p no:cacheprovider --junitxml="$out/junit-b.xml" \
    -m "lane_b and $marks" "$@" tests >"$out/lane-b.log" 2>&1 &
lane_b=$!
{
    rc=0
    bash scripts/torch-compat.sh "$torch_oldest" || rc=$?
    TORCHRUN_JSC_LAB_LANE=c "$py" -m pytest -ra -p no:cacheprovider --junitxml="$out/junit-c.xml" \
        -m "(lane_c or not ring3) and $marks" "$@" tests || rc=$?
    exit "$rc"
} >"$out/lane-c.log" 2>&1 &
lane_c=$!
trap 'kill "$lane_b" "$lane_c" 2>/dev/null' INT TERM
TORCHRUN_JSC_LAB_LANE=a "$py" -m pytest -ra --junitxml="$out/junit-a.xml" \
    -m "ring3 and not lane_b and not lane_c and $marks" "$@" tests
rc_a=$?
echo "test-lanes: lane a done (exit $rc_a); waiting for lanes c and b ($out/lane-[cb].log)"
wait "$lane_c"
rc_c=$?
echo "==== lane c: torch $torch_oldest, rings 1 and 2, the lab-free ring 3 ($out/lane-c.log) ===="
cat "$out/lane-c.log"
wait "$lane_b"
rc_b=$?
echo "==== lane b: the ring-3 tests that wait, on nodes of their own ($out/lane-b.log) ===="
cat "$out/lane-b.log"
echo "==== the fault matrix: the rows that passed (make test-faults runs them alone) ===="
python3 tests/helpers/faultrows.py "$out/faults"
echo "==== what the tests cost (all lanes) ===="
python3 tests/helpers/durations.py "$out/junit-a.xml" "$out/junit-b.xml" "$out/junit-c.xml"
echo "test-lanes: lane a exit $rc_a, lane b exit $rc_b, lane c exit $rc_c"
for rc in "$rc_a" "$rc_b" "$rc_c"; do
    [ "$rc" = 0 ] || exit "$rc"
done
exit 0
