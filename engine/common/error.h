// Error type for problems with user-supplied input (model files, flags).
#pragma once

#include <stdexcept>
#include <string>

namespace tq {

/// Thrown for bad user input found at start-up: a missing or corrupt model
/// file, an unsupported architecture or dtype, an invalid flag. what() is one
/// line that names the file (or flag) and the problem, fit to print as is.
/// Run-time conditions (KV blocks exhausted, a request rejected) are return
/// values, not exceptions.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tq
