// The host registry of the device kernels (host_kernels.h): the kernels of device_kernels.cuh built
// for the host under host_simt.h, each with an entry that unpacks cuLaunchKernel's parameters by the
// kernel's own parameter types.
#include "tests/cuda_double/host_kernels.h"

// clang-format off: the emulation must come before the kernels.
#include "tests/cuda_double/host_simt.h"
#include "src/kernels/cuda/device_kernels.cuh"
// clang-format on

#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace coll::cuda_double {
namespace {

namespace dev = kernels::cuda::dev;
using kernels::devabi::DevScalar;
using kernels::devabi::DevSources;

bool translatePointer(const void*& p, TranslateFn translate) {
  if (p == nullptr) return true;
  p = translate(p);
  return p != nullptr;
}

// Device addresses in an argument -> host ones; false when one is invalid.
template <class T>
bool translateArg(T& arg, TranslateFn translate) {
  if constexpr (std::is_pointer_v<T>) {
    const void* p = arg;
    if (!translatePointer(p, translate)) return false;
    arg = static_cast<T>(const_cast<void*>(p));
    return true;
  } else if constexpr (std::is_same_v<T, DevSources>) {
    // Only the sources the kernel reads: the unused slots may hold anything.
    const int n = arg.n < 0 ? 0 : (arg.n > kernels::devabi::kMaxSources ? kernels::devabi::kMaxSources : arg.n);
    for (int k = 0; k < n; ++k) {
      if (!translatePointer(arg.p[k], translate)) return false;
    }
    return true;
  } else if constexpr (std::is_same_v<T, DevScalar>) {
    return translatePointer(arg.device, translate);
  } else {
    static_assert(std::is_arithmetic_v<T> || std::is_same_v<T, dev::DeviceParams>, "a kernel parameter type to translate");
    return true;
  }
}

template <bool Lockstep, class... Args, size_t... I>
bool run(void (*kernel)(Args...), const LaunchDims& dims, void** params, TranslateFn translate,
         std::index_sequence<I...>) {
  // Copies of the arguments, as a launch takes them (the caller's storage may be reused at once).
  std::tuple<std::decay_t<Args>...> args{*static_cast<const std::decay_t<Args>*>(params[I])...};
  if (!(translateArg(std::get<I>(args), translate) && ...)) return false;
  const dev::EmuGeometry g{{dims.grid[0], dims.grid[1], dims.grid[2]}, {dims.block[0], dims.block[1], dims.block[2]}};
  auto body = [&] { std::apply(kernel, args); };
  if constexpr (Lockstep) dev::emuLaunchLockstep(g, body);
  else dev::emuLaunchSequential(g, body);
  return true;
}

template <class... Args>
constexpr size_t arity(void (*)(Args...)) {
  return sizeof...(Args);
}

// Lockstep: the kernel shuffles within warps (the quantizers), so its lanes must run together.
template <auto Kernel, bool Lockstep>
bool entry(const LaunchDims& dims, void** params, TranslateFn translate) {
  return run<Lockstep>(Kernel, dims, params, translate, std::make_index_sequence<arity(Kernel)>{});
}

struct Named {
  const char* name;
  HostKernel kernel;
};

#define COLL_HOST_TYPED(dt, sfx)                                          \
  {"collDevReduce_" #sfx, &entry<&dev::collDevReduce_##sfx, false>},     \
      {"collDevScale_" #sfx, &entry<&dev::collDevScale_##sfx, false>},   \
      {"collDevDivide_" #sfx, &entry<&dev::collDevDivide_##sfx, false>}, \
      {"collDevCountMismatch_" #sfx, &entry<&dev::collDevCountMismatch_##sfx, false>},
#define COLL_HOST_QUANT(dt, sfx)                                                                                \
  {"collDevQuantize4_" #sfx "_nearest", &entry<&dev::collDevQuantize4_##sfx##_nearest, true>},                 \
      {"collDevQuantize4_" #sfx "_nearest_residual", &entry<&dev::collDevQuantize4_##sfx##_nearest_residual, true>}, \
      {"collDevQuantize4_" #sfx "_stochastic", &entry<&dev::collDevQuantize4_##sfx##_stochastic, true>},       \
      {"collDevQuantize4_" #sfx "_stochastic_residual",                                                        \
       &entry<&dev::collDevQuantize4_##sfx##_stochastic_residual, true>},                                      \
      {"collDevDequantize4_" #sfx, &entry<&dev::collDevDequantize4_##sfx, false>},                              \
      {"collDevWiden_" #sfx, &entry<&dev::collDevWiden_##sfx, false>},

const Named kKernels[] = {
    {"collDevCopy", &entry<&dev::collDevCopy, false>},
    COLL_DEV_TYPES(COLL_HOST_TYPED) COLL_DEV_QUANT_TYPES(COLL_HOST_QUANT)
    {"collDevDequantizeAccumulate4", &entry<&dev::collDevDequantizeAccumulate4, false>},
};

#undef COLL_HOST_TYPED
#undef COLL_HOST_QUANT

}  // namespace

HostKernel findHostKernel(const char* name) {
  if (name == nullptr) return nullptr;
  for (const Named& k : kKernels) {
    if (std::strcmp(k.name, name) == 0) return k.kernel;
  }
  return nullptr;
}

}  // namespace coll::cuda_double
