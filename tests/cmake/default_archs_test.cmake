# cmake -DFP4MOE_SOURCE_DIR=... -DWORK_DIR=... -P default_archs_test.cmake
# cmake/Fp4moeGpuArchs.cmake against the rules src/hw/build_targets_test.cc holds the library to,
# and the default run targets it derives from what a stand-in nvidia-smi reports.
cmake_minimum_required(VERSION 3.25)
include(${FP4MOE_SOURCE_DIR}/cmake/Fp4moeGpuArchs.cmake)

set(failures 0)
macro(expect what got want)
  if(NOT "${got}" STREQUAL "${want}")
    message(SEND_ERROR "${what}: got '${got}', want '${want}'")
    math(EXPR failures "${failures} + 1")
  endif()
endmacro()

# The rules (the same cases as the C++ test).
foreach(case "80 80 TRUE" "80 86 TRUE" "80 89 TRUE" "86 80 FALSE" "80 90 FALSE" "80 120 FALSE" "120 121 TRUE"
             "90 100 FALSE" "90a 90 TRUE" "100a 100 TRUE" "100a 103 FALSE" "120a 120 TRUE" "120a 121 FALSE"
             "90a 100 FALSE" "100f 100 TRUE" "100f 103 TRUE" "103f 100 FALSE" "120f 121 TRUE" "100f 120 FALSE"
             "80-virtual 80 TRUE" "80-virtual 90 TRUE" "80-virtual 120 TRUE" "86-virtual 80 FALSE"
             "90a-virtual 90 TRUE" "90a-virtual 100 FALSE" "100f-virtual 103 TRUE" "100f-virtual 120 FALSE"
             "9 90 FALSE" "9a 90 FALSE" "1000 90 FALSE" "90b 90 FALSE" "sm_90a 90 FALSE" "-virtual 90 FALSE"
             "80-virtual-virtual 90 FALSE" "80virtual 90 FALSE")
  string(REPLACE " " ";" c "${case}")
  list(GET c 0 target)
  list(GET c 1 sm)
  list(GET c 2 want)
  fp4moe_target_runs_on(${target} ${sm} runs)
  expect("${target} on ${sm}" "${runs}" "${want}")
endforeach()

# A stand-in nvidia-smi per case: what it prints, and its exit status.
file(MAKE_DIRECTORY ${WORK_DIR})
function(default_with name output status want_archs want_added)
  set(smi ${WORK_DIR}/nvidia-smi-${name})
  file(WRITE ${smi} "#!/bin/sh\nprintf '${output}'\nexit ${status}\n")
  file(CHMOD ${smi} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
  set(FP4MOE_NVIDIA_SMI ${smi})
  fp4moe_default_cuda_archs(archs added)
  expect("${name}: run targets" "${archs}" "${want_archs}")
  expect("${name}: added" "${added}" "${want_added}")
  set(failures ${failures} PARENT_SCOPE)
endfunction()

default_with(h200 "9.0\\n" 0 "80;90a" "")
default_with(a10_and_h100 "8.6\\n9.0\\n" 0 "80;90a" "")
default_with(rtx_pro_6000 "12.0\\n" 0 "80;90a;120a" "120a")
default_with(mixed "8.6\\n12.0\\n12.0\\n10.0\\n" 0 "80;90a;120a;100a" "120a;100a")
default_with(b300 "10.3\\n" 0 "80;90a;103a" "103a")
default_with(gb10 "12.1\\n" 0 "80;90a;121a" "121a")
default_with(turing "7.5\\n" 0 "80;90a" "")
default_with(failing "12.0\\n" 1 "80;90a" "")
default_with(unnamed "[N/A]\\n\\n" 0 "80;90a" "")

# No nvidia-smi at all.
set(FP4MOE_NVIDIA_SMI ${WORK_DIR}/no-such-nvidia-smi)
fp4moe_default_cuda_archs(archs added)
expect("no nvidia-smi: run targets" "${archs}" "80;90a")

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} failure(s)")
endif()
message(STATUS "default run targets: all cases pass")
