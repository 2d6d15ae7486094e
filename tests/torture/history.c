/* History files: one text line per event (see history.h). */
#include "history.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t tt_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void tt_sleep_ms(long ms)
{
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

unsigned long long tt_rand(unsigned long long *state)
{
    unsigned long long z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

long tt_rand_between(unsigned long long *state, long lo, long hi)
{
    return hi <= lo ? lo : lo + (long)(tt_rand(state) % (unsigned long long)(hi - lo + 1));
}

int tt_open(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

/* A field that holds no blanks, so that lines split on blanks. */
static const char *word(const char *s)
{
    return *s ? s : "-";
}

void tt_write(int fd, const tt_event *e)
{
    char line[256];
    int n = snprintf(line, sizeof line, "%c %c %d %d %d %ld %s %lld %lld %s %llu %lld\n", e->kind, e->mode, e->pid,
                     e->holder, e->client, e->hold, word(e->name), (long long)e->t0, (long long)e->t1, word(e->result),
                     (unsigned long long)e->token, e->value);
    if (n > 0 && (size_t)n < sizeof line) {
        ssize_t w = write(fd, line, (size_t)n);
        (void)w;
    }
}

int tt_parse(const char *line, tt_event *e)
{
    memset(e, 0, sizeof *e);
    long long t0, t1;
    unsigned long long token;
    int n = sscanf(line, "%c %c %d %d %d %ld %63s %lld %lld %15s %llu %lld", &e->kind, &e->mode, &e->pid, &e->holder,
                   &e->client, &e->hold, e->name, &t0, &t1, e->result, &token, &e->value);
    if (n != 12) return -1;
    e->t0 = t0;
    e->t1 = t1;
    e->token = token;
    return 0;
}

int tt_read_dir(const char *dir, tt_event **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".log") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char line[512];
        while (fgets(line, sizeof line, f)) {
            tt_event e;
            if (tt_parse(line, &e) != 0) continue;
            if (*n == cap) {
                cap = cap ? 2 * cap : 1024;
                tt_event *grown = realloc(*out, cap * sizeof *grown);
                if (!grown) {
                    fclose(f);
                    closedir(d);
                    return -1;
                }
                *out = grown;
            }
            (*out)[(*n)++] = e;
        }
        fclose(f);
    }
    closedir(d);
    return 0;
}
