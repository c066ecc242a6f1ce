#!/bin/bash
# Line coverage of the parsers of remote bytes reached by the fuzz targets: builds the targets with
# clang source-based coverage (-fprofile-instr-generate -fcoverage-mapping) in $COV_BUILD (default
# build-fuzz-cov), fuzzes each for RUNS executions from its seed corpus (profile on), merges the
# profiles and prints llvm-cov's report for the parser functions and their files.
#   tests/fuzz/coverage.sh [RUNS]       (default 200000; needs clang and llvm-14's llvm-profdata/llvm-cov)
# REPORT_ONLY=1 prints the report of the last run again.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${COV_BUILD:-$repo/build-fuzz-cov}
runs=${1:-200000}
profdata=$(command -v llvm-profdata-14 || command -v llvm-profdata) || { echo "llvm-profdata not found (apt-get install llvm-14)"; exit 1; }
llvmcov=$(command -v llvm-cov-14 || command -v llvm-cov) || { echo "llvm-cov not found (apt-get install llvm-14)"; exit 1; }
targets=$(ls "$here/corpus")
prof="$build/profiles"
if [ "${REPORT_ONLY:-0}" != 1 ]; then
cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCOLL_FUZZ=ON -DCOLL_ENABLE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="-fprofile-instr-generate -fcoverage-mapping" \
  -DCMAKE_EXE_LINKER_FLAGS="-fprofile-instr-generate" >/dev/null
built=""
for t in $targets; do
  if cmake --build "$build" -j"${JOBS:-2}" --target "fuzz_$t" >"$build/build-$t.log" 2>&1; then
    built="$built $t"
  else
    echo "fuzz_$t: not built (see $build/build-$t.log)"
  fi
done
rm -rf "$prof" && mkdir -p "$prof"
for t in $built; do
  bin=$(find "$build" -name "fuzz_$t" -type f -perm -u+x | head -n 1)
  LLVM_PROFILE_FILE="$prof/$t-%p.profraw" "$here/run_target.sh" "$bin" "$here/corpus/$t" "$prof/work-$t" "$runs"
done
"$profdata" merge -sparse "$prof"/*.profraw -o "$prof/merged.profdata"
fi
objects=()
for t in $targets; do
  bin=$(find "$build" -name "fuzz_$t" -type f -perm -u+x | head -n 1)
  [ -n "$bin" ] && objects+=(-object "$bin")
done
files=(src/oob/bootstrap.cc src/oob/auth.cc src/oob/socket.cc src/base/config.cc src/oob/env_bootstrap.cc
       src/plan/planner.cc algorithms/torus.cc transports/tcp/tcp_connect.cc src/nccl_net/message_stream.cc
       src/nccl_net/pair_bootstrap.cc transports/ib/ib_connect.cc transports/ib/ib_device.cc src/oob/failure.cc
       transports/ucx/ucx_net.cc transports/ucx/ucx_connection.cc)
paths=()
for f in "${files[@]}"; do paths+=("$repo/$f"); done
first=${objects[1]}
rest=("${objects[@]:2}")
echo
echo "== parser functions: lines, missed, line coverage =="
"$llvmcov" report "$first" "${rest[@]}" -instr-profile="$prof/merged.profdata" -show-functions "${paths[@]}" 2>/dev/null |
  awk 'NF >= 10 && $1 != "Name" { n = $1; sub(/^[^:]*\.cc:/, "", n); print n, $(NF-5), $(NF-4), $(NF-3) }' |
  c++filt | sed -E "s/coll::\(anonymous namespace\):://g; s/coll:://g; s/\(.*\) / /" |
  grep -E "^(parseBootstrapHello|parseBootstrapRegistration|parseRankTable|decodeUniqueId|encodeUniqueId|getAddress|getEntry|parseTcpHello|ncclnet::MessageStream::progressRecvs|ncclnet::PairBootstrap::pump|ncclnet::PairBootstrap::recv|checkIbConnectInfo|validate|parseAlgoFilter|interfaceMatches|parseSocketFamily|parseBytes|expandSlurmNodeList|firstSlurmNode|parseRange|secretFromText|hexDecode|parseDims|torusDimsFor|parseIbHcaList|SocketAddress::parse|decodeFailed|decodeWaitFor|decodeRelay|decodeHeartbeat|checkUcxHello|parseHello|UcxConnection::dataHeaderFits|printable) " |
  sort -u | awk '$2 ~ /^[0-9]+$/ { printf "  %-40s %5s lines %4s missed  %s\n", $1, $2, $3, $4 }'
echo
echo "== whole files (the parsers and the I/O code around them) =="
"$llvmcov" report "$first" "${rest[@]}" -instr-profile="$prof/merged.profdata" "${paths[@]}" 2>/dev/null |
  sed "s|$repo/||"
