// Ctrl-C (SIGINT) and SIGTERM during training, as a request rather than a kill: while a StopOnSignal
// lives, the first of them is only noted, and the trainer stops at the next step boundary, writes a
// checkpoint where the run has a directory, and the command exits 130 (SIGINT) or 143 (SIGTERM), as a
// shell reports a process killed by it. A second signal is not caught: it ends the process at once.
#pragma once

#include <csignal>
#include <stdexcept>
#include <string>

namespace mantissa::cli {

// Called first thing in main(), before any other thread exists: SIGINT and SIGTERM are blocked in every
// thread the process makes and received by one thread that waits for them, which ends the process with
// the signal's default action unless a StopOnSignal lives. (Threads made before it would still take them.)
void route_stop_signals();

class StopOnSignal {
 public:
  StopOnSignal();  // notes the first SIGINT or SIGTERM instead of ending the process
  ~StopOnSignal();  // and no longer
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  // The signal noted so far (SIGINT or SIGTERM), 0 for none.
  static int caught();
};

// What cli::train throws once a caught signal has stopped the run: main() prints it and exits `status`.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), status_(128 + signal) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace mantissa::cli
