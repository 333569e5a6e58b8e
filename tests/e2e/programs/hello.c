#include <stdio.h>
int main(void)
{
    char b[64];
    if (fgets(b, sizeof b, stdin))
        printf("hello %s", b);
    return 0;
}
