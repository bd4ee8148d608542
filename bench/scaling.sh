#!/usr/bin/env bash
# Data-parallel scaling on this machine (issue 17): training steps of the CNN and gpt-small with one rank,
# then two ranks (one thread each, so the comparison is fair: one core against two), each rank keeping the
# preset batch (the global batch doubles), with the gradients in f32 or bf16 on the wire and with the
# reduction overlapped with backward or after it. The control: two independent one-rank runs at once,
# which shows what two processes get from this machine's two cores with no communication at all. Runs
# alternate, ROUNDS times, to spread the machine's noise.
# Usage: bench/scaling.sh [STEPS [ROUNDS]]   (docs/performance.md has the figures)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
rounds=${2:-2}
bin=build/bin/mantissa
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
fields() { python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(round(d.get(k,0),2)) for k in sys.argv[1:]))" "$@"; }
for model in cnn gpt-small; do
  common="bench --model $model --precisions fp32 --mode autocast --threads 1 --steps $steps --warmup 3 --json"
  [ "$model" = cnn ] && common="$common --bucket-mb 0.125"  # 4 buckets of its 448 KB of gradients
  for round in $(seq "$rounds"); do
    one=$($bin $common | fields items_per_second)
    $bin $common > /tmp/scaling-a.json & $bin $common > /tmp/scaling-b.json; wait
    pair=$(python3 -c "import json; print(round(sum(json.load(open(f))['items_per_second'] for f in ['/tmp/scaling-a.json', '/tmp/scaling-b.json']), 1))")
    echo "$model round $round: 1 rank $one items/s; two independent 1-rank runs at once: $pair items/s together (x$(python3 -c "print(round($pair / $one, 3))"))"
    for variant in "--grad-reduce f32 --overlap on" "--grad-reduce bf16 --overlap on" "--grad-reduce f32 --overlap off"; do
      read -r ips bytes buckets comm exposed < <(mpirun -np 2 $bin $common $variant |
        fields items_per_second comm_bytes_per_step comm_buckets comm_ms_per_step comm_exposed_ms_per_step)
      echo "$model round $round: 2 ranks $variant: $ips items/s (x$(python3 -c "print(round($ips / $one, 3))") of 1 rank)," \
           "$bytes bytes sent per step per rank in $buckets buckets, gradient thread $comm ms, $exposed ms after backward"
    done
  done
done
rm -f /tmp/scaling-a.json /tmp/scaling-b.json
