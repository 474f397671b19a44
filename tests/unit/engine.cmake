# The continuous-batching engine: scheduler tables (fake runner), batched
# execution on the bundled model against one-at-a-time generation, the engine
# thread and its client.
tq_unit_test(tq_test_engine test_scheduler.cc test_prefix_cache.cc test_engine_core.cc test_engine.cc
             test_candidate_sampling.cc test_prefix_cache_model.cc)

# The grammar engine (engine/structured): grammar/regex/JSON Schema tables,
# the token mask against a brute-force check, the compile cache.
tq_unit_test(tq_test_structured test_structured.cc)
target_link_libraries(tq_test_structured PRIVATE nlohmann_json::nlohmann_json)
# Its bounds (issue 41): nullable repetitions against Python's re, the
# compile budget, constraint JSON nesting and size.
tq_unit_test(tq_test_structured_limits test_structured_limits.cc)
target_link_libraries(tq_test_structured_limits PRIVATE nlohmann_json::nlohmann_json)
