#!/usr/bin/env bash
# benchmarks/sweep_truth's population measured by PROCS processes that share this machine (and its
# GPU: pass --device cuda), each claiming the next model; after SECONDS the processes still running
# are stopped (the models they held stay unmeasured), and the tables are printed from what was judged.
#
#   benchmarks/sweep_truth_parallel.sh 12 420 --device cuda --models 10     # the H200 run in docs/screening.md
set -u
procs=$1 seconds=$2
shift 2
python=${PYTHON:-python3}
logs=${LOGS:-$(mktemp -d)}
started=$(date +%s)
pids=()
for i in $(seq "$procs"); do
    OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 "$python" -m benchmarks.sweep_truth --measure "$@" >"$logs/measure-$i.log" 2>&1 &
    pids+=($!)
    sleep 2  # the first claims its model before the next looks
done
while (( $(date +%s) - started < seconds )) && kill -0 "${pids[@]}" 2>/dev/null; do
    sleep 5
done
kill "${pids[@]}" 2>/dev/null
wait
echo "measured for $(( $(date +%s) - started )) s with $procs processes; logs in $logs"
cat "$logs"/measure-*.log | grep -v "^ *$" | sort | uniq -c | sort -rn | head -60
# the tables take every model measured; --models caps how many per dataset are read
"$python" -m benchmarks.sweep_truth --tables "$@"
