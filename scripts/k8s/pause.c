/* The pod sandbox process of the test node (scripts/k8s/start-node.sh): it holds the pod's namespaces open,
 * reaps the zombies the pod's PID namespace hands it, and exits 0 on SIGTERM or SIGINT. Built static, so its
 * image is this one file. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
  (void)signo;
  _exit(0);
}

static void on_child(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = on_stop;
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGINT, &action, NULL);
  action.sa_handler = on_child;
  action.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &action, NULL);
  for (;;) {
    pause();
  }
}
