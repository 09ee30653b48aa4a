/*
 * onnx_extdata.c - reading a tensor's external data (data_location =
 * EXTERNAL) without leaving the directory the caller trusts.
 *
 * A model file is untrusted: its `location` must not reach /etc/passwd
 * through a symbolic link, a '..' or an absolute path, nor hang the import
 * on a FIFO. So the location is opened one component at a time with
 * openat(O_NOFOLLOW) from a descriptor of the data directory: no component
 * may be a symbolic link or '..', each step is relative to the directory
 * the previous one opened (no window for a rename to swap a link in), and
 * the file must be a regular one. Only where the caller names a second
 * directory (external_data_allowed_dir) may a link lead there.
 *
 * The component walk is used rather than Linux's openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), which does the same, because it works on every
 * POSIX kernel and leaves one code path to test.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_internal.h"

#define S(x) ((x) ? (x) : "")

/* O_NONBLOCK: opening a FIFO with no writer returns at once (and fstat then
 * refuses it) instead of waiting forever; it changes nothing for regular
 * files. */
#define OPEN_DIR (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
#define OPEN_FILE (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)

/* Opens the relative path `rel` beneath directory descriptor `dir`, one
 * component at a time, refusing symbolic links and '..'. Returns a
 * descriptor, or -1 with errno: ELOOP for a link (or ENOTDIR where a
 * component that must be a directory is not one), EXDEV for '..'. */
static int open_beneath(int dir, const char *rel) {
    char comp[NAME_MAX + 1];
    int fd = dup(dir);
    const char *p = rel;
    while (fd >= 0) {
        while (*p == '/') p++;
        size_t len = strcspn(p, "/");
        const char *next = p + len;
        while (*next == '/') next++;
        bool last = *next == '\0';
        if (len == 0 || len > NAME_MAX) {
            close(fd);
            errno = len ? ENAMETOOLONG : ENOENT;
            return -1;
        }
        memcpy(comp, p, len);
        comp[len] = '\0';
        p = next;
        if (strcmp(comp, ".") == 0 && !last) continue;
        if (strcmp(comp, "..") == 0) {
            close(fd);
            errno = EXDEV;
            return -1;
        }
        int sub = openat(fd, comp, last ? OPEN_FILE : OPEN_DIR);
        int saved = errno;
        close(fd);
        errno = saved;
        fd = sub;
        if (last) return fd;
    }
    return -1;
}

/* Opens `rel` beneath the directory `root`. */
static int open_in_dir(const char *root, const char *rel) {
    int dir = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    int fd = open_beneath(dir, rel);
    int saved = errno;
    close(dir);
    errno = saved;
    return fd;
}

/* Where root/loc passes through a link, the caller may still allow it if
 * everything resolves inside `allowed` (a hub cache's snapshot linking into
 * its blobs, say): the resolved path's part below `allowed` is then opened
 * beneath it as above, so a link swapped in after realpath is refused. */
static int open_allowed(const char *root, const char *loc,
                        const char *allowed) {
    char *joined = malloc(strlen(root) + strlen(loc) + 2);
    char *target = NULL, *base = NULL;
    int fd = -1, err = ELOOP;
    if (!joined) {
        errno = ENOMEM;
        return -1;
    }
    sprintf(joined, "%s/%s", root, loc);
    target = realpath(joined, NULL);
    base = realpath(allowed, NULL);
    if (target && base) {
        size_t bl = strlen(base);
        const char *rest = NULL;
        if (bl == 1) /* the allowed directory is "/" */
            rest = target + 1;
        else if (strncmp(target, base, bl) == 0 && target[bl] == '/')
            rest = target + bl + 1;
        if (rest && *rest) {
            fd = open_in_dir(base, rest);
            err = errno;
        }
    } else {
        err = errno;
    }
    free(joined);
    free(target);
    free(base);
    errno = err;
    return fd;
}

/* The error for a failed open of loc: why, in words a user can act on. */
static mg_status open_error(const char *tname, const char *loc,
                            const char *root, int err) {
    if (err == ELOOP || err == ENOTDIR || err == EXDEV)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "onnx: tensor '%s': external data location '%s' "
                            "is or passes through a symbolic link or '..' "
                            "(refused: external data must lie in '%s' itself; "
                            "options.external_data_allowed_dir may name a "
                            "directory that links may lead to)",
                            tname, loc, root);
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "onnx: tensor '%s': cannot open external data file "
                        "'%s' in '%s': %s",
                        tname, loc, root, strerror(err));
}

/* Reads exactly len bytes at offset of fd. */
static bool read_at(int fd, uint8_t *buf, int64_t len, int64_t offset) {
    while (len > 0) {
        size_t chunk = len > (int64_t)1 << 30 ? (size_t)1 << 30 : (size_t)len;
        ssize_t got = pread(fd, buf, chunk, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        buf += got;
        len -= got;
        offset += got;
    }
    return true;
}

mg_status mgi_onnx_read_external(mgi_octx *c, const char *tname,
                                 const char *loc, int64_t offset, int64_t len,
                                 uint8_t **out) {
    *out = NULL;
    const char *root =
        c->opts.external_data_dir ? c->opts.external_data_dir : ".";
    if (!loc || !loc[0] || loc[0] == '/')
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "onnx: tensor '%s': external data location '%s' "
                            "must be a relative path inside the model's "
                            "directory",
                            tname, S(loc));
    int fd = open_in_dir(root, loc);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR) &&
        c->opts.external_data_allowed_dir)
        fd = open_allowed(root, loc, c->opts.external_data_allowed_dir);
    if (fd < 0) return open_error(tname, loc, root, errno);
    struct stat st;
    mg_status s = MG_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = mg_set_error(MG_ERR_INVALID_ARG,
                         "onnx: tensor '%s': external data location '%s' is "
                         "not a regular file",
                         tname, loc);
    else if (offset < 0 || len < 0 || offset > (int64_t)st.st_size ||
             len > (int64_t)st.st_size - offset)
        s = mg_set_error(MG_ERR_INVALID_ARG,
                         "onnx: tensor '%s': external data [%lld, +%lld) is "
                         "past the end of '%s' (%lld bytes)",
                         tname, (long long)offset, (long long)len, loc,
                         (long long)st.st_size);
    uint8_t *buf = s ? NULL : malloc(len ? (size_t)len : 1);
    if (!s && !buf) s = mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    if (!s && !read_at(fd, buf, len, offset))
        s = mg_set_error(MG_ERR_INVALID_ARG,
                         "onnx: tensor '%s': reading external data '%s' "
                         "failed",
                         tname, loc);
    close(fd);
    if (s) {
        free(buf);
        return s;
    }
    *out = buf;
    return MG_OK;
}
