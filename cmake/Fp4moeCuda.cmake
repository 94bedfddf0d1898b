# Turns the arch lists into nvcc -gencode flags.
#   "90a" -> -gencode=arch=compute_90a,code=sm_90a   (machine code only: 'a' targets have no
#   forward-compatible PTX, and every run target is listed explicitly).
#   "80-virtual" -> -gencode=arch=compute_80,code=compute_80   (PTX alone, which the driver
#   compiles for the GPU at its first use: how the sm_80 device code runs on a later GPU).
function(fp4moe_gencode_flags out_var archs)
  set(flags "")
  foreach(a IN LISTS archs)
    if(a MATCHES "^(.+)-virtual$")
      list(APPEND flags "-gencode=arch=compute_${CMAKE_MATCH_1},code=compute_${CMAKE_MATCH_1}")
    else()
      list(APPEND flags "-gencode=arch=compute_${a},code=sm_${a}")
    endif()
  endforeach()
  set(${out_var} "${flags}" PARENT_SCOPE)
endfunction()

# Applies our CUDA compile settings to a target: explicit -gencode flags instead of CMake's
# CUDA_ARCHITECTURES (which predates the 'a' suffixes).
function(fp4moe_cuda_target target archs)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF
                                             CUDA_SEPARABLE_COMPILATION OFF)
  fp4moe_gencode_flags(gencode "${archs}")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${gencode} --expt-relaxed-constexpr -lineinfo>)
endfunction()
