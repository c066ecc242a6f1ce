#!/bin/bash
# UCX transport vs UCX itself and vs our tcp, between two network namespaces joined by a veth:
# (a) sendrecv_perf 2 ranks COLL_NET=ucx vs `ucx_perftest -t tag_bw` at 4 MiB and 64 MiB (both
# UCX_TLS=tcp); (b) allreduce_perf busbw at 64 MiB COLL_NET=ucx vs COLL_NET=tcp. Alternated ROUNDS
# times; medians and ratios printed, raw output kept. Needs root.
# sendrecv_perf with 2 ranks sends both ways at once (busbw = bytes per second per direction), so
# its reference is tag_bw run both ways at once (two ucx_perftest pairs, mean of the two rates);
# tag_bw one way only is printed beside it for scale.
# On a 2-core machine the four busy-polling ucx_perftest processes of the both-ways reference
# share two cores, as our two ranks do; iteration counts make each run last about a second so the
# two reference pairs overlap.
# usage: bench/compare_ucx.sh      (env: BUILD, ROUNDS=5, ITERS=20: iterations at 64 MiB, x16 at 4 MiB,
#        VARIANTS: other settings of ours run beside the default in every round, against the same
#        references, "NAME:VAR=VALUE,VAR=VALUE NAME2:..." e.g. "eager:COLL_UCX_PROTOCOL=eager";
#        BUILD=DIR in a variant runs that build's binaries, e.g. "branch:BUILD=/tmp/wt/build")
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
ITERS=${ITERS:-20}
VARIANTS=${VARIANTS:-}
SENDRECV=$BUILD/bench/sendrecv_perf
need "$COLLRUN" "$PERF" "$SENDRECV" "$BUILD/bench/collinfo"
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not installed (Debian: ucx-utils)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)" >&2; exit 2; }

netns_pair cux 198.18.13

export COLL_SOCKET_IFNAME=cux UCX_TLS=tcp COLL_UCX_TLS=tcp
# ucx_perftest gets, as UCX_* variables, the settings our transport gives UCX by default
# (COLL_UCX_CONFIG=TX_SEG_SIZE=2M;RX_SEG_SIZE=2M;SNDBUF=4M;RCVBUF=4M): both run UCX's tcp
# configured alike. The raw output directory records the settings (ucx-env.txt).
PT_ENV=(UCX_TCP_TX_SEG_SIZE=2M UCX_TCP_RX_SEG_SIZE=2M UCX_TCP_SNDBUF=4M UCX_TCP_RCVBUF=4M)
iters() { echo $((ITERS * 67108864 / $1)); }  # iters SIZE: the same bytes per run at every size
EXTRA_ENV=()  # a variant's settings (VARIANTS)
VARIANT_BUILD=$BUILD  # a variant's build (BUILD=DIR in VARIANTS)
ours() {  # ours NET PERF SIZE OUT (PERF names a binary of $BUILD; a variant's build runs its own)
  env "${EXTRA_ENV[@]}" COLL_NET=$1 "$VARIANT_BUILD/bench/collrun" -np 2 --netns "$NS_A,$NS_B" --timeout 600 \
    "$VARIANT_BUILD/bench/$(basename "$2")" -b "$3" -e "$3" -d float -o sum -n "$(iters "$3")" -w 5 -c 0 >"$4" 2>&1
}
variants() {  # variants PERF SIZE PREFIX SUFFIX: ours over ucx once per VARIANTS entry, output PREFIX@NAME SUFFIX
  local v setting
  for v in $VARIANTS; do
    IFS=, read -r -a settings <<<"${v#*:}"
    for setting in "${settings[@]}"; do
      case $setting in
        BUILD=*) VARIANT_BUILD=${setting#BUILD=}; need "$VARIANT_BUILD/bench/collrun" ;;
        *) EXTRA_ENV+=("$setting") ;;
      esac
    done
    ours ucx "$1" "$2" "$out/$3@${v%%:*}$4"
    EXTRA_ENV=() VARIANT_BUILD=$BUILD
  done
}
perftest() {  # perftest SIZE OUT: one way (B -> A)
  ip netns exec "$NS_A" env "${PT_ENV[@]}" ucx_perftest -p 13410 -t tag_bw -s "$1" -n "$(iters "$1")" -w 5 >"$2.server" 2>&1 &
  local server=$!
  sleep 0.5
  ip netns exec "$NS_B" env "${PT_ENV[@]}" ucx_perftest 198.18.13.1 -p 13410 -t tag_bw -s "$1" -n "$(iters "$1")" -w 5 >"$2" 2>&1 || true
  wait "$server" || true
}
perftest_bidir() {  # perftest_bidir SIZE OUT: B -> A and A -> B at once (OUT.ab, OUT.ba)
  ip netns exec "$NS_A" env "${PT_ENV[@]}" ucx_perftest -p 13411 -t tag_bw -s "$1" -n "$(iters "$1")" -w 5 >"$2.server-a" 2>&1 &
  local sa=$!
  ip netns exec "$NS_B" env "${PT_ENV[@]}" ucx_perftest -p 13412 -t tag_bw -s "$1" -n "$(iters "$1")" -w 5 >"$2.server-b" 2>&1 &
  local sb=$!
  sleep 0.5
  ip netns exec "$NS_B" env "${PT_ENV[@]}" ucx_perftest 198.18.13.1 -p 13411 -t tag_bw -s "$1" -n "$(iters "$1")" -w 5 >"$2.ba" 2>&1 &
  local ca=$!
  ip netns exec "$NS_A" env "${PT_ENV[@]}" ucx_perftest 198.18.13.2 -p 13412 -t tag_bw -s "$1" -n "$(iters "$1")" -w 5 >"$2.ab" 2>&1 || true
  wait "$ca" "$sa" "$sb" || true
}

