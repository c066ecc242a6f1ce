#!/bin/bash
# torch.distributed with backend "collective" against gloo: all_reduce of 16 MiB and 64 MiB from
# Python and the communication time of a DDP step (~25M-parameter MLP), NP processes with
# torchrun's environment, both backends alternating ROUNDS times in one job (bench/torch_backend_bench.py).
# usage: bench/compare_torch.sh [extra torch_backend_bench.py options]   (env: BUILD, NP=4, ROUNDS=3)
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
NP=${NP:-4}
PYTHON=/usr/bin/python3
if [ ! -f "$BUILD/python/torch_collective/__init__.py" ]; then
  echo "missing $BUILD/python/torch_collective: cmake -S . -B $BUILD -DCOLL_ENABLE_TORCH=ON && cmake --build $BUILD --target torch_collective" >&2
  exit 2
fi
out=$(results_dir compare_torch)
echo "compare_torch: $NP ranks, $ROUNDS rounds; raw output in $out"
# torchrun's environment, set here: Debian's torchrun (PyTorch 1.13) fails under Python 3.11 before
# starting any worker (its Std IntFlag parsing), so the ranks are started as torchrun would.
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < NP; ++r)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$NP LOCAL_WORLD_SIZE=$NP MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    PYTHONPATH=$BUILD/python OMP_NUM_THREADS=1 timeout 1800 "$PYTHON" "$ROOT/bench/torch_backend_bench.py" \
    --rounds "$ROUNDS" "$@" >"$out/rank$r.txt" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
if [ $rc != 0 ]; then
  tail -n 30 "$out"/rank*.txt >&2
  exit 1
fi
cp "$out/rank0.txt" "$out/run.txt"
grep -v '^JSON ' "$out/run.txt" | grep -v -i 'warning\|OMP_NUM_THREADS\|^\*\*\*' | tee "$out/summary.txt"
grep '^JSON ' "$out/run.txt" | sed 's/^JSON //' >"$out/result.json"
