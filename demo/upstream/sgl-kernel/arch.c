/* Prints the CUDA architectures this "kernel library" was built for. */
#include <stdio.h>

#ifndef ARCH_LIST
#error "build with -DARCH_LIST=..."
#endif

int main(void) {
	printf("sgl-kernel (demo) built for TORCH_CUDA_ARCH_LIST=%s\n", ARCH_LIST);
	return 0;
}
