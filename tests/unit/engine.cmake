# The continuous-batching engine: scheduler tables (fake runner), batched
# execution on the bundled model against one-at-a-time generation, the engine
# thread and its client.
tq_unit_test(tq_test_engine test_scheduler.cc test_prefix_cache.cc test_engine_core.cc test_engine_client.cc
             test_candidate_sampling.cc test_prefix_cache_model.cc)

# The grammar engine (engine/structured): grammar/regex/JSON Schema tables,
# the token mask against a brute-force check, the compile cache.
tq_unit_test(tq_test_structured test_structured.cc)
target_link_libraries(tq_test_structured PRIVATE nlohmann_json::nlohmann_json)
>>>>>>> structured outputs: grammar engine (engine/structured: GBNF-like grammars over bytes, pushdown matcher, JSON Schema / JSON mode / regex / choice compilers, vocabulary trie with per-position token caches, LRU compile cache), token mask in the runner before the sampler (constrained rows take the full-row path), response_format json_object/json_schema, structured_outputs and guided_* on both HTTP routes; conformance suite (46 schemas x 20 samples, python3-jsonschema) and unit tables