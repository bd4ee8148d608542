// Signals as stop requests; see interrupt.h.
#include "interrupt.h"

namespace mantissa::cli {
namespace {

volatile std::sig_atomic_t g_caught = 0;

extern "C" void note_signal(int signal) { g_caught = signal; }

}  // namespace

StopOnSignal::StopOnSignal() {
  g_caught = 0;
  struct sigaction sa {};
  sa.sa_handler = note_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // the second signal finds the default action: the process ends
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int StopOnSignal::caught() { return g_caught; }

}  // namespace mantissa::cli