out=$(results_dir compare_ucx)
{ env | grep -E "^UCX_|^COLL_" | sort; echo "COLL_UCX_CONFIG default: $("$BUILD/bench/collinfo" | awk '$1 == "COLL_UCX_CONFIG" { print $3 }')"; echo "ucx_perftest: ${PT_ENV[*]}"; } >"$out/ucx-env.txt"
echo "compare_ucx: $ROUNDS rounds, ITERS=$ITERS, UCX_TLS=tcp between two namespaces; raw output in $out"
progress_start "$ROUNDS"
for ((round = 1; round <= ROUNDS; ++round)); do
  for size in 4194304 67108864; do
    ours ucx "$SENDRECV" "$size" "$out/sendrecv-ucx-$size-r$round.txt"
    variants "$SENDRECV" "$size" sendrecv-ucx "-$size-r$round.txt"
    perftest_bidir "$size" "$out/perftest-bidir-$size-r$round.txt"
    perftest "$size" "$out/perftest-$size-r$round.txt"
  done
  ours ucx "$PERF" 67108864 "$out/allreduce-ucx-r$round.txt"
  variants "$PERF" 67108864 allreduce-ucx "-r$round.txt"
  ours tcp "$PERF" 67108864 "$out/allreduce-tcp-r$round.txt"
  progress "round $round of $ROUNDS"
done

# perftest's Final line: bandwidth overall in MB/s (2^20 bytes) is field 7; ours in GB/s from the
# time column (with 2 ranks busbw = algbw for both sendrecv and All-Reduce: 2(n-1)/n = 1).
perf_gbps() { awk '/^Final:/ { printf "%.4f\n", $7 * 1048576 / 1e9 }' "$1"; }
{
  echo "| measurement | ours (median GB/s) | reference (median GB/s) | ratio |"
  echo "|---|---|---|---|"
  for size in 4194304 67108864; do
    o=$(for f in "$out"/sendrecv-ucx-$size-r*.txt; do algbw "$f" "$size"; done | median)
    r=$(for f in "$out"/perftest-bidir-$size-r*.txt.ab; do
          a=$(perf_gbps "$f"); b=$(perf_gbps "${f%.ab}.ba")
          awk -v a="${a:-nan}" -v b="${b:-nan}" 'BEGIN { if (a == "nan" || b == "nan") print "nan"; else printf "%.4f\n", (a + b) / 2 }'
        done | median)
    one=$(for f in "$out"/perftest-$size-r*.txt; do perf_gbps "$f"; done | median)
    echo "| sendrecv_perf COLL_NET=ucx (both ways) vs ucx_perftest tag_bw both ways at once, $((size >> 20)) MiB | $o | $r | $(ratio "$o" "$r") |"
    echo "| sendrecv_perf COLL_NET=ucx (both ways) vs ucx_perftest tag_bw one way, $((size >> 20)) MiB | $o | $one | $(ratio "$o" "$one") |"
    for v in $VARIANTS; do
      o=$(for f in "$out"/sendrecv-ucx@${v%%:*}-$size-r*.txt; do algbw "$f" "$size"; done | median)
      echo "| sendrecv_perf COLL_NET=ucx ${v#*:} vs tag_bw both ways at once, $((size >> 20)) MiB | $o | $r | $(ratio "$o" "$r") |"
    done
  done
  o=$(for f in "$out"/allreduce-ucx-r*.txt; do algbw "$f" 67108864; done | median)
  r=$(for f in "$out"/allreduce-tcp-r*.txt; do algbw "$f" 67108864; done | median)
  echo "| allreduce_perf busbw 64 MiB, COLL_NET=ucx vs COLL_NET=tcp | $o | $r | $(ratio "$o" "$r") |"
  for v in $VARIANTS; do
    o=$(for f in "$out"/allreduce-ucx@${v%%:*}-r*.txt; do algbw "$f" 67108864; done | median)
    echo "| allreduce_perf busbw 64 MiB, COLL_NET=ucx ${v#*:} vs COLL_NET=tcp | $o | $r | $(ratio "$o" "$r") |"
  done
  # The machine's speed drifts between rounds; a ratio within each round is paired against that.
  echo
  for name in "" $(for v in $VARIANTS; do echo "@${v%%:*}"; done); do
    rs=$(for ((round = 1; round <= ROUNDS; ++round)); do
           ratio "$(algbw "$out/allreduce-ucx$name-r$round.txt" 67108864)" "$(algbw "$out/allreduce-tcp-r$round.txt" 67108864)"
         done)
    echo "All-Reduce ucx${name:+ $name} / tcp per round: $(echo $rs) (median $(echo "$rs" | tr ' ' '\n' | median))"
  done
} | tee "$out/summary.md"
