// The device kernels for nvcc: compiled on their own into the fatbin that the gpu layer embeds and
// loads through the driver (CMakeLists.txt's CUDA section), never linked into a host program. No
// CUDA runtime: the kernels need only nvcc's builtins.
#include "src/kernels/cuda/device_kernels.cuh"
