#!/usr/bin/env bash
# roce perf against perftest's ib_* tools (write_bw, read_bw, send_bw, write_lat,
# send_lat, read_lat) over Linux rxe, both ways.
#
# Needs root, perftest (`apt-get install perftest`), the rdma_rxe module and
# iproute2's `rdma` tool. It makes a veth pair in two network namespaces:
# rxe0 on veth0 (10.77.0.1, namespace roce-ib) for ib_write_bw, and roce
# perf on veth1 (10.77.0.2, namespace roce-sw). Each side owns UDP 4791 in its
# own namespace, as perftest peers expect.
#
#   sudo scripts/perftest_interop.sh [path/to/roce]
#
# Status: written against perftest 6.29's exchange (src/perftest_communication.c
# and each test's main) and tested in CI only against stand-in perftest peers
# built from those bytes (crates/perf/tests/perftest_peer.rs). The machine it was written on has no
# rxe, so this script itself has NOT been run yet; run it where rxe exists and
# report what it prints.
set -euo pipefail
ROCE=${1:-target/release/roce}
SIZE=${SIZE:-65536}
ITERS=${ITERS:-2000}
[ "$(id -u)" = 0 ] || { echo "run as root (namespaces, rxe)"; exit 2; }
command -v ib_write_bw >/dev/null || { echo "perftest is missing: apt-get install perftest"; exit 2; }
command -v rdma >/dev/null || { echo "iproute2's rdma tool is missing"; exit 2; }
[ -x "$ROCE" ] || { echo "no roce binary at $ROCE (cargo build --release -p roce)"; exit 2; }
modprobe rdma_rxe

cleanup() {
  ip netns exec roce-ib rdma link delete rxe0 2>/dev/null || true
  ip netns del roce-ib 2>/dev/null || true
  ip netns del roce-sw 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add roce-ib
ip netns add roce-sw
ip link add veth0 netns roce-ib type veth peer name veth1 netns roce-sw
ip -n roce-ib addr add 10.77.0.1/24 dev veth0
ip -n roce-sw addr add 10.77.0.2/24 dev veth1
ip -n roce-ib link set veth0 up
ip -n roce-sw link set veth1 up
ip -n roce-ib link set lo up
ip -n roce-sw link set lo up
ip netns exec roce-ib rdma link add rxe0 type rxe netdev veth0
# rxe's GID table on an IPv4-only netdev: index 0 is the link-local default
# GID, index 1 the IPv4-mapped RoCEv2 GID roce needs (`ibv_devinfo -v`,
# `show_gids`).
GIDX=${GIDX:-1}
ip netns exec roce-ib ibv_devinfo -d rxe0 -v | grep -i gid || true

# Waits until namespace $1 listens on TCP 18515 (at most 10 s).
wait_listen() {
  for _ in $(seq 100); do
    ip netns exec "$1" ss -ltn | grep -q ':18515 ' && return 0
    sleep 0.1
  done
  echo "nothing listens on TCP 18515 in $1"; return 1
}

fail=0
# Every test whose perftest sequence roce follows (crates/perf/src/perftest.rs,
# `Steps`). The SEND servers count -n messages, so both sides get -n.
for t in ${TESTS:-write_bw read_bw send_bw write_lat send_lat read_lat}; do
  case $t in *_lat) sz=${LAT_SIZE:-64}; n=${LAT_ITERS:-1000};; *) sz=$SIZE; n=$ITERS;; esac
  echo "== ib_${t} server (rxe0), roce perf client"
  ip netns exec roce-ib "ib_${t}" -d rxe0 -x "$GIDX" -s "$sz" -n "$n" -F &
  srv=$!
  wait_listen roce-ib
  if ! ip netns exec roce-sw "$ROCE" perf "${t}" 10.77.0.1 -s "$sz" -n "$n"; then
    echo "FAILED: roce perf ${t} client against ib_${t}"; fail=1
  fi
  wait "$srv" || { echo "FAILED: ib_${t} server exited non-zero"; fail=1; }

  echo "== roce perf server, ib_${t} client (rxe0)"
  ip netns exec roce-sw "$ROCE" perf "${t}" -s "$sz" -n "$n" &
  srv=$!
  wait_listen roce-sw
  if ! ip netns exec roce-ib "ib_${t}" -d rxe0 -x "$GIDX" -s "$sz" -n "$n" -F 10.77.0.2; then
    echo "FAILED: ib_${t} client against roce perf"; fail=1
  fi
  wait "$srv" || { echo "FAILED: roce perf ${t} server exited non-zero"; fail=1; }
done

[ "$fail" = 0 ] && echo "OK: roce perf and the ib_* tools faced each other both ways"
exit "$fail"
