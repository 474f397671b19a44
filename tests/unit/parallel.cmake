# Tensor parallelism (issue 8): the in-process communicator, rank threads and
# sharding plan; TP=2/4 against TP=1 on real and random checkpoints.
tq_unit_test(tq_test_parallel test_parallel_communicator.cc test_parallel_model.cc
             test_parallel_devices.cc)
target_compile_definitions(tq_test_parallel PRIVATE TQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
