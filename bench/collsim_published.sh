#!/bin/bash
# collsim against published figures: reruns every collsim command of the side-by-side in
# docs/PERFORMANCE.md ("The simulator against published figures") and prints its table.
# The published values are constants below, each with its source; nothing here measures hardware.
#   1. NVIDIA, "Massively Scale Your Deep Learning Training with NCCL 2.4" (S. Jeaugey, 2019), figure 3
#      and its text: double binary trees up to 180x lower All-Reduce latency than rings at 24,576 GPUs
#      on Summit (6 V100 per node, dual-rail EDR InfiniBand, non-blocking fat-tree).
#   2. stas00/ml-engineering, network/README.md, "Inter-node speed depends on intra-node speed":
#      all_reduce busbw on 1x and 4x AWS P6-B200 (8 B200 per node, NVLink 5 900 GB/s, 8x 50 GB/s EFA).
#   3. NVIDIA/nccl issue 812 (A. Laddy, NVIDIA): DGX-A100 with 8x 200 Gbit/s IB measures 192 GB/s
#      All-Reduce busbw; NVIDIA/nccl issue 946 (S. Jeaugey): on 2 nodes the tree can go up to ~2x
#      the network speed (compared here with the ring's busbw).
# usage: bench/collsim_published.sh   (env: COLLSIM=build/bench/collsim, relative to the repo root)
# About 12 s; the 24,576-rank tree runs exactly (every rank), the 24,576-rank ring by symmetry.
set -euo pipefail
cd "$(dirname "$0")/.."
SIM=${COLLSIM:-build/bench/collsim}
[ -x "$SIM" ] || { echo "collsim_published: $SIM not built (cmake --build build --target collsim)" >&2; exit 1; }

# sim FIELD ARGS...: one collsim run at one size; prints time(us) (FIELD=time), busbw (GB/s) (FIELD=busbw)
# or the algorithm (FIELD=algo) of its single table row
sim() {
  local field=$1
  shift
  local out row
  out=$("$SIM" -c all_reduce "$@" 2>&1) || { echo "$out" >&2; return 1; }
  row=$(awk '/^ +[0-9]/ {print $4, $6, $9; exit}' <<<"$out")
  [ -n "$row" ] || { echo "collsim_published: no result from $SIM $*" >&2; echo "$out" >&2; return 1; }
  case $field in
    time) echo "${row%% *}" ;;
    busbw) awk '{print $2}' <<<"$row" ;;
    algo) awk '{print $3}' <<<"$row" ;;
  esac
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
ratio0() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a / b }'; }
row() { printf "| %s | %s | %s | %s | %s |\n" "$@"; }

echo "| figure (setup) | published | collsim | collsim / published | collsim run |"
echo "|---|---:|---:|---:|---|"

# 1. Summit: 24,576 GPUs = 4,096 nodes x 6; per-GPU share of the node's 2x 100 Gbit/s EDR = 4.17 GB/s
#    (irrelevant at 8 bytes); collsim's default alphas (1 us inside a node, 5 us across).
SUMMIT=(-n 24576 -g 6 --nic 4.17 --intra 50 --fabric fattree3 -b 8 -e 8)
ring=$(sim time "${SUMMIT[@]}" --algo ring)
tree=$(sim time "${SUMMIT[@]}" --algo tree)
r=$(ratio0 "$ring" "$tree")
row "NCCL 2.4 fig. 3: ring / tree latency, 24,576 GPUs (8 B)" "180×" "${r}× (${ring} / ${tree} us)" "$(ratio "$r" 180)" "ring, tree; α 1 / 5 us"
for ae in 2 10; do
  ring=$(sim time "${SUMMIT[@]}" --alpha-inter "$ae" --algo ring)
  tree=$(sim time "${SUMMIT[@]}" --alpha-inter "$ae" --algo tree)
  r=$(ratio0 "$ring" "$tree")
  row "same, inter-node α = $ae us" "180×" "${r}× (${ring} / ${tree} us)" "$(ratio "$r" 180)" "ring, tree; --alpha-inter $ae"
done

