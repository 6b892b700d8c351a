/* The pod sandbox's process: holds the pod's namespaces until told to stop
 * (what the registry's pause image does; no registry here). */
#include <signal.h>
#include <unistd.h>

static void done(int sig) { (void)sig; _exit(0); }

int main(void)
{
	signal(SIGINT, done);
	signal(SIGTERM, done);
	for (;;)
		pause();
}
