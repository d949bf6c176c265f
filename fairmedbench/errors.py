"""Errors shown to users: a clear message, exit code 2, never a deep traceback."""


class FMBError(Exception):
    """Base class for errors whose message is meant for the user."""

    exit_code = 2


class InputError(FMBError, ValueError):
    """Bad input data or arguments: says what is wrong and what to do."""


class MissingResourceError(FMBError, FileNotFoundError):
    """A file, weight or dataset that is not present here; says where to get it."""


def os_error_line(exc: OSError) -> str | None:
    """The one line for an OSError the user can act on (a full or read-only disk, a folder without permission);
    None for any other, which is a bug to show in full."""
    import errno

    if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
        return None
    return (f"{exc.filename or 'a file'}: {exc.strerror}; free space or choose a folder you can write to (--out, "
            "--cache-dir)")
