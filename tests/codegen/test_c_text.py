"""codegen/emit/c_text.py, checked by a C compiler: a `c_string` literal's bytes are exactly the
text's UTF-8 bytes; a `c_comment` is inert (the program preprocesses to the same tokens as
with empty comments, under -trigraphs -Werror); `c_identifier` and `model_prefix` derive
identifiers. Random texts (hypothesis) mix Unicode with C metacharacters; each batch of
texts is one cc invocation, so the default suite stays fast (FLOWC_FUZZ_EXAMPLES raises the
count; the `slow` variant runs many more)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowc.codegen.emit.c_text import (
    C_KEYWORDS,
    MAX_PREFIX,
    c_comment,
    c_identifier,
    c_string,
    check_table_names,
    model_prefix,
)
from flowc.ir.errors import FlowcError

CC = os.environ.get("CC", "cc")
pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="needs a C compiler")

# C metacharacters: comment ends and starts, preprocessor lines, quotes, escapes, line
# splices, trigraphs, NUL, CR, line/paragraph separators, a digit after an octal escape
META = ["*/", "/*", "//", "\n#", "\n#include <stdlib.h>\n", '"', "'", "\\", "\\\n", "??/",
        "??=", "\0", "\r", "\u2028", "\u2029", "\t", "\x7f", "é", "输入", "😀", "\ufeff", "%s",
        "1", "\\0", "\\u00e9", "\\x41"]
TEXT = st.lists(st.one_of(st.sampled_from(META),
                          st.text(st.characters(exclude_categories=["Cs"]), max_size=6)),
                max_size=8).map("".join)
EXAMPLES = int(os.environ.get("FLOWC_FUZZ_EXAMPLES", "8"))
BATCH = settings(max_examples=EXAMPLES, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])


def _cc(src: str, work: Path, *flags: str) -> subprocess.CompletedProcess:
    path = work / "t.c"
    path.write_text(src, encoding="ascii")  # c_text emits ASCII only
    return subprocess.run([CC, "-std=c11", "-trigraphs", "-Wall", "-Werror", *flags,
                           str(path), "-o", str(work / "t")],
                          capture_output=True, text=True, check=False, cwd=work)


def _strings_program(texts: list[str]) -> str:
    rows = "\n".join(f"static const char s{i}[] = {c_string(t)};" for i, t in enumerate(texts))
    prints = "\n".join(f"  dump(s{i}, sizeof s{i} - 1);" for i in range(len(texts)))
    return ("#include <stdio.h>\n" + rows + "\nstatic void dump(const char *s, size_t n) {\n"
            "  for (size_t i = 0; i < n; i++) printf(\"%02x\", (unsigned char)s[i]);\n"
            "  printf(\"\\n\");\n}\nint main(void) {\n" + prints + "\n  return 0;\n}\n")


def check_strings(texts: list[str], work: Path) -> None:
    built = _cc(_strings_program(texts), work)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(work / "t")], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:-1] == [t.encode("utf-8").hex() for t in texts]


def _comments_program(comments: list[str]) -> str:
    lines = [f"int v{i} = {i}; /* {c} */ int w{i} = {i};  /* {c}: {c} */"
             for i, c in enumerate(comments)]
    return "\n".join(lines) + "\nint main(void) { return 0; }\n"


def check_comments(texts: list[str], work: Path) -> None:
    """The comments compile cleanly (-Wcomment, trigraph warnings are errors) and change
    nothing: the preprocessed program is the one with empty comments."""
    escaped = [c_comment(t) for t in texts]
    for e in escaped:
        assert re.fullmatch(r"[ -~]*", e) and "*" not in e and "?" not in e, e
    built = _cc(_comments_program(escaped), work)
    assert built.returncode == 0, built.stderr
    for e, t in zip(escaped, texts, strict=True):  # nothing of the text is lost
        assert e.encode().decode("unicode_escape") == t
    expanded = [_cc(_comments_program(c), work, "-E", "-P").stdout
                for c in (escaped, [""] * len(texts))]
    assert expanded[0] == expanded[1]


@BATCH
@given(texts=st.lists(TEXT, min_size=1, max_size=40))
def test_c_string_bytes_are_the_utf8_bytes(texts, tmp_path):
    check_strings(texts, tmp_path)


@BATCH
@given(texts=st.lists(TEXT, min_size=1, max_size=40))
def test_c_comment_is_inert(texts, tmp_path):
    check_comments(texts, tmp_path)


@pytest.mark.slow
@settings(BATCH, max_examples=200)
@given(texts=st.lists(TEXT, min_size=1, max_size=100))
def test_c_text_many_batches(texts, tmp_path):
    check_strings(texts, tmp_path)
    check_comments(texts, tmp_path)


def test_c_string_escapes_per_utf8_byte():
    assert c_string("entrée") == '"entr\\303\\251e"'
    assert c_string('a"b\\?1') == '"a\\042b\\134\\0771"'
    assert c_string("输") == '"\\350\\276\\223"'


def test_c_comment_spells_code_points():
    assert c_comment("entrée */ x") == "entr\\u00e9e \\u002a/ x"
    assert c_comment("a\\b??/😀\n") == "a\\\\b\\u003f\\u003f/\\U0001f600\\u000a"


@given(st.text())
def test_c_identifier_is_a_c_identifier(text):
    ident = c_identifier(text)
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident) and ident not in C_KEYWORDS


def test_model_prefix():
    assert model_prefix(None, "my-model.v2") == "my_model_v2"
    assert model_prefix("", "g") == "g"
    assert model_prefix("int", "g") == "_int"
    assert model_prefix(None, "x */ " * 100) == c_identifier("x */ " * 100)[:MAX_PREFIX]
    with pytest.raises(FlowcError, match=r"^model name 'aaaaaaaaaaaaaaaaaaaa\.\.\.' has 65 "
                                         r"characters; a symbol prefix has at most 64$"):
        model_prefix("a" * 65, "g")
    assert model_prefix(None, "flowc-rt") == "_flowc_rt"
    with pytest.raises(FlowcError, match=r"^model name 'flowc_rt' is reserved \(the runtime's "
                                         r"header is flowc_rt\.h\); choose another$"):
        model_prefix("flowc_rt", "g")


def test_table_names_refuse_nul_and_surrogates():
    check_table_names(["entrée", "输入", "a */ b"], ["😀"])
    with pytest.raises(FlowcError, match=r"^graph output 1 'b\\x00c' holds a NUL character; "
                                         r"input and output names cannot \(the C API returns "
                                         r"them as NUL-terminated strings\)$"):
        check_table_names(["x"], ["a", "b\0c"])
    with pytest.raises(FlowcError, match=r"^name 'a\\ud800' is not valid Unicode text "
                                         r"\(surrogates not allowed at position 1\)"):
        check_table_names(["a\ud800"], [])
