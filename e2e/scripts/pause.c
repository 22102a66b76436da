/* The node's pod sandbox process (its `sandbox_image`): waits for SIGTERM or SIGINT and reaps
 * children, as the upstream pause container does. Built statically by e2e/scripts/node.sh
 * because no pause image can be pulled on the test ground. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    for (;;) {
        pause();
    }
}
