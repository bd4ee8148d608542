// The library's error kinds, in one place. Everything mantissa throws at a caller is one of these (or
// std::bad_alloc): a command maps each kind to its exit status, the Python module to its exception, and
// neither has to know what a reader used inside (a number parser, zlib, the filesystem library).
//
//   UsageError        a setting the caller gave is not one mantissa can use (a flag, a keyword, a name);
//                     a std::invalid_argument, so code that catches those keeps working
//   Error             the base of the rest, the things found in files and while running:
//     InputFileError    a file named to be read is not one (a FIFO, too large, missing)
//     DataError         a data file's content is malformed
//     CheckpointError   a checkpoint or safetensors file cannot be used
//     ...               (OutputWriteError, DistributedError, NonFiniteError, LossScaleCollapse,
//                       train::TrainingStalled)
//
// A reader's public function ends in rethrow_as<ItsKind>(path), the one place where anything else that
// escapes becomes the reader's kind, with the file named (tests/unit/reader_errors_test.cpp feeds every
// reader mutated files and fails on any other exception type).
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mantissa {

class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "where: what", unless what already begins with where.
inline std::string error_in(std::string_view where, std::string_view what) {
  if (where.empty() || what.substr(0, where.size()) == where) return std::string(what);
  return std::string(where) + ": " + std::string(what);
}

// Called in a catch handler: rethrows the exception being handled, as E("where: what") unless it is an
// E already, std::bad_alloc (the machine's, not the file's) or no std::exception. A reader's public
// function is a function-try-block ending in
//   catch (...) { rethrow_as<DataError>(path.string()); }
template <class E>
[[noreturn]] void rethrow_as(std::string_view where) {
  try {
    throw;
  } catch (const E&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw E(error_in(where, e.what()));
  }
}

}  // namespace mantissa
