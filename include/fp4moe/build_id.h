// fp4moe/build_id.h - which build this is, for what its measurements are valid.
#pragma once

namespace fp4moe {

// FP4MOE_VERSION, '+', then the first 12 hex digits of a SHA-256 over the library's sources and
// headers and its build settings (build type, CUDA architectures, compilers): "0.1.0+3f2a9c01b7de".
// Two builds share it only when they compile the same code the same way. The tuning cache keys
// its entries and names its file by it (cmake/Fp4moeBuildId.cmake writes it).
const char* build_id();

}  // namespace fp4moe
