#!/usr/bin/env bash
# ONE command for a machine with CUDA and one GPU (no internet, no new packages: CMake, a C++
# compiler and the CUDA toolkit). Steps, each under `timeout`, the whole run in under 8 minutes:
#   1. build (all cores) only what the check runs: the library, collrun, the *_perf benchmarks,
#      cuda_memcpy_perf, test_gpu_calls, test_gpu_ipc, test_device_kernels (-DBUILD_TESTING=ON). Without
#      OpenSSL's headers the library cannot build: then only the kernels-only check runs
#      (bench/quant_gpu_check.sh) and it says the full check needs libssl-dev.
#   2. no GPU: says so, exits 0 (after the build).
#   3. test_gpu_calls and test_gpu_ipc (ranks as threads and as processes over CUDA IPC, legacy
#      handles and cuMem file descriptors, registered buffers) on the REAL driver
#      (COLL_GPU_TEST_REAL_DRIVER=1; the tests that need the CUDA test double or two devices
#      skip), test_device_kernels.
#   4. bench/quant_gpu_check.sh: the 4-bit kernels' CPU == GPU identity and GB/s (its own build).
#   5. cuda_memcpy_perf: B = device-to-device copy bandwidth, H2D/D2H = pinned host<->device.
#   6. allreduce_perf on device buffers (-G 1), 1, 2 and 4 ranks sharing the GPU, 8 B and 256 MiB,
#      -w 5 -n 20, and ONE table.
#   7. every other collective on device buffers, and the int4-compressed All-Reduce (error
#      feedback, a device residual), 2 ranks, 64 MiB, results checked (-c 1): busbw and #wrong
#      each (a check that each runs right on the GPU, not a limit).
# The table, for p ranks, N = 256 MiB, t = the out-of-place time:
#   algbw = N / t,  busbw = algbw * 2(p-1)/p (nccl-tests; 0 for p = 1)
#   staged limit (what the library does today: D2H copy, host All-Reduce over shared memory, H2D
#     copy): every rank moves N bytes device->host and N host->device over the GPU's one host link
#     (PCIe/C2C), p ranks share it, the two directions overlap at best (pipelined chunks):
#       algbw <= min(H2D, D2H) / p
#   device limit (a device-only All-Reduce over the GPU's memory): the p inputs are read and the p
#     results written, 2pN bytes; a copy of N bytes moves 2N bytes in N/B:
#       algbw <= B / p
#   ratio = algbw / limit (the same as busbw / busbw-limit for p > 1).
# usage: bench/gpu_check.sh [--build-only] [--prebuilt BUILD_DIR] [--quick] [BUILD_DIR]
#   BUILD_DIR default build-gpu-check; --prebuilt: use that build, do not build; --quick: 1 MiB
#   instead of 256 MiB and fewer iterations (tests). env: JOBS (default nproc), CMAKE_ARGS,
#   COLL_GPU_CHECK_DOUBLE=<libcoll_cuda_double.so>: run steps 5-6 on the CUDA test double (CI: the
#   script's own path; not a GPU, the numbers mean nothing).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build-gpu-check
build_only=0 prebuilt=0 quick=0
while [ $# -gt 0 ]; do
  case $1 in
    --build-only) build_only=1 ;;
    --prebuilt) prebuilt=1; build=$2; shift ;;
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
jobs=${JOBS:-$(nproc)}
# Step 7's collectives (All-Reduce is step 6's).
others=(all_gather reduce_scatter broadcast reduce alltoall gather scatter)
perfs=(allreduce_perf)
for c in "${others[@]}"; do perfs+=("${c}_perf"); done
start=$SECONDS
step() { echo; echo "== [$((SECONDS - start))s] $*"; }
double=${COLL_GPU_CHECK_DOUBLE:-}
if [ -n "$double" ]; then
  export COLL_CUDA_DRIVER=$double COLL_CUDA_DOUBLE_DEVICES=1
fi

