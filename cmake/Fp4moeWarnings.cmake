# The warnings every target of ours compiles with: -Wall -Wextra for C++, and for the host code
# of CUDA files (nvcc hands -Xcompiler flags to the host compiler; device code has nvcc's own
# diagnostics). Applied per target, not globally, so that a consumer of the installed package
# gets none of them.
function(fp4moe_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
                                           $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