# 2. P6-B200: 8 ranks per node, NIC 50 GB/s per rank, NVLink 900 GB/s per rank, one leaf (nonblocking).
B200=(-g 8 --nic 50 --intra 900 --fabric nonblocking)
for size in 4G 16G; do
  pub=$([ "$size" = 4G ] && echo 377.34 || echo 381.80)
  bw=$(sim busbw "${B200[@]}" -n 32 -b "$size" -e "$size" --algo hier)
  row "ml-engineering: 4 x 8 B200, busbw at ${size%G} GiB" "$pub GB/s" "$bw GB/s" "$(ratio "$bw" "$pub")" "hier(inter=ring)"
done
bw=$(sim busbw "${B200[@]}" -n 32 -b 4G -e 4G)
algo=$(sim algo "${B200[@]}" -n 32 -b 4G -e 4G)
row "same, 4 GiB, the planner's choice" "377.34 GB/s" "$bw GB/s" "$(ratio "$bw" 377.34)" "$algo"
bw=$(sim busbw "${B200[@]}" -n 32 -b 4G -e 4G --algo ring)
row "same, 4 GiB, one flat ring" "377.34 GB/s" "$bw GB/s" "$(ratio "$bw" 377.34)" "ring"
t=$(sim time "${B200[@]}" -n 32 -b 4G -e 4G --algo ring)
row "same, the source's flat-ring arithmetic (4 GiB)" "166.4 ms" "$(awk -v t="$t" 'BEGIN { printf "%.1f ms", t / 1000 }')" "$(ratio "$t" 166400)" "ring"
bw=$(sim busbw "${B200[@]}" -n 8 -b 4G -e 4G --algo ring)
row "ml-engineering: 1 x 8 B200, busbw at 4 GiB" "740.64 GB/s" "$bw GB/s" "$(ratio "$bw" 740.64)" "ring"
bw=$(sim busbw "${B200[@]}" -n 8 -b 4G -e 4G)
algo=$(sim algo "${B200[@]}" -n 8 -b 4G -e 4G)
row "same, the planner's choice" "740.64 GB/s" "$bw GB/s" "$(ratio "$bw" 740.64)" "$algo"

# 3. DGX-A100: 8 ranks per node, 8x 200 Gbit/s IB = 25 GB/s per rank, NVLink 3 300 GB/s per rank.
A100=(-g 8 --nic 25 --intra 300 --fabric nonblocking -b 8G -e 8G)
for nodes in 2 16; do
  bw=$(sim busbw "${A100[@]}" -n $((nodes * 8)) --algo hier)
  row "nccl#812: DGX-A100 busbw, $nodes nodes (8 GiB)" "192 GB/s" "$bw GB/s" "$(ratio "$bw" 192)" "hier(inter=ring)"
done
bw=$(sim busbw "${A100[@]}" -n 128 --algo ring)
row "same, 16 nodes, one flat ring" "192 GB/s" "$bw GB/s" "$(ratio "$bw" 192)" "ring"
ring=$(sim busbw "${A100[@]}" -n 16 --algo ring)
tree=$(sim busbw "${A100[@]}" -n 16 --algo tree)
r=$(ratio "$tree" "$ring")
row "nccl#946: tree / ring busbw on 2 nodes" "~2×" "${r}× (${tree} / ${ring} GB/s)" "$(ratio "$r" 2)" "tree, ring"

# The numbers the text quotes beside the table.
echo
echo "ring / tree latency at 8 B by scale (6 GPUs per node, α 1 / 5 us):"
for n in 96 768 6144 24576; do
  ring=$(sim time "${SUMMIT[@]/24576/$n}" --algo ring)
  tree=$(sim time "${SUMMIT[@]/24576/$n}" --algo tree)
  echo "  $n GPUs: ring $ring us, tree $tree us, ratio $(ratio0 "$ring" "$tree")x"
done
t=$(sim time "${SUMMIT[@]}" --mode exact)
echo "planner's choice at 24,576 GPUs, 8 B (exact): $(sim algo "${SUMMIT[@]}" --mode exact), $t us"
echo "1 x 8 B200, 4 GiB, --mem 4000: planner's choice $(sim algo "${B200[@]}" -n 8 -b 4G -e 4G --mem 4000)," \
  "busbw $(sim busbw "${B200[@]}" -n 8 -b 4G -e 4G --mem 4000) GB/s (one host's direct copies are charged to --mem, not to NVLink)"
