# CUDA kernel benchmarks (tq_bench_cuda), built with TQ_CUDA also when the
# server is off (the GPU machine: tests/cuda/run_device.sh).
add_executable(tq_bench_cuda ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_bench.cc
                             ${CMAKE_CURRENT_LIST_DIR}/cuda_fill.cu)
target_link_libraries(tq_bench_cuda PRIVATE tq_engine tq_kernels_cuda)
tq_target_warnings(tq_bench_cuda)
# Decode step with and without CUDA graphs (engine/model/decode_graphs.h).
add_executable(tq_bench_cuda_graphs ${CMAKE_CURRENT_LIST_DIR}/cuda_graphs_bench.cc)
target_link_libraries(tq_bench_cuda_graphs PRIVATE tq_engine tq_kernels_cuda)
target_compile_definitions(tq_bench_cuda_graphs PRIVATE
  TQ_MODEL_DIR="${PROJECT_SOURCE_DIR}/models/stories260K")
tq_target_warnings(tq_bench_cuda_graphs)
