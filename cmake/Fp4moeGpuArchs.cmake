# The default run targets (FP4MOE_CUDA_ARCHS): sm_80 and sm_90a, and the target made for each GPU
# of this machine that neither runs on, so that the first configure on a Blackwell machine (the
# default build holds no machine code for it, and no PTX) builds kernels that run there. The GPUs
# are nvidia-smi's (FP4MOE_NVIDIA_SMI, found on the PATH); without it, or where it fails, the
# default alone. The rules are those of src/hw/build_targets.cc (run_target_runs_on,
# run_target_for); tests/cmake/default_archs_test.cmake holds this file to them.

# Whether run target `target` ("80", "90a", "100f", "80-virtual") has code that runs on compute
# capability `sm` (major x 10 + minor): plain targets on their major version from their minor on,
# 'a' ones on their own version alone, 'f' ones on their family (major version) from their minor
# on; plain PTX ("-virtual") on every later GPU too.
function(fp4moe_target_runs_on target sm out_var)
  set(runs FALSE)
  if(target MATCHES "^([0-9][0-9]?)([0-9])(a|f)?(-virtual)?$")
    set(major ${CMAKE_MATCH_1})
    set(minor ${CMAKE_MATCH_2})
    set(suffix "${CMAKE_MATCH_3}")
    set(ptx "${CMAKE_MATCH_4}")
    math(EXPR sm_major "${sm} / 10")
    math(EXPR sm_minor "${sm} % 10")
    if(suffix STREQUAL "a")
      if(sm_major EQUAL major AND sm_minor EQUAL minor)
        set(runs TRUE)
      endif()
    elseif(ptx AND suffix STREQUAL "")
      if(NOT sm LESS "${major}${minor}")
        set(runs TRUE)
      endif()
    elseif(sm_major EQUAL major AND NOT sm_minor LESS minor)
      set(runs TRUE)
    endif()
  endif()
  set(${out_var} ${runs} PARENT_SCOPE)
endfunction()

# out_var: the run targets; added_var: those added for this machine's GPUs (empty if none).
function(fp4moe_default_cuda_archs out_var added_var)
  set(archs 80 90a)
  set(added "")
  find_program(FP4MOE_NVIDIA_SMI nvidia-smi)
  if(FP4MOE_NVIDIA_SMI)
    execute_process(COMMAND "${FP4MOE_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 30)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" caps "${caps}")
      foreach(cap IN LISTS caps)
        string(STRIP "${cap}" cap)
        if(NOT cap MATCHES "^([0-9]+)\\.([0-9])$")
          continue()  # a blank line, or a GPU nvidia-smi cannot name
        endif()
        math(EXPR sm "${CMAKE_MATCH_1} * 10 + ${CMAKE_MATCH_2}")
        if(sm LESS 80)
          continue()  # the kernels need sm_80 or newer: no target of ours runs there
        endif()
        set(covered FALSE)
        foreach(t IN LISTS archs)
          fp4moe_target_runs_on(${t} ${sm} runs)
          if(runs)
            set(covered TRUE)
          endif()
        endforeach()
        if(NOT covered)
          if(sm GREATER_EQUAL 90)
            set(t "${sm}a")  # wgmma and the other arch-specific features need the 'a' target
          else()
            set(t "${sm}")
          endif()
          # A GPU newer than the toolkit (sm_103 or sm_121 under CUDA 12.8, say) would fail the
          # first .cu file with "Unsupported gpu architecture": said here instead, and not added.
          if(NOT DEFINED _fp4moe_nvcc_archs)
            execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch OUTPUT_VARIABLE _fp4moe_nvcc_archs
                            RESULT_VARIABLE _fp4moe_list_rc ERROR_QUIET TIMEOUT 30)
            if(_fp4moe_list_rc EQUAL 0)
              string(APPEND _fp4moe_nvcc_archs "\n")  # every name ends in a newline
            else()
              set(_fp4moe_nvcc_archs "")
            endif()
          endif()
          if(_fp4moe_nvcc_archs AND NOT _fp4moe_nvcc_archs MATCHES "compute_${sm}\n")
            message(WARNING "fp4moe: this machine's sm_${sm} GPU is newer than ${CMAKE_CUDA_COMPILER} knows "
                            "(nvcc --list-gpu-arch): no machine code is built for it, and none of the built "
                            "targets runs there; a newer CUDA toolkit would build it")
            continue()
          endif()
          list(APPEND archs ${t})
          list(APPEND added ${t})
        endif()
      endforeach()
    endif()
  endif()
  set(${out_var} "${archs}" PARENT_SCOPE)
  set(${added_var} "${added}" PARENT_SCOPE)
endfunction()
