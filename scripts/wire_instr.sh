#!/usr/bin/env bash
# Instructions per packet of the real stack (issue 13, part 2), counted by
# callgrind so the figures do not depend on machine load: a loopback
# `roce perf write_bw` of N 64 KiB WRITEs (default 2000: 16 packets each at
# the 4 KiB MTU), client and server threads counted apart.
#
#   client Ir/pkt: all of the client thread (posting, building, ICRC,
#                  sendmmsg's user side, ACK handling) over its packets out;
#   server Ir/pkt: all of the server thread over the client's packets out.
#   The ICRC and memcpy columns are what crc32fast and libc's memcpy took.
#
# Caveat: valgrind hides AVX-512, so crc32fast runs its 128-bit fold here
# (about 0.5 Ir a byte); on a machine with AVX-512 VPCLMULQDQ the real run
# uses the 512-bit fold, a fraction of that. Compare ICRC changes with
# `perf record` too.
#
# -t 4 keeps the window small enough that a receiver slowed down by
# valgrind does not overflow its socket buffer (retransmissions would add
# packets that are not the run's); the retransmitted count is printed.
#
# Usage: scripts/wire_instr.sh [ROCE_BINARY] [N]
#        (default: target/release/roce, built if missing). Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/roce}
n=${2:-2000}
if [ ! -x "$bin" ]; then
    cargo build --release -p roce >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$(valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/cg" \
    "$bin" perf write_bw --loopback -s 65536 -n "$n" -t 4 --no-profile 2>/dev/null)
pkts=$(sed -n 's/.*counters: \([0-9]*\) pkts out.*/\1/p' <<<"$out")
retx=$(sed -n 's/.* \([0-9]*\) retransmitted.*/\1/p' <<<"$out")
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
self_of() {
    callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null |
        awk -v f="$2" 'index($0, f) { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}
per() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a / b }'; }
echo "$n WRITEs of 64 KiB, $pkts packets out ($retx retransmitted)"
echo "| thread | Ir/pkt | ICRC (crc32fast) Ir/pkt | memcpy Ir/pkt |"
echo "|---|---:|---:|---:|"
# Thread 1 is the client (the main thread), thread 2 the server.
for t in 1 2; do
    f="$tmp/cg-0$t"
    name=$([ $t = 1 ] && echo client || echo server)
    echo "| $name | $(per "$(total "$f")" "$pkts") | $(per "$(self_of "$f" crc32fast::)" "$pkts") |" \
        "$(per "$(self_of "$f" __memcpy)" "$pkts") |"
done
