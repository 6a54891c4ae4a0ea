#!/bin/sh
# sim/break_test.sh SIM NAME SEEDS REGEX: runs the simulator with the
# test-only breakage NAME over seeds 1..SEEDS, stopping at the first
# failure, and passes only when it failed (exit code != 0) naming an
# invariant that matches REGEX: the invariants catch the breakage within a
# bounded number of seeds.
sim=$1 name=$2 seeds=$3 regex=$4
out=$("$sim" --break "$name" --seeds "1-$seeds" --stop-on-fail --quiet)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
    echo "break $name: no invariant failed within $seeds seeds"
    exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq "FAILED ($regex):"; then
    echo "break $name: the failure does not name $regex"
    exit 1
fi
echo "break $name: caught"
