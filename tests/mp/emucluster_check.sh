#!/bin/bash
# Real runs on an emulated cluster (bench/emucluster): every All-Reduce algorithm forced in turn
# (and the planner's own choice) must give exact results across nodes; direct must be refused.
# usage: emucluster_check.sh EMUCLUSTER COLLRUN MP_ALLREDUCE_CHECK MP_COLLECTIVES_CHECK SPLIT
#   SPLIT: ranks per node, e.g. 2,2,2,2 (4 nodes x 2) or 3,3,2 (uneven). Root; exit 77 = skipped.
#   SPLIT "tool" checks emucluster itself: placement, status, the rate limit as iperf3 sees it,
#   refusals, and that down and a failed up leave no namespace behind.
#   EMU_ALGOS (default "ring tree recdoubling rabenseifner torus hier") and EMU_ALGO_FORMAT (default
#   "allreduce:%s", the COLL_ALGO value for one algorithm) narrow or adapt the run.
set -u
EMUCLUSTER=${1:?usage: emucluster_check.sh EMUCLUSTER COLLRUN MP_ALLREDUCE_CHECK MP_COLLECTIVES_CHECK SPLIT}
COLLRUN=${2:?collrun missing}
AR_CHECK=${3:?mp_allreduce_check missing}
COLL_CHECK=${4:?mp_collectives_check missing}
SPLIT=${5:?ranks per node missing, e.g. 2,2,2,2}
ALGOS=${EMU_ALGOS:-ring tree recdoubling rabenseifner torus hier}
ALGO_FORMAT=${EMU_ALGO_FORMAT:-allreduce:%s}

skip() {
  echo "=================================================================="
  echo "SKIP: emucluster_check $SPLIT: $* (needs root and 'ip netns'; not a failure)"
  echo "=================================================================="
  exit 77
}

# The tool on its own: cheap checks of what the runs below rely on.
toolCheck() {
  local name=emuchk$$_tool bad=0 out
  trap '"$EMUCLUSTER" down "$name" >/dev/null 2>&1' EXIT
  fail() { echo "FAIL: $*"; bad=$((bad + 1)); }
  leftovers() { ip netns list | awk '{ print $1 }' | grep -E "^$name-" | tr '\n' ' '; }
  "$EMUCLUSTER" up "bad-name" 2 --no-measure >/dev/null 2>&1 && fail "a name with '-' was accepted"
  "$EMUCLUSTER" up "$name" 2 --rate fast --no-measure >/dev/null 2>&1 && fail "--rate fast was accepted"
  "$EMUCLUSTER" up "$name" 2 --subnet 10.0.0 --no-measure >/dev/null 2>&1 && fail "a subnet outside 198.18.0.0/15 was accepted"
  [ -z "$(leftovers)" ] || fail "refused up left namespaces: $(leftovers)"
  # 200 Mbit/s: far below what a veth does here, so the limit (not the CPU) sets the rate.
  out=$("$EMUCLUSTER" up "$name" 3 --rate 200mbit 2>&1)
  local rc=$?
  [ $rc = 77 ] && skip "cannot create network namespaces here"
  echo "$out"
  [ $rc = 0 ] || { fail "emucluster up $name 3 --rate 200mbit exited with $rc"; return 1; }
  if command -v iperf3 >/dev/null; then
    local n=0 rate
    for rate in $(grep -Eo '(up|down) [0-9]+ Mbit/s' <<<"$out" | awk '{ print $2 }'); do
      n=$((n + 1))
      # tbf lets a burst through and TCP needs a moment: a wide window, but it must be the limit.
      [ "$rate" -ge 100 ] && [ "$rate" -le 215 ] || fail "a link measured $rate Mbit/s under a 200mbit limit"
    done
    [ $n = 6 ] || fail "expected 6 link measurements (3 nodes, up and down), got $n"
  else
    echo "note: iperf3 not installed, rate not measured"
  fi
  "$EMUCLUSTER" up "$name" 3 --no-measure >/dev/null 2>&1 && fail "a second up of the same name was accepted"
  out=$("$EMUCLUSTER" status "$name")
  echo "$out"
  [ "$(grep -c 'UP, rate 200Mbit' <<<"$out")" = 3 ] || fail "status does not show 3 nodes up at 200Mbit"
  out=$("$EMUCLUSTER" placement "$name" --ranks-per-node 2,0,3)
  [ "$out" = "$name-0,$name-0,$name-2,$name-2,$name-2" ] || fail "block placement 2,0,3 gave $out"
  out=$("$EMUCLUSTER" placement "$name" --ranks-per-node 2,1,2 --cyclic)
  [ "$out" = "$name-0,$name-1,$name-2,$name-0,$name-2" ] || fail "cyclic placement 2,1,2 gave $out"
  "$EMUCLUSTER" placement "$name" --ranks-per-node 1,1 >/dev/null 2>&1 && fail "2 counts for 3 nodes were accepted"
  # A job in the cluster: collrun places one rank per node; each sees its own node's address.
  out=$("$EMUCLUSTER" run "$name" --timeout 30 -- sh -c 'ip -4 -o addr show | grep -o "emu[0-9]* *inet [0-9.]*"' 2>&1)
  [ "$(grep -c 'emu[0-9]' <<<"$out")" = 3 ] || fail "run did not place one rank on each node: $out"
  "$EMUCLUSTER" down "$name" || fail "down exited non-zero"
  "$EMUCLUSTER" down "$name" || fail "a second down exited non-zero"
  [ -z "$(leftovers)" ] || fail "down left namespaces: $(leftovers)"
  "$EMUCLUSTER" status "$name" >/dev/null && fail "status says up after down"
  # Interrupted while coming up: everything made so far goes again.
  # (100 nodes take a few seconds to make, so the signal lands midway.)
  "$EMUCLUSTER" up "$name" 100 --no-measure >/dev/null 2>&1 &
  local pid=$!
  sleep 0.5
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  if [ $rc = 0 ]; then
    echo "note: up of 100 nodes finished before the TERM; interruption not checked"
    "$EMUCLUSTER" down "$name"
  elif [ $rc != 143 ]; then
    fail "up interrupted by TERM exited with $rc, not 143"
  fi
  [ -z "$(leftovers)" ] || fail "a TERM during up left namespaces: $(leftovers)"
  if [ $bad = 0 ]; then
    echo "emucluster_check tool: all checks passed"
    exit 0
  fi
  echo "emucluster_check tool: $bad check(s) failed"
  exit 1
}

