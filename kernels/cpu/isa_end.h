// Closes the level opened by isa_begin.h (see there).
#if TQ_CPU_ISA_LEVEL == 2 || TQ_CPU_ISA_LEVEL == 1
#pragma GCC pop_options
#endif
