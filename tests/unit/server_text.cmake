# Text side of the front end (server/text): stop strings on streamed output,
# the Jinja subset interpreter and chat templates. The Jinja references come
# from Python jinja2 rendering the same templates as Hugging Face transformers
# does (tests/reference/jinja_ref.py), run as a tq_reference fixture.
if(TARGET tq_server_text)
  tq_unit_test(tq_test_server_text test_output_text.cc test_jinja.cc test_chat_template.cc
    test_tool_calls.cc)
  target_link_libraries(tq_test_server_text PRIVATE tq_server_text nlohmann_json::nlohmann_json)

  add_test(NAME reference.jinja
    COMMAND ${TQ_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/reference/jinja_ref.py
            --cases ${PROJECT_SOURCE_DIR}/tests/data/jinja_cases.json
            --chat ${PROJECT_SOURCE_DIR}/tests/data/chat_templates.json
            --out ${TQ_REF_DIR}/jinja_reference.json)
  set_tests_properties(reference.jinja PROPERTIES FIXTURES_SETUP tq_reference)
endif()