# nvcc is often not on PATH; FindCUDAToolkit looks in /usr/local/cuda too.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# ---- 1. build ------------------------------------------------------------------------------------
if [ "$prebuilt" = 0 ]; then
  if ! printf '#include <openssl/evp.h>\n#include <openssl/hmac.h>\nint main() { return 0; }\n' |
    "${CXX:-c++}" -x c++ -fsyntax-only - 2>/dev/null; then
    step "OpenSSL's headers are missing: the library cannot build here; the kernels-only check runs instead"
    echo "gpu_check: the full check (device-buffer calls, cuda_memcpy_perf, allreduce_perf) needs libssl-dev"
    echo "  (Debian/Ubuntu: libssl-dev; RHEL: openssl-devel)"
    timeout 420 bash "$src/bench/quant_gpu_check.sh" "$build-kernels"
    exit $?
  fi
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache); fi
  step "configure $build"
  # shellcheck disable=SC2086
  timeout 120 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON "${launcher[@]}" \
    ${CMAKE_ARGS:-} >"$build.configure.log" 2>&1 || { tail -30 "$build.configure.log"; exit 1; }
  step "build with $jobs jobs"
  timeout 300 cmake --build "$build" -j "$jobs" --target collective collrun "${perfs[@]}" cuda_memcpy_perf \
    test_gpu_calls test_gpu_ipc test_device_kernels >"$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }
  echo "built in $((SECONDS - start)) s"
  if [ "$build_only" = 1 ]; then exit 0; fi
fi
bin=$build/bench
collrun=$bin/collrun
[ -x "$bin/allreduce_perf" ] && [ -x "$bin/cuda_memcpy_perf" ] || { echo "gpu_check: no binaries in $bin" >&2; exit 2; }

# ---- 2. a GPU? -----------------------------------------------------------------------------------
step "GPU"
memlog=$(mktemp)
trap 'rm -f "$memlog"' EXIT
set +e
if [ "$quick" = 1 ]; then
  timeout 120 "$bin/cuda_memcpy_perf" -b 64K -e 1M -f 16 -n 2 -w 1 >"$memlog" 2>&1
else
  timeout 120 "$bin/cuda_memcpy_perf" -b 1M -e 256M -f 16 -n 20 -w 5 >"$memlog" 2>&1
fi
rc=$?
set -e
if [ "$rc" = 77 ]; then
  cat "$memlog"
  echo "gpu_check: no GPU here (no CUDA driver or no device): built, nothing run"
  exit 0
fi
[ "$rc" = 0 ] || { cat "$memlog"; echo "gpu_check: cuda_memcpy_perf failed ($rc)"; exit 1; }
command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi -L || true

# ---- 3./4. tests on the real driver, the quantization kernels ---------------------------------
if [ -z "$double" ]; then
  step "test_gpu_calls on the real driver"
  COLL_GPU_TEST_REAL_DRIVER=1 timeout 180 "$build/tests/test_gpu_calls" --gtest_brief=1
  step "test_gpu_ipc on the real driver"
  COLL_GPU_TEST_REAL_DRIVER=1 timeout 300 "$build/tests/test_gpu_ipc" --gtest_brief=1
  step "test_device_kernels"
  timeout 120 "$build/tests/test_device_kernels" --gtest_brief=1
  step "quantization kernels (bench/quant_gpu_check.sh)"
  JOBS=$jobs timeout 300 bash "$src/bench/quant_gpu_check.sh" "$build-kernels"
else
  step "on the CUDA test double: tests on the real driver and the quantization kernels skipped"
fi

# ---- 5. reference bandwidths ---------------------------------------------------------------------
step "cuda_memcpy_perf"
cat "$memlog"
read -r B H2D D2H < <(awk '/^# summary/ { print $4, $6, $8 }' "$memlog")

