// Test data for the benchmarks and multi-process tests: inputs that depend on rank and element
// index and whose reduction is exact whatever the order (up to 64 ranks; float8 up to 16), and
// byte patterns for the collectives that only move data.
// Public-API only (no library internals), so both the libcollective and the MPI backends use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective/collective.h"

namespace coll::perf {

// Types and ops the benchmarks accept, in nccl-tests' order.
constexpr collDataType_t kAllTypes[] = {collInt8,    collUint8,    collInt32,      collUint32,
                                        collInt64,   collUint64,   collFloat16,    collFloat32,
                                        collFloat64, collBfloat16, collFloat8e4m3, collFloat8e5m2};
constexpr collRedOp_t kAllOps[] = {collSum, collProd, collMax, collMin, collAvg};
// The benchmarks' name for PreMulSum ("premulsum", nccl-tests' "mulsum"): every rank multiplies its
// input by premulScalar(rank) before the sum. A backend turns it into its own op handle.
constexpr collRedOp_t kPreMulSum = static_cast<collRedOp_t>(collNumOps);
constexpr collRedOp_t kAllOpsPreMul[] = {collSum, collProd, collMax, collMin, collAvg, kPreMulSum};

size_t typeSize(collDataType_t type);
const char* typeName(collDataType_t type);  // nccl-tests' names: int8 ... half float bfloat16 f8e4m3
const char* opName(collRedOp_t op);
bool isFloatType(collDataType_t type);
// Parses nccl-tests' spellings ("float", "float32", "half", "float16", ...). False on junk.
bool parseType(const std::string& text, collDataType_t* out);
bool parseOp(const std::string& text, collRedOp_t* out);

// Our own IEEE conversions (round to nearest even), so programs need only the public API.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);
// OCP float8: E4M3 (no infinities, saturates at 448) and E5M2 (saturates at 57344).
float fp8e4m3ToFloat(uint8_t b);
uint8_t floatToFp8e4m3(float f);
float fp8e5m2ToFloat(uint8_t b);
uint8_t floatToFp8e5m2(float f);

// Element `index` of a buffer as a double / stored from a double (exact for our patterns).
double loadElement(const void* buf, size_t index, collDataType_t type);
void storeElement(void* buf, size_t index, collDataType_t type, double value);

// The input of `rank` for (type, op): small integers (and +-1 / a single factor 2 for prod, a
// zero-sum perturbation for floating avg) so every partial result is exact in every type.
// Element i of buf is the element firstIndex + i of the rank's whole input (reduce-scatter checks
// rank r's block at firstIndex = r * count).
void fillInput(void* buf, size_t count, collDataType_t type, collRedOp_t op, int rank, int nranks,
               size_t firstIndex = 0);
// Element `index` of the input of `rank`, and of the exact reduced result, as doubles (after the
// wrap-around of integer types).
double inputElement(collDataType_t type, collRedOp_t op, int rank, int nranks, size_t index);
double expectedElement(collDataType_t type, collRedOp_t op, int nranks, size_t index);
// The PreMulSum scalar of `rank` (a small integer, exact in every type) and its bytes in `type`.
double premulScalar(collDataType_t type, int rank);
void premulScalarBytes(collDataType_t type, int rank, void* out8);

// Compares a reduction result against the exact expected one; returns the number of wrong
// elements and describes the first in *firstError (if not null).
size_t checkResult(const void* buf, size_t count, collDataType_t type, collRedOp_t op, int nranks,
                   std::string* firstError, size_t firstIndex = 0);

// Counts elements of `buf` that differ from fillInput's (the send buffer must stay untouched).
size_t checkUnchanged(const void* buf, size_t count, collDataType_t type, collRedOp_t op, int rank, int nranks,
                      size_t firstIndex = 0);

// Data-movement collectives: element `firstIndex + i` of the data that `srcRank` sends, as
// pseudo-random bytes (compared bit for bit, so float NaN patterns are fine).
void fillPattern(void* buf, size_t count, size_t eltSize, int srcRank, size_t firstIndex, uint64_t seed);
bool patternMatches(const void* buf, size_t i, size_t eltSize, int srcRank, size_t index, uint64_t seed);

// Pseudo-random values in [-1, 1) for floating types (results not exact: for cross-rank
// bit-identity checks).
void fillRandom(void* buf, size_t count, collDataType_t type, int rank, uint64_t seed);

// FNV-1a over bytes; all ranks must get the same hash of the same result.
uint64_t hashBytes(const void* buf, size_t bytes);

}  // namespace coll::perf
