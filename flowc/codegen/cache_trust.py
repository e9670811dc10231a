"""Whether a compile cache's directory can be trusted, and the secret key its entries are
authenticated with (flowc/codegen/cache.py).

Contract:
- `open_key(root)` returns the cache's 32-byte HMAC-SHA256 key, kept in `root/key`. A
  missing root is created with mode 0700; a missing key is written to a 0600 temporary file
  and hard-linked into place, so concurrent first uses agree on one key and no reader sees
  a partial one.
- It raises `Untrusted(reason)` (as ssh's StrictModes does) when the root is not a
  directory owned by the current user, or is group- or other-writable, or when the key is
  not a regular 32-byte file of this user's without group or other permissions: someone
  else who could write there could replace the key, and one who could read it could forge
  entries. The root is opened once and the key opened relative to it without following a
  symlink, so what is checked is what is used.
- It raises OSError when the key cannot be created or read (a read-only cache that has
  none yet): the caller treats that as a cache that cannot be used, without a warning.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

KEY_NAME = "key"
KEY_BYTES = 32
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Untrusted(Exception):
    """The cache directory or its key is not this user's alone; the message says why."""


def _check_dir(st: os.stat_result) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted("it is not a directory")
    if st.st_uid != os.geteuid():
        raise Untrusted(f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise Untrusted(f"it is group- or other-writable (mode {stat.S_IMODE(st.st_mode):o}); "
                        "'chmod go-w' it")


def _read_key(root_fd: int) -> bytes:
    bad = Untrusted(f"its {KEY_NAME} file is not a {KEY_BYTES}-byte file of yours with mode "
                    "0600")
    try:
        fd = os.open(KEY_NAME, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC,
                     dir_fd=root_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink
            raise bad from None
        raise
    st = os.fstat(fd)
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077
            or st.st_size != KEY_BYTES):
        os.close(fd)
        raise bad
    with open(fd, "rb") as f:
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise Untrusted(f"its {KEY_NAME} file changed while read")
    return key


def _create_key(root_fd: int) -> None:
    """Write a fresh key to a temporary file and link it into place (the first link wins)."""
    tmp = f".tmp-key-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600,
                 dir_fd=root_fd)
    try:
        with open(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        with contextlib.suppress(FileExistsError):  # a concurrent first use won
            os.link(tmp, KEY_NAME, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=root_fd)


def _open_root(root: Path) -> int:
    """A descriptor of the root directory, created (mode 0700) when missing."""
    flags = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
    try:
        return os.open(root, flags)
    except FileNotFoundError:
        root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(root, 0o700)
        return os.open(root, flags)


def open_key(root: Path) -> bytes:
    """The cache's key (see the module docstring)."""
    root_fd = _open_root(root)
    try:
        _check_dir(os.fstat(root_fd))
        try:
            return _read_key(root_fd)
        except FileNotFoundError:
            _create_key(root_fd)
            return _read_key(root_fd)
    finally:
        os.close(root_fd)
