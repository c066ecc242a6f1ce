// Test data for the benchmarks and multi-process tests: inputs that depend on rank and element
// index and whose all-reduce result is exact whatever the reduction order (up to 64 ranks).
// Public-API only (no library internals), so both the libcollective and the MPI backends use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective/collective.h"

namespace coll::perf {

// Types and ops the benchmarks accept (the reserved float8 slots excluded).
constexpr collDataType_t kAllTypes[] = {collInt8,  collUint8,   collInt32,   collUint32,  collInt64,
                                        collUint64, collFloat16, collFloat32, collFloat64, collBfloat16};
constexpr collRedOp_t kAllOps[] = {collSum, collProd, collMax, collMin, collAvg};

size_t typeSize(collDataType_t type);
const char* typeName(collDataType_t type);  // nccl-tests' names: int8 uint8 int32 ... half float bfloat16
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

// Element `index` of a buffer as a double / stored from a double (exact for our patterns).
double loadElement(const void* buf, size_t index, collDataType_t type);
void storeElement(void* buf, size_t index, collDataType_t type, double value);

// The input of `rank` for (type, op): small integers (and +-1 / a single factor 2 for prod, a
// zero-sum perturbation for floating avg) so every partial result is exact in every type.
void fillInput(void* buf, size_t count, collDataType_t type, collRedOp_t op, int rank, int nranks);

// Compares an all-reduce result against the exact expected one; returns the number of wrong
// elements and describes the first in *firstError (if not null).
size_t checkResult(const void* buf, size_t count, collDataType_t type, collRedOp_t op, int nranks,
                   std::string* firstError);

// Counts elements of `buf` that differ from fillInput's (the send buffer must stay untouched).
size_t checkUnchanged(const void* buf, size_t count, collDataType_t type, collRedOp_t op, int rank,
                      int nranks);

// Pseudo-random values in [-1, 1) for floating types (results not exact: for cross-rank
// bit-identity checks).
void fillRandom(void* buf, size_t count, collDataType_t type, int rank, uint64_t seed);

// FNV-1a over bytes; all ranks must get the same hash of the same result.
uint64_t hashBytes(const void* buf, size_t bytes);

}  // namespace coll::perf