export COLLRUN
if [ "$SPLIT" = tool ]; then
  [ "$(id -u)" = 0 ] || skip "not root"
  command -v ip >/dev/null || skip "iproute2 (ip) not installed"
  toolCheck
fi

IFS=, read -r -a counts <<<"$SPLIT"
K=${#counts[@]}
NP=0
for c in "${counts[@]}"; do NP=$((NP + c)); done
# A name per run and split, so parallel tests and reruns never meet.
NAME=emuchk$$_${K}n${NP}r
cleanup() { "$EMUCLUSTER" down "$NAME" >/dev/null 2>&1; return 0; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"
"$EMUCLUSTER" up "$NAME" "$K" --no-measure
rc=$?
[ $rc = 77 ] && skip "cannot create network namespaces here"
[ $rc = 0 ] || { echo "FAIL: emucluster up $NAME $K exited with $rc"; exit 1; }

unset COLL_HOSTID COLL_TRANSPORT COLL_ALGO COLL_SOCKET_IFNAME
export COLL_DEBUG=INFO COLL_TIMEOUT=60 COLLRUN
failures=0
LOG=$(mktemp)
trap 'rm -f "$LOG"; cleanup' EXIT

# launch ALGO_VALUE PROGRAM ARGS...: one job on the cluster, output in $LOG; returns collrun's status.
launch() {
  local algo=$1
  shift
  if [ -n "$algo" ]; then
    COLL_ALGO=$algo "$EMUCLUSTER" run "$NAME" --ranks-per-node "$SPLIT" --timeout 150 -- "$@" >"$LOG" 2>&1
  else
    "$EMUCLUSTER" run "$NAME" --ranks-per-node "$SPLIT" --timeout 150 -- "$@" >"$LOG" 2>&1
  fi
}

# expectPass LABEL ALGO_VALUE PROGRAM ARGS...: every rank reports OK, on K hosts.
expectPass() {
  local label=$1 algo=$2
  shift 2
  local t0=$SECONDS
  launch "$algo" "$@"
  judge "$label" "$algo" $? $((SECONDS - t0))
}

# plannedAsForced ALGO_VALUE: each "coll:algo" of the filter shows in the INFO plan lines
# ("plan allreduce 1009 x float32: hier(inter=ring) ..."), and no other algorithm does for it.
plannedAsForced() {
  local spec item coll want seen
  IFS=';' read -r -a spec <<<"$1"
  for item in "${spec[@]}"; do
    [[ "$item" == *:* ]] || continue
    coll=${item%%:*} want=${item#*:}
    seen=$(grep -Eo "plan $coll [0-9]+ x [a-z0-9_]+: [a-z_]+" "$LOG" | awk '{ print $NF }' | sort -u | tr '\n' ' ')
    if [ "$seen" != "$want " ]; then
      echo "FAIL: COLL_ALGO='$1': the $coll plans at COLL_DEBUG=INFO used '${seen% }', not $want"
      return 1
    fi
  done
  return 0
}

# judge LABEL ALGO_VALUE RC SECONDS: the verdict on the job whose output is in $LOG.
judge() {
  local label=$1 algo=$2 rc=$3 took=$4
  if [ $rc -ne 0 ]; then
    echo "FAIL: $label (COLL_ALGO='$algo'): collrun exited with $rc"
    grep -v " INFO " "$LOG" | tail -n 25
    failures=$((failures + 1))
  elif ! grep -q "topology: $NP ranks on $K hosts" "$LOG"; then
    echo "FAIL: $label: no 'topology: $NP ranks on $K hosts' line at COLL_DEBUG=INFO; seen:"
    grep "topology:" "$LOG" | head -n 3
    failures=$((failures + 1))
  elif [ "$(grep -c ': OK: ' "$LOG")" -ne "$NP" ]; then
    echo "FAIL: $label: only $(grep -c ': OK: ' "$LOG") of $NP ranks reported OK"
    grep -v " INFO " "$LOG" | tail -n 25
    failures=$((failures + 1))
  elif ! plannedAsForced "$algo"; then
    failures=$((failures + 1))
  else
    echo "PASS: $label ($took s)"
  fi
}

uniform=1
for c in "${counts[@]}"; do [ "$c" = "${counts[0]}" ] || uniform=0; done

# The other collectives forced hier. Their hierarchical schedules need equal blocks of ranks per
# host; on an uneven split the library may instead refuse the filter at creation, in words.
hierColls() {
  local algo=$1 label="allgather/reducescatter/broadcast forced hier"
  local -a prog=("$COLL_CHECK" --quick --no-groups --colls "all_gather,reduce_scatter,broadcast")
  if [ $uniform = 1 ]; then
    expectPass "$label" "$algo" "${prog[@]}"
    return
  fi
  local t0=$SECONDS
  launch "$algo" "${prog[@]}"
  local rc=$?
  if [ $rc -ne 0 ] && grep -q "invalid usage" "$LOG" && grep -qi "hier" "$LOG"; then
    echo "PASS: $label on uneven split $SPLIT refused at creation:"
    grep -m1 "invalid usage" "$LOG" | cut -c1-300
  elif [ $rc -ne 0 ]; then
    echo "FAIL: $label on uneven split $SPLIT: exit $rc without a clear refusal"
    grep -v " INFO " "$LOG" | tail -n 25
    failures=$((failures + 1))
  else
    judge "$label" "$algo" $rc $((SECONDS - t0))
  fi
}

echo "emucluster_check: $K nodes, ranks per node $SPLIT ($NP ranks), cluster $NAME"
expectPass "allreduce planner's choice" "" "$AR_CHECK" --quick
for algo in $ALGOS; do
  # shellcheck disable=SC2059
  expectPass "allreduce forced $algo" "$(printf "$ALGO_FORMAT" "$algo")" "$AR_CHECK" --quick
  if [ "$algo" = hier ]; then
    hierColls "allgather:hier;reducescatter:hier;broadcast:hier"
  fi
done

# direct is shared memory within one host: across nodes it must be refused, in words, on every rank.
# shellcheck disable=SC2059
direct=$(printf "$ALGO_FORMAT" direct)
launch "$direct" "$AR_CHECK" --quick
rc=$?
if [ $rc -eq 0 ]; then
  echo "FAIL: COLL_ALGO='$direct' across $K hosts ran instead of being refused"
  failures=$((failures + 1))
elif ! grep -q "invalid usage" "$LOG" || ! grep -Eiq "direct.*(one host|single host|same host)" "$LOG"; then
  echo "FAIL: COLL_ALGO='$direct' across hosts failed without a clear 'invalid usage ... one host' error:"
  grep -v " INFO " "$LOG" | tail -n 10
  failures=$((failures + 1))
else
  echo "PASS: COLL_ALGO='$direct' refused: $(grep -m1 -o 'COLL_ALGO=[^;]*direct[^)]*)' "$LOG" | head -c 160)"
fi

if [ $failures -ne 0 ]; then
  echo "emucluster_check $SPLIT: $failures run(s) failed"
  exit 1
fi
echo "emucluster_check $SPLIT: all runs passed"
exit 0
