/* LD_PRELOAD shim for tests/integration/test_lua_grpc_deadlines.py: gettimeofday (the clock
 * luasocket times its waits on) steps back HARP_WALL_STEP_S seconds, for good, once the file
 * HARP_WALL_STEP_FILE exists: a wall clock set back by NTP or `date -s`, in this process alone.
 * CLOCK_MONOTONIC is left alone. Build: cc -shared -fPIC -o wall_step.so wall_step.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    static int (*real)(struct timeval *restrict, void *restrict);
    static long step = -1;
    int rc;

    if (!real)
        real = (int (*)(struct timeval *restrict, void *restrict))dlsym(RTLD_NEXT, "gettimeofday");
    rc = real(tv, tz);
    if (step < 0) {
        const char *file = getenv("HARP_WALL_STEP_FILE");
        const char *secs = getenv("HARP_WALL_STEP_S");
        if (file && access(file, F_OK) == 0)
            step = secs ? atol(secs) : 8;
    }
    if (rc == 0 && step > 0)
        tv->tv_sec -= step;
    return rc;
}
