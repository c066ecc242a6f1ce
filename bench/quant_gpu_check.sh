#!/usr/bin/env bash
# Builds the CUDA 4-bit quantization kernels and quant_gpu_check, then, where a GPU is present,
# checks CPU == GPU bit identity on random inputs and prints GB/s at 256 MiB beside the measured
# device-to-device cudaMemcpy bandwidth. Without a GPU: builds, says so, exits 0.
# Usage: bench/quant_gpu_check.sh [build dir (default build-gpu)]   env: JOBS, CMAKE_ARGS
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-gpu}
jobs=${JOBS:-$(nproc)}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# nvcc is often not on PATH; FindCUDAToolkit looks in /usr/local/cuda too.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
# shellcheck disable=SC2086
# Kernels only: a GPU machine may lack the library's build dependencies (OpenSSL's headers, say).
cmake -S "$src" -B "$build" -DCOLL_KERNELS_ONLY=ON -DCOLL_ENABLE_CUDA=ON "${launcher[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs" --target quant_gpu_check
exec "$build/bench/quant_gpu_check"
