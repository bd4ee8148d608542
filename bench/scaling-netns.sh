#!/usr/bin/env bash
# The gradient reduction over a real network link, to see what overlapping it with backward hides: two
# ranks in two network namespaces joined by veth pairs and a bridge, every link shaped to RATE (tc tbf),
# gpt-small's training steps with the gradients in f32 or bf16 on the wire, overlapped with backward or
# sent after it. Needs root (ip netns, tc). Usage: bench/scaling-netns.sh [RATE [STEPS]]   (default 1gbit, 8)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
steps=${2:-8}
bin=$(pwd)/build/bin/mantissa
net=10.232.0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
cleanup() {
  for r in 0 1; do ip netns del mtsn$r 2>/dev/null || true; ip link del mtsh$r 2>/dev/null || true; done
  ip link del mtsbr 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip link add mtsbr type bridge && ip addr add $net.254/24 dev mtsbr && ip link set mtsbr up
for r in 0 1; do
  ip netns add mtsn$r
  ip link add mtsh$r type veth peer name mtsv$r
  ip link set mtsv$r netns mtsn$r && ip link set mtsh$r master mtsbr && ip link set mtsh$r up
  ip -n mtsn$r addr add $net.$((r + 1))/24 dev mtsv$r && ip -n mtsn$r link set mtsv$r up && ip -n mtsn$r link set lo up
  ip netns exec mtsn$r tc qdisc add dev mtsv$r root tbf rate "$rate" burst 256kb latency 50ms
done
fields() { python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(round(d.get(k,0),2)) for k in sys.argv[1:]))" "$@"; }
echo "gpt-small, 2 ranks in 2 namespaces, links shaped to $rate, $steps steps (medians)"
for variant in "--grad-reduce f32 --overlap off" "--grad-reduce f32 --overlap on" "--grad-reduce bf16 --overlap off" "--grad-reduce bf16 --overlap on"; do
  out=$(env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$net.0/24 \
    mpirun -np 2 --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 \
    sh -c 'exec ip netns exec mtsn$OMPI_COMM_WORLD_RANK "$0" "$@"' "$bin" \
    bench --model gpt-small --precisions fp32 --mode autocast --threads 1 --steps "$steps" --warmup 2 --json $variant |
    fields ms_per_step items_per_second comm_bytes_per_step comm_ms_per_step comm_exposed_ms_per_step)
  echo "$variant: ms/step tokens/s bytes/step gradient-thread-ms after-backward-ms = $out"
done
