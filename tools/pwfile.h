/*
 * Password files, for the dlock CLI and seckill: a password given as
 * --password-file FILE never shows in `ps`, in shell history or in an
 * environment a child inherits.
 */
#ifndef DLOCK_TOOLS_PWFILE_H
#define DLOCK_TOOLS_PWFILE_H

#include <stddef.h>

/*
 * Read the password in `path`: its first line, without the newline. The
 * file must be a regular file that neither group nor others may access
 * in any way (mode 0600 or 0400), as ssh wants of a private key, and the
 * line must not be empty. Returns 0 with a malloc'ed string in *out, or -1
 * with a one-line reason in err[errlen] (the file's contents never in it).
 */
int pwfile_read(const char *path, char **out, char *err, size_t errlen);

/*
 * The password of `file` when it is not NULL (pwfile_read), else the value
 * of the environment variable `env`, else none (*out NULL). The variable
 * is removed from the environment either way, and its value wiped from
 * the memory /proc/PID/environ shows: children inherit the environment
 * and have no business with our credentials. An empty value counts as
 * none. Returns 0, or -1 with a reason in err[errlen].
 */
int pwfile_or_env(const char *file, const char *env, char **out, char *err, size_t errlen);

/* Overwrite and free a password read with pwfile_read (NULL is fine). */
void pwfile_free(char *password);

#endif
