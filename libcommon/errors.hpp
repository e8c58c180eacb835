// One error type per layer, mapped once to the exit codes of DESIGN.md §1.
#pragma once
#include <stdexcept>
#include <string>

namespace ca {

enum ExitCode : int { kExitOk = 0, kExitUsage = 1, kExitBadInput = 2, kExitEnvironment = 3, kExitInternal = 4 };

struct Error : std::runtime_error {
  Error(int code, const std::string& what) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};
struct UsageError : Error { explicit UsageError(const std::string& w) : Error(kExitUsage, w) {} };
struct InputError : Error { explicit InputError(const std::string& w) : Error(kExitBadInput, w) {} };
struct EnvironmentError : Error { explicit EnvironmentError(const std::string& w) : Error(kExitEnvironment, w) {} };
struct InternalError : Error { explicit InternalError(const std::string& w) : Error(kExitInternal, w) {} };
// The reader of our output went away (`tool | head -n 100`): not a failure, the reader has what it
// asked for. The tool stops at once and exits 0, like a Unix filter stopped by SIGPIPE but without
// failing `set -o pipefail` pipelines. A full disk stays an EnvironmentError.
struct OutputClosed : Error { explicit OutputClosed(const std::string& w) : Error(kExitOk, w) {} };

// A record that parses but lacks or mistypes a field the tool needs (DESIGN.md §1): it is passed on
// with an `error` section, or is fatal under --strict.
struct FieldError : std::runtime_error {
  FieldError(std::string field_, std::string reason_)
      : std::runtime_error(field_ + ": " + reason_), field(std::move(field_)), reason(std::move(reason_)) {}
  std::string field;
  std::string reason;
};

}  // namespace ca
