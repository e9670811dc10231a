"""The artifact directory, written whole or not at all.

Contract:
- `check_output_dir(path, keep=())` raises a one-line FlowcError unless `path` may receive
  an artifact: it does not exist, or is an empty directory (but for `keep`), or is a flowc
  artifact (a directory holding `manifest.json`). A compile calls it before any work, so a
  refusal is immediate.
- `staged(path, keep=())` yields a fresh, empty directory beside `path`
  (`.NAME.flowc-new-XXXXXXXX`, made with this process's umask). When the block ends without
  an exception, the directory takes `path`'s place by rename: the old one (if any) is
  renamed aside and removed, so no file of an earlier artifact (another model's `libcnn.*`
  beside a new `libmlp.*`) survives, and a process that has the old library mapped keeps it
  intact (the new files are new inodes). The entries `keep` (paths relative to `path`, e.g.
  a dump folder the user put inside the output directory) move from the old directory into
  the new one first. On an exception (a failed link, a full disk) the new directory is
  removed and `path` is left as it was; a killed compile leaves only the hidden
  `.NAME.flowc-new-*` directory beside `path`, never a half-written artifact.
- A symbolic link at `path` is followed: the directory it points to is replaced.
- When the working directory is `path` (`flowc compile m.onnx -o .`) or inside it, the
  directory itself stays (a rename would leave the shell in a removed directory): its old
  entries move aside, then the new ones are renamed in, one by one.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from flowc.ir.errors import FlowcError

MANIFEST = "manifest.json"


def check_output_dir(path: str | os.PathLike, keep: Sequence[str] = ()) -> None:
    """Raise unless `path` is absent, an empty directory (but for the entries `keep`) or a
    flowc artifact."""
    path = Path(path)
    kept = {Path(rel).parts[0] for rel in keep}
    if not path.exists():
        above = next(p for p in Path(os.path.abspath(path)).parents if p.exists())
        if not above.is_dir():
            raise FlowcError(f"output '{path}': '{above}' is a file, not a directory; expected "
                             "a directory to write the artifact into")
        if not os.access(above, os.W_OK | os.X_OK):
            raise FlowcError(f"output '{path}': cannot create it in '{above}' (no permission "
                             "to write there)")
        return
    if not path.is_dir():
        raise FlowcError(f"output '{path}' exists and is not a directory; expected a directory "
                         "to write the artifact into")
    if not (path / MANIFEST).is_file() and any(p.name not in kept for p in path.iterdir()):
        raise FlowcError(f"output directory '{path}' is not empty and holds no flowc artifact "
                         f"(no {MANIFEST}); refusing to replace it: choose another directory")


@contextmanager
def staged(path: str | os.PathLike, keep: Sequence[str] = ()) -> Iterator[Path]:
    """A new directory that replaces `path` when the block succeeds (see the contract)."""
    target = Path(os.path.realpath(path))
    check_output_dir(target, keep)
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = _fresh(target, "new")
    try:
        yield stage
        _replace(stage, target, keep)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _fresh(target: Path, kind: str) -> Path:
    """A new hidden directory beside `target` (mkdir: the process's umask applies)."""
    while True:
        stage = target.parent / f".{target.name}.flowc-{kind}-{secrets.token_hex(4)}"
        try:
            stage.mkdir()
            return stage
        except FileExistsError:
            continue


def _replace(stage: Path, target: Path, keep: Sequence[str]) -> None:
    """Rename `stage` to `target`; an existing `target` is renamed aside, then removed."""
    if not target.exists():
        os.rename(stage, target)
        return
    for rel in keep:
        if (target / rel).exists() and not (stage / rel).exists():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            os.rename(target / rel, stage / rel)
    if _holds_cwd(target):  # renaming it would leave this process (a shell) in a removed one
        _swap_entries(stage, target)
        return
    old = target.parent / f".{target.name}.flowc-old-{secrets.token_hex(4)}"
    os.rename(target, old)
    try:
        os.rename(stage, target)
    except OSError:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _holds_cwd(target: Path) -> bool:
    """Whether the working directory is `target` or inside it."""
    cwd = os.path.realpath(os.getcwd())
    return cwd == str(target) or cwd.startswith(str(target) + os.sep)


def _swap_entries(stage: Path, target: Path) -> None:
    """Replace `target`'s entries by `stage`'s (which holds the kept ones already), the
    directory itself staying: the old entries move aside first, then the new ones in."""
    old = _fresh(target, "old")
    for entry in list(target.iterdir()):
        os.rename(entry, old / entry.name)
    for entry in list(stage.iterdir()):
        os.rename(entry, target / entry.name)
    stage.rmdir()
    shutil.rmtree(old, ignore_errors=True)
