#!/bin/bash
# The same binaries under Open MPI's mpirun: rank and size come from OMPI_COMM_WORLD_*, the
# rendezvous from COLL_COMM_ID (exported with -x), the secret from COLL_COMM_SECRET.
# usage: mpirun_launch.sh PROGRAM ARGS...   (skips with 77 when mpirun is missing)
set -euo pipefail
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not installed"; exit 77; fi
port=$((20000 + RANDOM % 20000))
export COLL_COMM_ID=127.0.0.1:$port
export COLL_COMM_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
exec mpirun --allow-run-as-root --oversubscribe -np 3 --mca pml ob1 --mca btl self,vader \
  --mca oob_tcp_if_include lo -x COLL_COMM_ID -x COLL_COMM_SECRET -x COLL_TIMEOUT "$@"
