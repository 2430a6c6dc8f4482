#!/usr/bin/env bash
# Instructions per packet of each congestion controller (issue 10,
# "Performance"), counted by callgrind so the figures do not depend on
# machine load. Runs the `cc` bench binary of roce-rnic in its `--instr`
# mode (see crates/rnic/benches/cc.rs for what is measured):
#
#   mix: the controller alone on a synthetic bottleneck; Ir inside each path
#        function (tx_path, ack_path, cnp_path, timer_path) divided by its calls;
#   e2e: two RNICs on a Pair moving 64 KiB WRITEs; Ir per data packet.
#
# Usage: scripts/cc_instr.sh [CONTROLLER...]   (default: all; the first is
# the baseline of the "vs" column, so list `none` first)
# Output: one markdown table on stdout. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."

all=(none fixed dcqcn-paper dcqcn-connectx dcqcn-hpcc-ns3 hpcc timely timely-hpcc-ns3
     dctcp-rate dctcp-window swift)
if [ $# -gt 0 ]; then ctrls=("$@"); else ctrls=("${all[@]}"); fi

bin=$(cargo bench -p roce-rnic --bench cc --no-run --message-format=json 2>/dev/null |
      sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | grep '/cc-' | tail -1)
[ -x "$bin" ] || { echo "cc bench binary not found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Ir of the region a run collected (callgrind's "totals:" line).
totals() { sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$1"; }
# Inclusive Ir of the function whose name contains $2.
incl() {
    callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v f="$2" '!done && index($0, f) { gsub(",", "", $1); print $1; done = 1 }'
}
# Self Ir of the controllers' own code (functions of roce_rnic::cc, less
# the RNIC's RTT bookkeeping in cc::sample and the parameter parsing).
cc_self() {
    callgrind_annotate --auto=no --inclusive=no --threshold=100 "$1" 2>/dev/null |
        awk '/roce_rnic::cc::/ && !/cc::sample::/ && !/cc::params::/ { gsub(",", "", $1); s += $1 }
             END { print s + 0 }'
}
# a / b with one decimal, "-" when b is 0.
div() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b == 0) print "-"; else printf "%.1f", a / b }'; }
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2"; }

echo "| controller | tx Ir/pkt | ACK Ir/ACK | CNP Ir/CNP | timer Ir/tick | mix CC Ir/pkt | e2e Ir/pkt | e2e vs ${ctrls[0]} | e2e CC-code Ir/pkt |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
base=""
for c in "${ctrls[@]}"; do
    out=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/mix.$c" --collect-atstart=no \
        --toggle-collect='*mix_measured*' "$bin" --instr mix "$c" 2>/dev/null)
    pkts=$(field pkts "$out")
    tx=$(incl "$tmp/mix.$c" "cc::tx_path ["); ack=$(incl "$tmp/mix.$c" "cc::ack_path [")
    cnp=$(incl "$tmp/mix.$c" "cc::cnp_path ["); tim=$(incl "$tmp/mix.$c" "cc::timer_path [")
    sum=$(( ${tx:-0} + ${ack:-0} + ${cnp:-0} + ${tim:-0} ))
    e=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/e2e.$c" --collect-atstart=no \
        --toggle-collect='*e2e_measured*' "$bin" --instr e2e "$c" 2>/dev/null)
    epk=$(field pkts "$e")
    eir=$(div "$(totals "$tmp/e2e.$c")" "$epk")
    [ -n "$base" ] || base=$eir
    ratio=$(awk -v a="$eir" -v b="$base" 'BEGIN { printf "%.3f", a / b }')
    echo "| $c | $(div "$tx" "$(field tx "$out")") | $(div "$ack" "$(field ack "$out")") |" \
         "$(div "$cnp" "$(field cnp "$out")") | $(div "$tim" "$(field timer "$out")") |" \
         "$(div "$sum" "$pkts") | $eir | $ratio | $(div "$(cc_self "$tmp/e2e.$c")" "$epk") |"
done
