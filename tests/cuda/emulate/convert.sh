# Sourced by run.sh and topk_run.sh: emu_convert IN.cu OUT.cc writes the
# kernel source with what the host compiler cannot read turned into the
# emulator's (emu_prelude.h): launches kernel<<<grid, threads, smem, stream>>>(args)
# into EmuKernel(kernel, grid, threads, smem, stream)(args), the dynamic
# shared-memory array into emu_dynamic_smem, launch checks dropped.
emu_convert() {
  sed -e 's|extern __shared__ float smem\[\];|float* smem = emu_dynamic_smem;|' \
      -e 's|\([A-Za-z_][A-Za-z0-9_]*\(<[^;]*>\)\{0,1\}\)<<<\(.*\)>>>(|EmuKernel(\1, \3)(|' \
      -e 's|cudaFuncSetAttribute(|EmuFuncSetAttribute(|' \
      -e 's|TQ_CUDA_CHECK_LAUNCH();||' \
      "$1" > "$2"
  if grep -q "<<<" "$2"; then
    echo "emu_convert: a launch in $1 was not converted" >&2
    return 1
  fi
}
