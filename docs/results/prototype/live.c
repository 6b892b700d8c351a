#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/if_link.h>
int main(int argc, char **argv) {
    /* argv[1]: batch size; argv[2]: the compiled redirect program. */
    const char *obj = argc > 2 ? argv[2] : "redir.bpf.o";
    struct bpf_object *o = bpf_object__open_file(obj, NULL);
    if (!o || bpf_object__load(o)) { fprintf(stderr, "load failed\n"); return 1; }
    int fd = bpf_program__fd(bpf_object__find_program_by_name(o, "redir"));
    unsigned char pkt[60] = {0};
    memset(pkt, 0xff, 6); pkt[6] = 2; pkt[12] = 0x08; pkt[13] = 0x00; pkt[14] = 0x45;
    int batch = argc > 1 ? atoi(argv[1]) : 64;
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    unsigned long total = 0;
    for (int i = 0; i < 4; i++) {
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt, .data_size_in = sizeof(pkt),
                    .repeat = 1 << 24, .flags = BPF_F_TEST_XDP_LIVE_FRAMES, .batch_size = batch);
        if (bpf_prog_test_run_opts(fd, &opts)) { perror("run"); return 1; }
        total += 1 << 24;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%lu frames in %.3f s = %.2f Mpps (batch %d)\n", total, s, total / s / 1e6, batch);
    return 0;
}
