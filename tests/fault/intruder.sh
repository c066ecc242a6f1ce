#!/bin/bash
# Intruders at the rendezvous of a 2-rank job: a connect-and-close, 64 garbage bytes, an idle
# connection held open, and two impostors running the real library as "rank 1" (wrong secret,
# no secret). The real job must still complete with exact results; no impostor may succeed.
# usage: intruder.sh COLLRUN MP_ALLREDUCE_CHECK
set -u
COLLRUN=${1:?usage: intruder.sh COLLRUN MP_ALLREDUCE_CHECK}
CHECK=${2:?}
export COLL_TIMEOUT=30
unset COLL_COMM_SECRET
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs as each rank under collrun. Rank 1 attacks rank 0's rendezvous before joining.
rank_script='
CHECK=$1; WORK=$2
if [ "$COLL_RANK" != 1 ]; then exec "$CHECK" --quick; fi
hostport=$COLL_COMM_ID
host=${hostport%:*}; port=${hostport##*:}
sleep 0.3
# 1. connect and close at once
{ exec 3<>"/dev/tcp/$host/$port"; exec 3>&-; } 2>/dev/null ; echo "intruder: connect-and-close attempted"
# 2. garbage instead of a hello
{ exec 3<>"/dev/tcp/$host/$port"; head -c 64 /dev/urandom >&3; exec 3>&-; } 2>/dev/null ; echo "intruder: garbage attempted"
# 3. an idle connection that never says anything
( exec 3<>"/dev/tcp/$host/$port"; sleep 25 ) >/dev/null 2>&1 &
idle=$!
# 4./5. impostors: the real library claiming to be rank 1 with a wrong secret / no secret
( env -u COLL_COMM_SECRET_FILE COLL_COMM_SECRET=00112233445566778899aabbccddeeff COLL_TIMEOUT=8 \
    timeout 20 "$CHECK" --quick >"$WORK/wrong.log" 2>&1; echo $? >"$WORK/wrong.rc" ) &
wrong=$!
( env -u COLL_COMM_SECRET_FILE -u COLL_COMM_SECRET COLL_TIMEOUT=8 \
    timeout 20 "$CHECK" --quick >"$WORK/no.log" 2>&1; echo $? >"$WORK/no.rc" ) &
no=$!
sleep 1
"$CHECK" --quick
rc=$?
kill $idle 2>/dev/null
wait $wrong $no
for who in wrong no; do
  r=$(cat "$WORK/$who.rc")
  echo "impostor ($who secret) exited with $r"
  sed "s/^/  impostor($who): /" "$WORK/$who.log" | tail -n 3
  if [ "$r" = 0 ]; then echo "FAIL: the impostor with $who secret completed a job"; rc=1; fi
done
exit $rc
'
"$COLLRUN" -np 2 --timeout 100 bash -c "$rank_script" rank "$CHECK" "$work"
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: the job did not complete cleanly with intruders present (collrun exit $rc)"
  exit 1
fi
echo "PASS: the job completed despite the intruders"
