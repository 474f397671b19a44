#!/bin/sh
# The per-level kernel objects (kernels/cpu/isa_begin.h) keep their wider
# instructions inside their own namespace: no function outside
# tq::kernels::cpu::isa_avx2 / isa_avx512 (a standard-library template or
# inline function, which the linker may pick from any level's object for the
# whole program) has a VEX/EVEX instruction, and the level's own code does
# use its registers (ymm for avx2, zmm for avx512), so the pragma took effect.
# Usage: check_isa_objects.sh "<avx2 objects;...>" "<avx512 objects;...>"
set -eu
status=0
check() {  # $1: ';'-separated objects, $2: namespace, $3: register the level must use
  used=0
  old_ifs=$IFS
  IFS=';'
  for obj in $1; do
    IFS=$old_ifs
    leaks=$(objdump -d --no-show-raw-insn "$obj" | awk -v ns="$2" '
      /^[0-9a-f]+ <.*>:$/ { name = $2; inside = index(name, ns) > 0; next }
      /%[yz]mm|\tv[a-z0-9]+ / { if (!inside) print name }' | sort -u)
    if [ -n "$leaks" ]; then
      echo "FAIL: $obj: AVX instructions outside $2 in: $leaks"
      status=1
    fi
    if objdump -d "$obj" | grep -q "%$3"; then used=1; fi
    IFS=';'
  done
  IFS=$old_ifs
  if [ "$used" = 0 ]; then
    echo "FAIL: no %$3 register in the $2 objects"
    status=1
  fi
}
check "$1" isa_avx2 ymm
check "$2" isa_avx512 zmm
[ "$status" = 0 ] && echo "ok: AVX code only inside isa_avx2 / isa_avx512"
exit "$status"
