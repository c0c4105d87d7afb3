// Which graph and launch calls wait for a kernel already running in the same context? Ranks that
// share a GPU as threads share one context, and a rank's kernel may spin until a peer's call
// arrives: a driver call on the peer that waits for running kernels then stalls both until the
// spinning kernel's timeout. Here a spinner (released from the host, or ending by itself after
// SPIN_MS) runs on one non-blocking stream while the host times each call below on another:
// a call that takes about SPIN_MS waited for it.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o instantiate-wait scripts/probe/instantiate-wait.cu && ./instantiate-wait
//   (and again under CUDA_MODULE_LOADING=EAGER)
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <functional>

#include "check.cuh"

constexpr unsigned long long SPIN_MS = 1500;

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__global__ void spinner(volatile int* release) {
  const unsigned long long start = now_ns();
  while (*release == 0 && now_ns() - start < SPIN_MS * 1000000ull) {
  }
}
__global__ void plain(int* out) { out[threadIdx.x] += 1; }
__global__ void never_launched(int* out) { out[threadIdx.x] += 2; }
// Local memory: a stack array indexed at run time.
template <int N>
__global__ void with_local(int* out, int k) {
  int a[N];
  for (int i = 0; i < N; ++i) a[i] = out[(i + threadIdx.x) & 255];
  out[threadIdx.x] = a[(k + threadIdx.x) % N];
}
__global__ void pdl_first(int* out) {
  asm volatile("griddepcontrol.launch_dependents;");
  out[threadIdx.x] += 3;
}
__global__ void pdl_second(int* out) {
  asm volatile("griddepcontrol.wait;");
  out[threadIdx.x] += 4;
}

