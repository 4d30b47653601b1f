#include <stdio.h>

int main(void) {
    printf("hello from cmake-hello\n");
    return 0;
}
