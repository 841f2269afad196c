// Capturing a training step into a CUDA graph (--cuda-graph) records the work the step queues on
// its stream and replays it later with one launch: while the step is captured nothing runs, so
// nothing in it may wait for the device or read a result on the host (a loss checked with
// item(), a count copied back), and every value the host passes to a kernel (a learning rate, a
// dropout seed) is frozen at its value during the capture.
//
// While a capture::Scope lives on a thread, the places where dpx reads device results on the host
// (Tensor::item, to_vector, copies between host and device, stream synchronisation) call
// host_read, which throws a CaptureError naming what read and where: the op (kernels/ops.cpp
// names each op while a scope lives) and the labels the caller pushed (the step's phase). The
// same scope on the CPU rehearses a capture: a test runs every model's step under it without a
// GPU, and a read found there is found before the GPU's capture fails with a CUDA error code.
#pragma once
#include <string>

#include "core/error.hpp"

namespace dpx::capture {

struct CaptureError : Error {
  using Error::Error;
};

// A capture (or its rehearsal) on this thread, for `purpose` ("--cuda-graph"): the messages say
// what asked for it. Scopes do not nest.
class Scope {
 public:
  explicit Scope(std::string purpose);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

// Whether a Scope lives on this thread.
bool active();

// Names a stretch of the captured work ("forward", "backward", an op's name) for the messages:
// the innermost label comes first. Costs nothing when no scope is active.
class Where {
 public:
  explicit Where(const char* label);
  ~Where();
  Where(const Where&) = delete;
  Where& operator=(const Where&) = delete;

 private:
  bool pushed_;
};

// Called where the host waits for the device, reads its results or works outside the step's
// stream; `what` says which ("item() reads a value on the host"). Throws CaptureError while a
// scope is active; otherwise nothing.
void not_capturable(const char* what);

}  // namespace dpx::capture
