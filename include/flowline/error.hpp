// flowline/error.hpp — the exceptions flowline throws.
//
// flowline reports failures with exceptions derived from flowline::Error. Each says where the problem is:
// a config error carries every diagnostic of a flow file (file:line:column), an input error the file and
// line, an executor error the executor's name. Messages are complete sentences meant for the user.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace flowline {

// Base of every exception flowline throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A place in a text file. line and column are 1-based; line 0 means "the file as a whole".
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  // "flow.yml:14:7", "flow.yml" when line is 0, "" when nothing is known.
  std::string to_string() const;
};

// One problem found in a configuration, in compiler style: "flow.yml:14:7: executor 'enc': ...".
struct Diagnostic {
  SourceLocation where;
  std::string message;

  std::string to_string() const;
};

// A flow configuration (YAML or built in code) is invalid. Holds every problem found, not just the first.
class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const noexcept { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

// An input file (documents to process) is missing, unreadable or malformed. what() names file and line.
class InputError : public Error {
 public:
  InputError(SourceLocation where, const std::string& message);
  const SourceLocation& where() const noexcept { return where_; }

 private:
  SourceLocation where_;
};

// An executor failed: while being constructed, or while processing a request. what() starts with
// "executor 'NAME': ".
class ExecutorError : public Error {
 public:
  ExecutorError(std::string executor, const std::string& message);
  const std::string& executor() const noexcept { return executor_; }
  // The message without the "executor 'NAME': " prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string executor_;
  std::string detail_;
};

// The request itself is wrong (a parameter out of its bounds, a filter flowline does not have): the gateway
// answers 422 / INVALID_ARGUMENT with the message. Thrown by a handler; what() names the parameter and the bound.
class RequestError : public Error {
 public:
  using Error::Error;
};

// Closest candidate to `word` by edit distance, or "" when none is close enough to be a likely typo.
// Used for "did you mean" hints.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace flowline
