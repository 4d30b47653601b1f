// cc prints the compute capability of CUDA device 0 as "MAJOR.MINOR" (e.g. "9.0"), then
// runs a kernel to prove that the binary holds code for that device: a binary built for
// another architecture fails here with "no kernel image is available for execution".
#include <cstdio>
#include <cuda_runtime.h>

__global__ void arch(int *out) {
#ifdef __CUDA_ARCH__
    *out = __CUDA_ARCH__;
#endif
}

static int check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
        return 1;
    }
    return 0;
}

int main() {
    int count = 0;
    if (check(cudaGetDeviceCount(&count), "cudaGetDeviceCount")) return 1;
    if (count == 0) {
        std::fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    cudaDeviceProp prop;
    if (check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
    std::printf("%d.%d\n", prop.major, prop.minor);

    int *d = nullptr;
    int built = 0;
    if (check(cudaMalloc(&d, sizeof(int)), "cudaMalloc")) return 1;
    if (check(cudaMemset(d, 0, sizeof(int)), "cudaMemset")) return 1;
    arch<<<1, 1>>>(d);
    if (check(cudaGetLastError(), "launching kernel")) return 1;
    if (check(cudaMemcpy(&built, d, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
    cudaFree(d);
    std::fprintf(stderr, "device 0: %s, kernel ran as __CUDA_ARCH__ %d\n", prop.name, built);
    return 0;
}