# ---- 6. allreduce_perf, 1/2/4 ranks on the one GPU -----------------------------------------------
if [ "$quick" = 1 ]; then big=1M bigb=1048576 factor=131072 w=1 n=2; else big=256M bigb=268435456 factor=33554432 w=5 n=20; fi
declare -A busbw algbw small
for p in 1 2 4; do
  step "allreduce_perf -np $p -G 1 -b 8 -e $big"
  json=$(mktemp)
  timeout 240 "$collrun" -np "$p" --timeout 230 "$bin/allreduce_perf" -G 1 -b 8 -e "$big" -f "$factor" -w "$w" \
    -n "$n" -c 1 --json "$json"
  # The rows of 8 B and the big size: out-of-place time / algbw / busbw.
  read -r t8 < <(awk -F'"time_us": ' '/"size": 8,/ { split($2, a, ","); print a[1]; exit }' "$json")
  read -r ab bb < <(awk -v s="\"size\": $bigb," 'index($0, s) {
      split($0, x, "\"algbw_gbs\": "); split(x[2], a, ",");
      split($0, y, "\"busbw_gbs\": "); split(y[2], b, ",");
      print a[1], b[1]; exit }' "$json")
  small[$p]=$t8 algbw[$p]=$ab busbw[$p]=$bb
  rm -f "$json"
done

# ---- the table -----------------------------------------------------------------------------------
step "summary"
echo "device copy B = $B GB/s (device to device), pinned H2D = $H2D GB/s, D2H = $D2H GB/s (cuda_memcpy_perf)"
echo "All-Reduce on device buffers, ranks sharing one GPU, N = $big (out of place):"
echo "  algbw = N/t; busbw = algbw*2(p-1)/p; staged limit: algbw <= min(H2D,D2H)/p; device limit: algbw <= B/p"
printf "%5s  %12s  %10s  %12s  %12s  %12s  %12s\n" ranks "busbw(GB/s)" "8B t(us)" "staged-lim" "staged-ratio" \
  "device-lim" "device-ratio"
for p in 1 2 4; do
  awk -v p="$p" -v bb="${busbw[$p]}" -v ab="${algbw[$p]}" -v t="${small[$p]}" -v B="$B" -v h="$H2D" -v d="$D2H" 'BEGIN {
    link = (h < d ? h : d) / p; dev = B / p
    r1 = link > 0 ? ab / link : 0; r2 = dev > 0 ? ab / dev : 0
    printf "%5d  %12.2f  %10.2f  %12.2f  %12.3f  %12.2f  %12.3f\n", p, bb, t, link, r1, dev, r2 }'
done
echo "(limits in algbw GB/s; ratio = algbw / limit)"

# ---- 7. every other collective, 2 ranks, checked -------------------------------------------------
if [ "$quick" = 1 ]; then mid=1M midb=1048576; else mid=64M midb=67108864; fi
step "the other collectives on device buffers: 2 ranks, $mid, checked"
printf "%-16s  %12s  %8s\n" collective "busbw(GB/s)" "#wrong"
failed=0
for c in "${others[@]}" allreduce_int4; do
  extra=() perf=${c}_perf size=$mid sizeb=$midb
  if [ "$c" = allreduce_int4 ]; then
    extra=(--compress int4:feedback) perf=allreduce_perf
    # --quick runs on the CUDA double, whose kernels run on host threads: a small size.
    if [ "$quick" = 1 ]; then size=32K sizeb=32768; fi
  fi
  json=$(mktemp)
  if ! timeout 120 "$collrun" -np 2 --timeout 110 "$bin/$perf" -G 1 -b "$size" -e "$size" -w "$w" -n "$n" -c 1 \
    "${extra[@]}" --json "$json" >"$json.log" 2>&1; then
    tail -5 "$json.log"
    failed=1
  fi
  read -r bb < <(awk -v s="\"size\": $sizeb," 'index($0, s) { split($0, y, "\"busbw_gbs\": "); split(y[2], b, ",");
      print b[1]; exit }' "$json")
  read -r wrong < <(awk -F'"wrong_total": ' 'NF > 1 { split($2, a, ","); print a[1]; exit }' "$json")
  printf "%-16s  %12s  %8s\n" "$c" "${bb:-fail}" "${wrong:-?}"
  if [ "${wrong:-1}" != 0 ]; then failed=1; fi
  rm -f "$json" "$json.log"
done
if [ "$failed" != 0 ]; then echo "gpu_check: a collective failed or gave wrong results (above)"; exit 1; fi
echo "gpu_check: done in $((SECONDS - start)) s"
