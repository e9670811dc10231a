"""Every piece of graph- or user-derived text that goes into generated C, assembly or
linker text goes through this module.

Tensor names, node names, device names, rendezvous keys and file names come from the
model, which may be hostile (docs/robustness.md, "Hostile names"). Three forms, and no
other way in:

- `c_string(text)`: a C string literal whose bytes are exactly `text`'s UTF-8 encoding.
  Printable ASCII other than `"`, `\\` and `?` is kept; every other byte is `\\ooo` (three
  octal digits, so a following digit never extends the escape; `?` is escaped so that no
  trigraph can form). The same literal is valid GNU assembler string syntax.
- `c_comment(text)`: text that is inert inside `/* ... */` on one line: it holds no `*`
  (so neither `*/` nor `/*`), no `?` (so no `??/` trigraph), no newline, no control
  character and nothing outside printable ASCII. `\\` becomes `\\\\`; `*`, `?` and every
  character outside printable ASCII become `\\uXXXX` (or `\\UXXXXXXXX` above U+FFFF), the
  way C and Python spell code points: `entrée` reads `entr\\u00e9e`, `a*b` `a\\u002ab`.
- `c_identifier(text)`: a C identifier derived (never copied) from `text`: ASCII letters,
  digits and `_` only.

Kernels do not need this module: their MLIR is built through the MLIR Python API (node
names reach it only as `ir.Location.name(...)` objects, never as parsed text), and the
MLIR and LLVM printers escape every string they print.
"""

from __future__ import annotations

import re

from flowc.ir.errors import FlowcError

C_KEYWORDS = frozenset((
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while"))

_PLAIN_BYTES = frozenset(range(0x20, 0x7F)) - {ord('"'), ord("\\"), ord("?")}


def utf8(text: str) -> bytes:
    """`text` as UTF-8; a string that is not Unicode text (a lone surrogate, which only a
    graph built in Python can hold) is a one-line FlowcError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FlowcError(f"name {text!r} is not valid Unicode text ({exc.reason} at "
                         f"position {exc.start}); names must be UTF-8 encodable") from None


def check_table_names(inputs: list[str], outputs: list[str]) -> None:
    """The names of a graph's inputs and outputs, which the C API returns as NUL-terminated
    UTF-8 (`NAME_input_name(i)`): one holding a NUL character (which the C string would end
    at) or a lone surrogate is a one-line FlowcError naming it."""
    for kind, names in (("input", inputs), ("output", outputs)):
        for i, name in enumerate(names):
            utf8(name)
            if "\0" in name:
                raise FlowcError(f"graph {kind} {i} {name!r} holds a NUL character; input and "
                                 "output names cannot (the C API returns them as NUL-terminated "
                                 "strings)")


def c_string(text: str) -> str:
    """A C string literal of `text`'s UTF-8 bytes, escaped per byte (module docstring)."""
    return '"' + "".join(chr(b) if b in _PLAIN_BYTES else f"\\{b:03o}" for b in utf8(text)) + '"'


def c_comment(text: str) -> str:
    """`text` made inert inside a one-line `/* */` comment (module docstring)."""
    out = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif " " <= c <= "~" and c not in "*?":
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
    return "".join(out)


def c_identifier(text: str) -> str:
    """`text` as a C identifier: characters other than ASCII letters, digits and `_` become
    `_`; a leading digit or a keyword gets a leading `_`; empty text is `_`."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text, flags=re.ASCII) or "_"
    if ident[0].isdigit() or ident in C_KEYWORDS:
        ident = "_" + ident
    return ident


MAX_PREFIX = 64  # characters of a model's symbol prefix (it also names the artifact's files)
# prefixes whose NAME.h would replace a runtime header in the build directory (link.py)
RESERVED_PREFIXES = frozenset({"flowc_rt"})


def model_prefix(name: str | None, graph_name: str) -> str:
    """The artifact's symbol prefix: `c_identifier(name)` when a non-empty name is given
    (`--name`; longer than MAX_PREFIX or in RESERVED_PREFIXES is a one-line FlowcError),
    else `c_identifier` of the graph's name cut to MAX_PREFIX characters, `_` before a
    reserved one (a model's graph name may be anything)."""
    if not name:
        prefix = c_identifier(graph_name)[:MAX_PREFIX]
        return "_" + prefix if prefix in RESERVED_PREFIXES else prefix
    prefix = c_identifier(name)
    if len(prefix) > MAX_PREFIX:
        raise FlowcError(f"model name '{prefix[:20]}...' has {len(prefix)} characters; a "
                         f"symbol prefix has at most {MAX_PREFIX}")
    if prefix in RESERVED_PREFIXES:
        raise FlowcError(f"model name '{prefix}' is reserved (the runtime's header is "
                         f"{prefix}.h); choose another")
    return prefix
