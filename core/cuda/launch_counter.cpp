// CUPTI's callback API through dlopen (core/cuda/launch_counter.hpp). Only cupti.h's types and
// constants are used at build time; the functions come from the library found at run time. The
// callback runs in the launching thread: it only moves that thread's counter.
#include "core/cuda/launch_counter.hpp"

#if __has_include(<cupti.h>)
#include <cupti.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "core/launch_count.hpp"

namespace dpx::cuda {

namespace {

using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using EnableCallbackFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);

void CUPTIAPI on_launch(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) this_thread_launches().enter();
  else this_thread_launches().exit();
}

// libcupti beside the libcudart this process uses (the toolkit's lib folder), else by name.
void* open_cupti(std::string& tried) {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&cudaGetDevice), &info) != 0 && info.dli_fname) {
    const std::filesystem::path dir = std::filesystem::path(info.dli_fname).parent_path();
    for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
      const std::string path = (dir / name).string();
      if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
      tried += path + ", ";
    }
  }
  for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
    if (void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    tried += name;
    tried += ", ";
  }
  return nullptr;
}

struct State {
  std::once_flag once;
  bool ok = false;
  std::string why;
};
State& state() {
  static State* s = new State;  // never destroyed: CUPTI may call back while the process exits
  return *s;
}

void start(State& s) {
  std::string tried;
  void* lib = open_cupti(tried);
  if (!lib) {
    s.why = "no libcupti found (tried " + tried + "the library path): kernel counts unknown";
    return;
  }
  auto subscribe = reinterpret_cast<SubscribeFn>(::dlsym(lib, "cuptiSubscribe"));
  auto enable = reinterpret_cast<EnableCallbackFn>(::dlsym(lib, "cuptiEnableCallback"));
  if (!subscribe || !enable) {
    s.why = "libcupti lacks cuptiSubscribe/cuptiEnableCallback: kernel counts unknown";
    return;
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  if (subscribe(&subscriber, on_launch, nullptr) != CUPTI_SUCCESS) {
    s.why = "cuptiSubscribe failed (another CUPTI client, such as a profiler, holds the callbacks): kernel counts unknown";
    return;
  }
  // Every launch entry point of the runtime (the <<<>>> launches of dpx's kernels, cuBLAS's) and
  // of the driver (cuDNN's engines); the counter's nesting rule counts each launch once.
  const CUpti_CallbackId runtime[] = {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
                                      CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
                                      CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000};
  const CUpti_CallbackId driver[] = {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz};
  bool any = false;
  for (CUpti_CallbackId id : runtime) any |= enable(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id) == CUPTI_SUCCESS;
  for (CUpti_CallbackId id : driver) any |= enable(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) == CUPTI_SUCCESS;
  if (!any) {
    s.why = "CUPTI enabled no launch callback: kernel counts unknown";
    return;
  }
  s.ok = true;
}

}  // namespace

bool count_launches(std::string* why) {
  State& s = state();
  std::call_once(s.once, [&] { start(s); });
  if (why) *why = s.why;
  return s.ok;
}

bool counting_launches() {
  State& s = state();
  return s.ok;
}

}  // namespace dpx::cuda

#else  // a toolkit without CUPTI's headers: no counts

namespace dpx::cuda {

bool count_launches(std::string* why) {
  if (why) *why = "this dpx was built without CUPTI's headers (cupti.h): kernel counts unknown";
  return false;
}

bool counting_launches() { return false; }

}  // namespace dpx::cuda

#endif