static double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int main() {
  int* release;
  CK(cudaHostAlloc(&release, sizeof(int), cudaHostAllocMapped));
  int* out;
  CK(cudaMalloc(&out, 4096));
  CK(cudaMemset(out, 0, 4096));
  cudaStream_t spin, work;
  CK(cudaStreamCreateWithFlags(&spin, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking));
  // Warm what the cases use "before": plain, with_local<64>, the PDL pair.
  plain<<<1, 256, 0, work>>>(out);
  with_local<64><<<1, 256, 0, work>>>(out, 1);
  CK(cudaStreamSynchronize(work));
  auto pdl_pair = [&](cudaStream_t s) {
    pdl_first<<<1, 256, 0, s>>>(out);
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = 1;
    cfg.blockDim = 256;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, pdl_second, out));
  };
  pdl_pair(work);
  CK(cudaStreamSynchronize(work));

  auto capture = [&](const std::function<void(cudaStream_t)>& body) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(work, cudaStreamCaptureModeThreadLocal));
    body(work);
    CK(cudaStreamEndCapture(work, &g));
    return g;
  };
  // Times `op` while the spinner, started by `start`, runs; then releases it.
  auto timed = [&](const char* name, const std::function<void()>& start, const std::function<void()>& op) {
    *release = 0;
    start();
    const auto t = std::chrono::steady_clock::now();
    while (ms_since(t) < 50) {
    }
    const auto t0 = std::chrono::steady_clock::now();
    op();
    const double ms = ms_since(t0);
    *release = 1;
    CK(cudaStreamSynchronize(spin));
    CK(cudaStreamSynchronize(work));
    printf("%-58s %9.3f ms%s\n", name, ms, ms > 0.5 * SPIN_MS ? "   <- waited for the spinner" : "");
  };
  auto beside = [&](const char* name, const std::function<void()>& op) {
    timed(name, [&] {
      spinner<<<1, 32, 0, spin>>>(release);
      CK(cudaGetLastError());
    }, op);
  };

  cudaGraph_t g1 = capture([&](cudaStream_t s) { plain<<<1, 256, 0, s>>>(out); });
  cudaGraphExec_t e1;
  beside("instantiate: a kernel launched before", [&] { CK(cudaGraphInstantiate(&e1, g1, 0)); });
  beside("first launch of that graph", [&] { CK(cudaGraphLaunch(e1, work)); });
  beside("second launch", [&] { CK(cudaGraphLaunch(e1, work)); });
  cudaGraph_t g2 = capture([&](cudaStream_t s) { never_launched<<<1, 256, 0, s>>>(out); });
  cudaGraphExec_t e2;
  beside("instantiate: a kernel never launched", [&] { CK(cudaGraphInstantiate(&e2, g2, 0)); });
  cudaGraph_t g3 = capture(pdl_pair);
  cudaGraphExec_t e3;
  beside("instantiate: a PDL pair launched before", [&] { CK(cudaGraphInstantiate(&e3, g3, 0)); });
  beside("first launch of the PDL graph", [&] { CK(cudaGraphLaunch(e3, work)); });
  cudaGraph_t g4 = capture([&](cudaStream_t s) { with_local<64><<<1, 256, 0, s>>>(out, 2); });
  cudaGraphExec_t e4;
  beside("instantiate: local memory, launched before", [&] { CK(cudaGraphInstantiate(&e4, g4, 0)); });
  cudaGraph_t g5 = capture([&](cudaStream_t s) { with_local<2048><<<132, 1024, 0, s>>>(out, 3); });
  cudaGraphExec_t e5;
  beside("instantiate: more local memory, never launched", [&] { CK(cudaGraphInstantiate(&e5, g5, 0)); });
  beside("first launch of that graph", [&] { CK(cudaGraphLaunch(e5, work)); });
  cudaGraph_t g6 = capture([&](cudaStream_t s) { plain<<<1, 256, 0, s>>>(out); });
  cudaGraphExec_t e6;
  beside("instantiate with upload on a non-blocking stream", [&] {
    cudaGraphInstantiateParams p{};
    p.flags = cudaGraphInstantiateFlagUpload;
    p.uploadStream = work;
    CK(cudaGraphInstantiateWithParams(&e6, g6, &p));
  });
  beside("graph exec destroy", [&] { CK(cudaGraphExecDestroy(e1)); });
  beside("graph destroy", [&] { CK(cudaGraphDestroy(g1)); });
  beside("event create", [&] { cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)); });
  beside("cudaMalloc 64 MiB", [&] { void* p; CK(cudaMalloc(&p, 64 << 20)); });
  void* freed;
  CK(cudaMalloc(&freed, 1 << 20));
  beside("cudaFree", [&] { CK(cudaFree(freed)); });
  beside("plain kernel launch (eager)", [&] { plain<<<1, 256, 0, work>>>(out); CK(cudaGetLastError()); });

  // The spinner inside a graph replay, as a peer's replayed collective spins.
  cudaGraph_t gs;
  CK(cudaStreamBeginCapture(spin, cudaStreamCaptureModeThreadLocal));
  spinner<<<1, 32, 0, spin>>>(release);
  CK(cudaStreamEndCapture(spin, &gs));
  cudaGraphExec_t es;
  CK(cudaGraphInstantiate(&es, gs, 0));
  auto besideGraph = [&](const char* name, const std::function<void()>& op) { timed(name, [&] { CK(cudaGraphLaunch(es, spin)); }, op); };
  cudaGraphExec_t e7, e8, e9;
  besideGraph("[spinner in a graph] instantiate: plain", [&] { CK(cudaGraphInstantiate(&e7, capture([&](cudaStream_t s) { plain<<<1, 256, 0, s>>>(out); }), 0)); });
  besideGraph("[spinner in a graph] instantiate: the spinner's kernel", [&] { CK(cudaGraphInstantiate(&e8, capture([&](cudaStream_t s) { spinner<<<1, 32, 0, s>>>(release); }), 0)); });
  besideGraph("[spinner in a graph] instantiate: a PDL pair", [&] { CK(cudaGraphInstantiate(&e9, capture(pdl_pair), 0)); });
  besideGraph("[spinner in a graph] launch of another graph", [&] { CK(cudaGraphLaunch(e7, work)); });
  besideGraph("[spinner in a graph] exec destroy of another graph", [&] { CK(cudaGraphExecDestroy(e7)); });
  printf("done\n");
  return 0;
}
