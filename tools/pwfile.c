/* Password files; see pwfile.h. */
#include "pwfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far above any real password; a bigger first line is the wrong file. */
#define PWFILE_MAX 4096

int pwfile_read(const char *path, char **out, char *err, size_t errlen)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO given by mistake must not hang us in open(); it
     * is refused below as not a regular file. The checks run on the open
     * descriptor, so the file cannot be swapped between check and read. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        snprintf(err, errlen, "password file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    char buf[PWFILE_MAX + 1];
    ssize_t n = -1;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "password file %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "password file %s is not a regular file", path);
    } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen, "password file %s is accessible by others (mode %04o): chmod 600 it", path,
                 (unsigned)(st.st_mode & 07777));
    } else {
        size_t got = 0;
        while (got < sizeof buf && (n = read(fd, buf + got, sizeof buf - got)) > 0) got += (size_t)n;
        if (n < 0) snprintf(err, errlen, "password file %s: %s", path, strerror(errno));
        else n = (ssize_t)got;
    }
    close(fd);
    if (n < 0) return -1;
    char *nl = memchr(buf, '\n', (size_t)n);
    size_t len = nl ? (size_t)(nl - buf) : (size_t)n;
    int ok = 0;
    if (!nl && (size_t)n > PWFILE_MAX)
        snprintf(err, errlen, "password file %s: first line longer than %d bytes", path, PWFILE_MAX);
    else if (len == 0) snprintf(err, errlen, "password file %s: the first line is empty", path);
    else if (memchr(buf, '\0', len)) snprintf(err, errlen, "password file %s: NUL byte in the password", path);
    else if (!(*out = strndup(buf, len))) snprintf(err, errlen, "out of memory");
    else ok = 1;
    explicit_bzero(buf, sizeof buf);
    return ok ? 0 : -1;
}

int pwfile_or_env(const char *file, const char *env, char **out, char *err, size_t errlen)
{
    *out = NULL;
    char *value = getenv(env);
    int rc = 0;
    if (!file && value && *value && !(*out = strdup(value))) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    if (value) {
        explicit_bzero(value, strlen(value));
        unsetenv(env);
    }
    if (file) rc = pwfile_read(file, out, err, errlen);
    return rc;
}

void pwfile_free(char *password)
{
    if (!password) return;
    explicit_bzero(password, strlen(password));
    free(password);
}
