// signals.h: SIGINT/SIGTERM as a polled flag, so binaries shut down cleanly from their main loop.
#pragma once

namespace strata {

// Installs handlers for SIGINT and SIGTERM that set the flag StopRequested() reads.
void InstallStopSignals();
bool StopRequested();

}  // namespace strata
