/* check.h -- a tiny assertion harness for the C unit tests. */
#ifndef MS_CHECK_H
#define MS_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,          \
                    __LINE__, #cond);                                       \
            check_failures++;                                               \
        }                                                                   \
    } while (0)
#define CHECK_DONE()                                                        \
    do {                                                                    \
        if (check_failures) {                                               \
            fprintf(stderr, "%d check(s) failed\n", check_failures);        \
            return 1;                                                       \
        }                                                                   \
        printf("ok\n");                                                     \
        return 0;                                                           \
    } while (0)
#endif
