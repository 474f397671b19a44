# cmake "-DMAKE=<make-random-model command, arguments separated by |>"
#       -DCONFIG=<dir>/config.json -P arch_short_rope.cmake
# Runs the command, then sets rope_scaling.original_max_position_embeddings
# of the written config.json to 32 (see arch.cmake).
string(REPLACE "|" ";" command "${MAKE}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make-random-model failed: ${rc}")
endif()
file(READ ${CONFIG} config)
string(JSON config SET "${config}" rope_scaling original_max_position_embeddings 32)
file(WRITE ${CONFIG} "${config}")
