#!/usr/bin/env bash
# Builds `roce` with profile-guided optimization (PGO).
#
#   scripts/pgo_build.sh            # -> target/pgo/roce
#
# An instrumented build runs a training set (the shipped 320-host HPCC
# fat5ms configs in every CC mode, run in full, the k=32 fat tree cut at
# 300 us and the incast scenarios: the runs we time), then the release
# build is compiled again with
# the measured branch and call counts, so LLVM lays out and inlines the
# simulator's event loop for the paths it really takes. The binary computes
# exactly what the plain release build computes (same outputs, bit for bit);
# it is only faster. `cargo build --release` stays the default build: a
# profile is tied to the compiler's LLVM version and to the code it was
# taken from, so it is made here, fresh, never committed.
#
# Measured (session 23, 2 shared cores, 10 interleaved pairs each, ratio of
# median user s PGO/release): fat5ms HPCC 0.84, fat5ms DCQCN 0.92, k=32 cut
# at 300 us 0.96; callgrind Ir config_fat_hpcc 13,770 M against 14,592 M,
# config_fat_dcqcn 11,716 M against 12,533 M. Session 38 (main 2499710, an
# idle machine, three rounds each beside ns-3: `scripts/hpcc_compare.py
# run --also pgo=target/pgo/roce`): fat5ms DCQCN 0.94, HPCC 0.95, PFC-only
# 0.95 of the release build's wall time, the outputs identical. The script takes ~13.5 min
# wall on a loaded 2-core machine from scratch (~4 min when the instrumented
# build is still cached): two fat-LTO release builds and 50-75 s of
# training runs.
#
# Dead end, measured: BOLT on top of PGO (link with `-Wl,--emit-relocs`,
# llvm-bolt from Debian's bolt-16) gave no gain over PGO alone.
#
# Needs the toolchain's llvm-profdata: `rustup component add llvm-tools`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "pgo_build: $profdata is missing; install it with: rustup component add llvm-tools" >&2
  exit 2
fi
work=$root/target/pgo
rm -rf "$work/raw" "$work/train"
mkdir -p "$work/raw" "$work/train"

echo "pgo_build: instrumented build" >&2
# `--target` keeps build scripts and proc macros uninstrumented.
RUSTFLAGS="-Cprofile-generate=$work/raw" \
  cargo build --release -p roce --target "$host" --target-dir "$work/gen"
gen=$work/gen/$host/release/roce

echo "pgo_build: training runs" >&2
t0=$SECONDS
hp=$root/scenarios/hpcc
for mode in dcqcn hpcc pfc; do
  # The full fat5ms configs (a profile of a cut run under-weights the
  # congested phase); every file path made absolute.
  sed -e "s#^TOPOLOGY_FILE .*#TOPOLOGY_FILE $hp/topo_fat320.txt#" \
    -e "s#^FLOW_FILE .*#FLOW_FILE $hp/fat5ms/flow_websearch_fat320_5ms.txt#" \
    -e "s#^TRACE_FILE .*#TRACE_FILE $hp/trace.txt#" \
    "$hp/fat5ms/config_fat5ms_$mode.txt" >"$work/train/fat_$mode.txt"
  (cd "$work/train" && "$gen" sim --hpcc-config "fat_$mode.txt" --no-plots --out "out_$mode" >/dev/null 2>&1)
done
# TOML scenarios cut short, their workload files made absolute.
cut() { # scenario stop_us
  sed -e "s#^seed = \\(.*\\)#seed = \\1\\nstop_us = $2#" \
    -e "s#cdf = \"workloads/#cdf = \"$root/scenarios/workloads/#" \
    "$root/scenarios/$1.toml" >"$work/train/$1.toml"
  "$gen" sim "$work/train/$1.toml" --no-plots --out "$work/train/out_$1" >/dev/null
}
cut fattree_k32_websearch 300
for s in incast_dcqcn incast_hpcc incast_host_pcie; do
  "$gen" sim "$root/scenarios/$s.toml" --no-plots --out "$work/train/out_$s" >/dev/null
done

echo "pgo_build: training took $((SECONDS - t0)) s" >&2
"$profdata" merge -o "$work/roce.profdata" "$work/raw"

echo "pgo_build: optimized build" >&2
RUSTFLAGS="-Cprofile-use=$work/roce.profdata" \
  cargo build --release -p roce --target "$host" --target-dir "$work/use"
cp "$work/use/$host/release/roce" "$work/roce"
echo "$work/roce"
