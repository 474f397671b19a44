# Deployment tests (issue 9): tests/deploy/*.py check docker/, deploy/k8s,
# deploy/prometheus and deploy/grafana against the real daemon, kubectl and
# promtool (python3-yaml, kubernetes-client and prometheus from
# scripts/install_deps.sh). The Prometheus server test is an integration test
# (tests/integration/prometheus.test.mjs).
if(NOT TARGET tqserve)
  return()
endif()
# node runs the gRPC health check of the grpc-probes overlay with the
# integration tests' npm packages.
find_program(TQ_NODE node)
foreach(name kustomize dockerfiles dashboard prometheus_config)
  add_test(NAME deploy.${name}
    COMMAND ${CMAKE_COMMAND} -E env
      TQSERVE_BIN=$<TARGET_FILE:tqserve>
      TQSERVE_MODEL=${PROJECT_SOURCE_DIR}/models/stories260K
      TQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}
      TQ_NODE=${TQ_NODE}
      ${TQ_PYTHON3} -W error::ResourceWarning ${PROJECT_SOURCE_DIR}/tests/deploy/test_${name}.py
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/deploy)
  set_tests_properties(deploy.${name} PROPERTIES TIMEOUT 300 LABELS deploy)
endforeach()
