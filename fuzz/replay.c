/*
 * Runs a fuzz target without libFuzzer: every file named on the command
 * line, then a fixed number of mutations of each (byte flips, deletes,
 * inserts of the target's own fragments) from a fixed seed, so every CI run
 * covers the same ground under the sanitizers and any crash reproduces.
 * Shared by every target; each supplies fuzz_fragments (the pieces of its
 * input language worth splicing in) and fuzz_rounds (mutations per corpus
 * file, overridden by FUZZ_ROUNDS).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern const char *const fuzz_fragments[]; /* NULL-terminated */
extern const long fuzz_rounds;

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t mutate(unsigned char *buf, size_t len, size_t cap)
{
    int ops = 1 + (int)(next_rand() % 4);
    for (int i = 0; i < ops; i++) {
        uint64_t r = next_rand();
        size_t pos = len ? (size_t)(r >> 8) % (len + 1) : 0;
        switch (r % 4) {
        case 0: /* flip a byte */
            if (len) buf[pos % len] = (unsigned char)(next_rand() & 0xff);
            break;
        case 1: /* delete a span */
            if (len) {
                size_t n = 1 + next_rand() % 8;
                size_t at = pos % len;
                if (at + n > len) n = len - at;
                memmove(buf + at, buf + at + n, len - at - n);
                len -= n;
            }
            break;
        default: { /* insert a fragment */
            size_t nf = 0;
            while (fuzz_fragments[nf]) nf++;
            const char *f = fuzz_fragments[next_rand() % nf];
            size_t n = strlen(f);
            if (len + n <= cap) {
                memmove(buf + pos + n, buf + pos, len - pos);
                memcpy(buf + pos, f, n);
                len += n;
            }
        }
        }
    }
    return len;
}

int main(int argc, char **argv)
{
    long rounds = fuzz_rounds;
    const char *env = getenv("FUZZ_ROUNDS");
    if (env) rounds = strtol(env, NULL, 10);
    long runs = 0;
    for (int i = 1; i < argc; i++) {
        static unsigned char seed[16384], buf[20000];
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 2;
        }
        size_t len = fread(seed, 1, sizeof seed, f);
        fclose(f);
        LLVMFuzzerTestOneInput(seed, len);
        runs++;
        for (long r = 0; r < rounds; r++) {
            size_t n = len;
            memcpy(buf, seed, len);
            for (int depth = 0; depth < 3; depth++) {
                n = mutate(buf, n, sizeof buf);
                LLVMFuzzerTestOneInput(buf, n);
                runs++;
            }
        }
    }
    printf("replay: %ld inputs, no failure\n", runs);
    return 0;
}
