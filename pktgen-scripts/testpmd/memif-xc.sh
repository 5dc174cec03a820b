#!/usr/bin/env bash
# A memif cross-connect scenario with no NIC: dpdk-testpmd txonly → Quiver → dpdk-testpmd rxonly.
#
#   pktgen-scripts/testpmd/memif-xc.sh [SECONDS] [QUIVER_CORE] [TX_CORES] [RX_CORES]
#
# Quiver (built in release mode) runs ../quiver/memif-xc.toml: two memif masters on the abstract
# sockets @quiver-xc-a and @quiver-xc-b, cross-connected. One testpmd, a net_memif client on
# socket a, transmits 64 B frames as fast as it can (txonly); a second, a client on socket b,
# counts what arrives (rxonly). At the end both print their port counters and Quiver prints
# `show runtime` (clocks per packet per node) and its interface counters.
# Defaults: 10 seconds, Quiver on core 1, testpmds on cores 0 (main lcore) and 0 too — on a
# 2-core machine they share; give each its own cores on a bigger one, e.g. `10 2 4,5 6,7`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-10}
quiver_core=${2:-1}
tx_cores=${3:-0}
rx_cores=${4:-0}
testpmd=${TESTPMD:-dpdk-testpmd}

cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin quiver
quiver="${CARGO_TARGET_DIR:-$root/target}/release/quiver"
logs=$(mktemp -d)
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "logs in $logs"
}
pids=()
trap cleanup EXIT

"$quiver" run --config "$here/../quiver/memif-xc.toml" --cores "$quiver_core" \
  --duration $((seconds + 10)) >"$logs/quiver.log" 2>&1 &
pids+=($!)

# testpmd SIDE CORES FORWARD_MODE SOCKET: interactive testpmd fed from a FIFO, so the script can
# start forwarding, wait, and ask for the counters.
start_testpmd() {
  local side=$1 cores=$2 mode=$3 socket=$4
  mkfifo "$logs/$side.in"
  "$testpmd" --no-pci --in-memory --file-prefix="quiver-memif-xc-$side-$$" -l "$cores" \
    --vdev="net_memif0,role=client,id=0,socket=$socket,socket-abstract=yes" \
    --log-level=lib.eal:error -- -i --forward-mode="$mode" --txpkts=64 --burst=64 \
    <"$logs/$side.in" >"$logs/$side.log" 2>&1 &
  pids+=($!)
  exec {fd}>"$logs/$side.in"
  eval "fd_$side=$fd"
}
start_testpmd rx "$rx_cores" rxonly quiver-xc-b
start_testpmd tx "$tx_cores" txonly quiver-xc-a
sleep 2
echo start >&"$fd_rx"
echo start >&"$fd_tx"
echo "forwarding for $seconds s (logs: $logs)"
sleep "$seconds"
for side in tx rx; do
  fd_var="fd_$side"
  printf 'stop\nshow port stats all\nquit\n' >&"${!fd_var}"
done
sleep 2
kill -INT "${pids[0]}" 2>/dev/null || true
wait "${pids[0]}" 2>/dev/null || true
echo "== testpmd txonly (socket a)"; grep -E "TX-packets|RX-packets" "$logs/tx.log" | tail -2
echo "== testpmd rxonly (socket b)"; grep -E "RX-packets|RX-missed" "$logs/rx.log" | tail -2
echo "== quiver"; tail -40 "$logs/quiver.log"
