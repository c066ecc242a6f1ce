// The compressed All-Reduce in the benchmarks and multi-process tests (--compress): the flag's
// parsing, gradient-like inputs, and the check of a result against a float64 reference within a
// tolerance derived from the 4-bit format (see checkCompressed). Public API only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective/collective.h"

namespace coll::perf {

// --compress int4[:B][:stochastic][:feedback][:threshold]
struct CompressSpec {
  bool enabled = false;
  int blockSize = 64;       // 32, 64, 128 or 256
  bool stochastic = false;  // else nearest rounding
  // A residual buffer of count floats per rank (error feedback), zeroed before every size's first
  // call and before each check call, then carried from call to call as a training loop would.
  bool feedback = false;
  // minBytes = 0 in the call, so COLL_COMPRESS_MIN_BYTES decides which sizes compress; without it
  // the benchmark passes minBytes = 1 and every size runs compressed (what the flag is asked for).
  bool libraryThreshold = false;
};

// Parses "int4", "int4:128", "int4:64:stochastic:feedback", ... False with a sentence in *error.
bool parseCompressSpec(const std::string& text, CompressSpec* out, std::string* error);
// "int4:64:nearest" and so on, for tables and logs.
std::string compressSpecName(const CompressSpec& spec);
// The collCompression_t of a call (seed and step fixed: reproducible runs).
collCompression_t compressionConfig(const CompressSpec& spec);

// Rank `rank`'s input for seed: roughly Gaussian values whose magnitude changes from one block of
// 64 elements to the next (between 1/4 and 4), so per-block scales differ as in real gradients.
// Element i of buf is element firstIndex + i of the whole input. Stored in `type` (float32,
// float16 or bfloat16), rounded to nearest even.
void fillCompressInput(void* buf, size_t count, collDataType_t type, int rank, uint64_t seed, size_t firstIndex = 0);

struct CompressCheck {
  size_t wrong = 0;        // elements whose error exceeds the tolerance
  double relError = 0;     // ||out - exact|| / ||exact|| over the whole tensor
  double worstRatio = 0;   // max over elements of |out - exact| / tolerance (<= 1 passes)
  std::string firstError;  // the first wrong element, in words
};

// Checks `out` (count elements of `type`), the result of a compressed All-Reduce (sum or avg) of
// fillCompressInput(rank, seed) over nranks ranks with a zero (or no) residual, against the exact
// result computed in float64 here. The tolerance of element i in block b (blocks of B elements
// aligned with the tensor, as the library's shards are):
//   every rank's block scale s_r <= amax_r / 7 * (1 + 2^-8)  (bf16 rounding of amax / 7 is within
//   2^-9; an element above 7 * s_r is clamped to 7, within 0.03 s_r, so the rounding bound holds);
//   one quantization moves an element by at most k * s_r, k = 1/2 nearest, 1 stochastic
//   (|x/s - floor(x/s + u)| < 1 for u in [0,1));
//   first shot: each rank's contribution quantized once (the owner's own part is not, counted
//   anyway): e1 = k * sum_r s_r (divided by p for avg);
//   second shot: the owner requantizes its float32 sum S' with |S'| <= max_b |S| + e1, so
//   s_o <= (max_b |S| + e1) / 7 * (1 + 2^-8) and e2 = k * s_o;
//   float32 arithmetic: p additions and a division, <= p * 2^-23 * sum_r |x_r,i| (generous);
//   16-bit outputs: the final conversion, half an ulp: 2^-8 (bf16) or 2^-11 (half) of |S| + e1 + e2.
// tolerance_i = e1 + e2 + the two rounding terms. A result within it is the format working as
// designed; beyond it something (a shard, a scale, a block offset) is wrong.
CompressCheck checkCompressed(const void* out, size_t count, collDataType_t type, collRedOp_t op, int nranks,
                              const CompressSpec& spec, uint64_t seed);

// Bytes per rank that an uncompressed ring All-Reduce of `bytes` sends: 2 (p - 1) / p * bytes (the
// wire% denominator).
double ringWireBytes(double bytes, int nranks);

}  // namespace coll::perf
