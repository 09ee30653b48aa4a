# Sourced by scripts/demo.sh: pick OpenBLAS kernels for this CPU.
# Debian 12's OpenBLAS 0.3.21 does not recognise some newer CPUs and falls
# back to its SSE3 "Prescott" kernels (4.5x slower sgemm on the machine
# bench/results was measured on). Unless the caller chose a core, name the
# widest one the CPU supports; bench/run.sh does the same and records it.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
    if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
    fi
fi
