"""Reads the text form (see printer.py) back into a Graph.

Contract: `parse(print_graph(g))` rebuilds `g` so that printing it again gives the same
text. Every error is a ParseError located `file:line:col` with the line shown; the parsed
graph is verified, and a verifier error is reported at the line of the node it names.
"""

from __future__ import annotations

import re
from typing import NamedTuple, NoReturn

import numpy as np

from flowc.ir.attrs import Tensor
from flowc.ir.dims import canonical
from flowc.ir.errors import ParseError, VerifyError
from flowc.ir.gcpause import gc_paused
from flowc.ir.graph import INPUT_OP, Graph, Node, Source, Value
from flowc.ir.limits import size_problem
from flowc.ir.ops import OPS
from flowc.ir.resources import read_resources
from flowc.ir.types import DTYPES, DType, TensorType, Type, VarType
from flowc.ir.verifier import verify as verify_graph

TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\n]+|//[^\n]*)
  | (?P<resstart>\{-\#) | (?P<resend>\#-\})
  | (?P<value>%(?:[A-Za-z0-9_.$-]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<at>@(?:[A-Za-z0-9_:/.$-]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)|-inf\b)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<arrow>->)
  | (?P<punct>[()\[\]{}<>,:=#?*+-])
""", re.VERBOSE)


class Token(NamedTuple):
    kind: str
    text: str
    line: int
    col: int


def unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), body)


def tokenize(text: str, filename: str) -> tuple[list[Token], int | None]:
    """The tokens of `text`, whitespace and comments dropped, ending with an `eof` token,
    and the index of the resource section's `{-#` (None without one): the scan stops there,
    as the section is read by `resources.read_resources`, not as tokens.

    One `finditer` scan: a match that does not start where the previous one ended means
    characters no token matches. Only whitespace tokens can hold newlines, so only they
    move the line count.
    """
    tokens: list[Token] = []
    append = tokens.append
    pos, line, line_start = 0, 1, 0
    resources = None
    for m in TOKEN_RE.finditer(text):
        start = m.start()
        if start != pos:
            break
        kind = m.lastgroup
        if kind == "resstart":
            resources = start
            break
        pos = m.end()
        if kind == "ws":
            newlines = text.count("\n", start, pos)
            if newlines:
                line += newlines
                line_start = text.rindex("\n", start, pos) + 1
            continue
        append(Token(kind, m.group(), line, start - line_start + 1))
    if pos < len(text) and resources is None:
        raise ParseError(f"unexpected character {text[pos]!r}", filename, line,
                         pos - line_start + 1, text.split("\n")[line - 1])
    append(Token("eof", "end of input", line, pos - line_start + 1))
    return tokens, resources


class Parser:
    def __init__(self, text: str, filename: str = "<input>"):
        self.filename = filename
        self.tokens, resources = tokenize(text, filename)
        self.lines = text[:resources].split("\n")
        self.pos = 0
        self.node_positions: dict[Node, Token] = {}
        self.text = text
        self.blobs = {} if resources is None else read_resources(text, resources,
                                                                 self.fail_at)

    # ---- token helpers -------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        tok = tok or self.tok
        source = self.lines[tok.line - 1] if tok.line - 1 < len(self.lines) else ""
        return ParseError(message, self.filename, tok.line, tok.col, source)

    def fail_at(self, message: str, pos: int) -> NoReturn:
        """Raise a ParseError at index `pos` of the text (in the resource section)."""
        line_start = self.text.rfind("\n", 0, pos) + 1
        line_end = self.text.find("\n", pos)
        raise ParseError(message, self.filename, self.text.count("\n", 0, pos) + 1,
                         pos - line_start + 1,
                         self.text[line_start:line_end if line_end >= 0 else None])

    def next(self) -> Token:
        tok = self.tok
        self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind != "string"

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str, what: str = "") -> Token:
        if not self.at(text):
            raise self.error(f"expected '{text}'{what} but found '{self.tok.text}'")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what} but found '{self.tok.text}'")
        return self.next()

    def comma_list(self, close: str, item):
        items = []
        if self.accept(close):
            return items
        while True:
            items.append(item())
            if self.accept(close):
                return items
            if not self.accept(","):
                raise self.error(f"expected ',' or '{close}' but found '{self.tok.text}'")

    # ---- types ---------------------------------------------------------------------
    def dtype(self) -> DType:
        tok = self.expect_kind("ident", "an element type (f32, i64, bool ...)")
        if tok.text not in DTYPES:
            raise self.error(f"unknown element type '{tok.text}' (known: "
                             f"{', '.join(DTYPES)})", tok)
        return DTYPES[tok.text]

    def tensor_type(self) -> TensorType:
        start = self.tok
        dt = self.dtype()
        self.expect("[", " to open the shape")

        def dim():
            tok = self.next()
            if tok.text == "?":
                return None
            parts, depth = [tok], 0  # a dim expression runs to the next ',' or ']' outside ()
            while depth or self.tok.text not in (",", "]") or self.tok.kind == "string":
                if self.tok.kind == "eof":
                    break
                depth += {"(": 1, ")": -1}.get(self.tok.text, 0)
                parts.append(self.next())
            if len(parts) == 1 and tok.kind == "number" and tok.text.isdigit():
                return int(tok.text)
            if len(parts) == 1 and tok.kind == "ident":
                return tok.text
            text = "".join(t.text for t in parts)
            try:
                return canonical(text)
            except ValueError as exc:
                raise self.error(f"expected a dim (an integer, a symbol, an expression of "
                                 f"them or ?) but found '{text}' ({exc})", tok) from None

        result = TensorType(dt, tuple(self.comma_list("]", dim)))
        problem = size_problem(result)
        if problem is not None:
            raise self.error(problem, start)
        return result

    def type(self) -> Type | None:
        if self.accept("none"):
            return None
        if self.accept("var"):
            self.expect("<")
            inner = self.tensor_type()
            self.expect(">")
            return VarType(inner)
        return self.tensor_type()

    # ---- attributes ----------------------------------------------------------------
    def attr_value(self):
        tok = self.tok
        if tok.kind == "string":
            return unquote(self.next().text)
        if tok.kind == "number":
            self.next()
            if tok.text == "-inf":
                return float("-inf")
            return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
        if self.accept("["):
            return tuple(self.comma_list("]", self.attr_value))
        if tok.kind == "ident":
            if tok.text in ("true", "false"):
                self.next()
                return tok.text == "true"
            if tok.text in ("inf", "nan"):
                self.next()
                return float(tok.text)
            if tok.text in ("dense", "dense_resource"):
                return self.tensor_attr()
            if tok.text == "graph":
                return self.graph()
            if tok.text in DTYPES:
                if self.tokens[self.pos + 1].text == "[":
                    return self.tensor_type()
                return self.dtype()
        raise self.error(f"expected an attribute value but found '{tok.text}'")

    def tensor_attr(self) -> Tensor:
        kind = self.next()
        self.expect("<")
        if kind.text == "dense_resource":
            key = unquote(self.expect_kind("string", "a quoted resource digest").text)
            self.expect(">")
            self.expect(":", " before the constant's type")
            t = self.tensor_type()
            return self.resource_tensor(key, t, kind)
        start = self.tok
        literal = self.literal()
        self.expect(">")
        self.expect(":", " before the constant's type")
        t = self.tensor_type()
        if literal == [] and 0 in t.shape:   # an empty constant of any shape
            return Tensor(np.zeros(t.shape, t.dtype.np))
        try:
            array = np.array(literal, dtype=t.dtype.np)
        except (ValueError, TypeError, OverflowError) as exc:
            raise self.error(f"constant literal does not fit {t}: {exc}", start) from None
        if array.shape != t.shape:
            raise self.error(f"constant literal has shape {list(array.shape)} but its type "
                             f"is {t}", start)
        return Tensor(array)

    def literal(self):
        if self.accept("["):
            return self.comma_list("]", self.literal)
        tok = self.next()
        if tok.text in ("true", "false"):
            return tok.text == "true"
        if tok.text in ("inf", "nan", "-inf"):
            return float(tok.text)
        if tok.kind == "number":
            return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
        raise self.error(f"expected a number, true or false but found '{tok.text}'", tok)

    # ---- graphs --------------------------------------------------------------------
    def loc(self) -> tuple[str | None, str | None, tuple[Source, ...]]:
        """`loc("name" at "where")` (either part optional) or `loc(fused[SOURCE, ...])`
        (each SOURCE such a pair or `unknown`): (name, where, merged sources)."""
        if not self.accept("loc"):
            return None, None, ()
        self.expect("(")
        if self.accept("fused"):
            self.expect("[", " after 'fused' in loc(fused[...])")
            sources = [self.source(fused=True)]
            while self.accept(","):
                sources.append(self.source(fused=True))
            self.expect("]", " to close loc(fused[...])")
            self.expect(")")
            (name, where), merged = sources[0], tuple(sources[1:])
            return name, where, merged
        name, where = self.source(fused=False)
        self.expect(")")
        return name, where, ()

    def source(self, fused: bool) -> Source:
        if fused and self.accept("unknown"):
            return None, None
        name = unquote(self.next().text) if self.tok.kind == "string" else None
        where = None
        if self.accept("at"):
            where = unquote(self.expect_kind("string", "a quoted source location").text)
        if name is None and where is None:
            alternatives = ", or unknown" if fused else ""
            raise self.error("expected a quoted node name or 'at \"file:line\"' in "
                             f"loc(...){alternatives}")
        return name, where

    def graph(self) -> Graph:
        self.expect("graph", " to start a graph")
        name_tok = self.expect_kind("at", "a graph name like @main")
        graph = Graph(_strip_sigil(name_tok.text))
        scope: dict[str, Node] = {}
        self.expect("(")

        def arg():
            tok = self.expect_kind("value", "an input like %x")
            name = _strip_sigil(tok.text)
            if name in scope:
                raise self.error(f"input %{name} is declared twice", tok)
            self.expect(":")
            t = self.type()
            if t is None:
                raise self.error("an input needs a type", tok)
            _, where, _ = self.loc()
            node = Node(INPUT_OP, (), None, (t,), name=name, loc=where)
            scope[name] = node
            self.node_positions[node] = tok
            graph.inputs.append(node)

        self.comma_list(")", arg)
        self.expect("->")
        self.expect("(")

        def result():
            tok = self.next()
            if tok.kind not in ("ident", "string"):
                raise self.error(f"expected an output name but found '{tok.text}'", tok)
            self.expect(":")
            return (unquote(tok.text) if tok.kind == "string" else tok.text, self.type(), tok)

        results = self.comma_list(")", result)
        self.expect("{")
        while not self.at("return"):
            if self.tok.kind == "eof" or self.at("}"):
                raise self.error("expected a node or 'return' before the end of the graph")
            graph.nodes.append(self.node(scope))
        ret = self.next()
        refs = []
        if not self.at("}"):
            refs.append(self.operand(scope))
            while self.accept(","):
                refs.append(self.operand(scope))
        self.expect("}", " to close the graph")
        if len(refs) != len(results):
            raise self.error(f"the graph declares {len(results)} outputs but returns "
                             f"{len(refs)}", ret)
        for (name, declared, tok), value in zip(results, refs, strict=True):
            if value is None:
                raise self.error("'_' cannot be returned", ret)
            if value.type != declared:
                raise self.error(f"output '{name}' is declared {declared} but the returned "
                                 f"value is {value.type}", tok)
            graph.outputs.append((name, value))
        return graph

    def operand(self, scope: dict[str, Node]) -> Value | None:
        if self.accept("_"):
            return None
        tok = self.expect_kind("value", "an operand like %3")
        text = tok.text
        indexed = self.accept("#")
        index = int(self.expect_kind("number", "a result index after #").text) if indexed else 0
        node = self.lookup(scope, text, tok)
        if index >= len(node.types):
            raise self.error(f"{text} has {len(node.types)} results; #{index} does not exist",
                             tok)
        if len(node.types) > 1 and not indexed:
            raise self.error(f"{text} has {len(node.types)} results: name one as {text}#0",
                             tok)
        return Value(node, index)

    def lookup(self, scope: dict[str, Node], text: str, tok: Token) -> Node:
        name = _strip_sigil(text)
        if name not in scope:
            raise self.error(f"use of undefined value {text}", tok)
        return scope[name]

    def node(self, scope: dict[str, Node]) -> Node:
        result_tok = self.expect_kind("value", "a node like '%0 = op ...'")
        count = 1
        if self.accept(":"):
            count = int(self.expect_kind("number", "a result count").text)
        name = _strip_sigil(result_tok.text)
        if name in scope:
            raise self.error(f"value {result_tok.text} is defined twice", result_tok)
        self.expect("=")
        op_tok = self.expect_kind("ident", "an op name")
        if op_tok.text not in OPS:
            raise self.error(f"unknown op '{op_tok.text}'", op_tok)
        operands: list[Value | None] = []
        if self.tok.kind == "value" or self.at("_"):
            operands.append(self.operand(scope))
            while self.accept(","):
                operands.append(self.operand(scope))
        ctrl: list[Node] = []
        if self.accept("ctrl"):
            self.expect("(")
            ctrl = self.comma_list(")", lambda: self.lookup(
                scope, self.tok.text, self.expect_kind("value", "a node like %2")))
        attrs = {}
        if self.accept("{"):
            def attr():
                key = self.expect_kind("ident", "an attribute name")
                if key.text in attrs:
                    raise self.error(f"attribute '{key.text}' is given twice", key)
                self.expect("=")
                attrs[key.text] = self.attr_value()

            self.comma_list("}", attr)
        self.expect(":", " before the node's types")
        type_tok = self.expect("(")
        operand_types = self.comma_list(")", lambda: (self.tok, self.type()))
        if len(operand_types) != len(operands):
            raise self.error(f"{len(operands)} operands but {len(operand_types)} operand "
                             "types", type_tok)
        for i, (v, (tok, t)) in enumerate(zip(operands, operand_types, strict=True)):
            found = None if v is None else v.type
            if found != t:
                raise self.error(f"operand #{i} is declared {t} but the value is {found}", tok)
        self.expect("->")
        types = self.comma_list(")", self.type) if self.accept("(") else [self.type()]
        if len(types) != count and not (count == 1 and len(types) == 0):
            raise self.error(f"{result_tok.text} declares {count} results but its type "
                             f"lists {len(types)}", result_tok)
        device = None
        if self.tok.kind == "at":
            device = _strip_sigil(self.next().text)
        node_name, where, merged = self.loc()
        node = Node(op_tok.text, operands, attrs, types, ctrl=ctrl, device=device,
                    name=node_name, loc=where, merged=merged)
        scope[name] = node
        self.node_positions[node] = result_tok
        return node

    def resource_tensor(self, key: str, t: TensorType, tok: Token) -> Tensor:
        """The constant `key` names: its data from the resource section, else elided."""
        if key not in self.blobs:
            return Tensor(None, t, key)
        blob, blob_pos = self.blobs[key]
        expected = (t.num_elements or 0) * t.dtype.np.itemsize
        if not t.is_static or len(blob) != expected:
            self.fail_at(f"resource {key} holds {len(blob)} bytes but {t} needs {expected}",
                         blob_pos)
        tensor = Tensor(np.frombuffer(blob, dtype=t.dtype.np).reshape(t.shape), owned=True)
        if tensor.digest != key:
            raise self.error(f"resource {key} does not match its content (digest "
                             f"{tensor.digest}); the text was edited or truncated", tok)
        return tensor


def _strip_sigil(text: str) -> str:
    body = text[1:]
    return unquote(body) if body.startswith('"') else body


def parse(text: str, filename: str = "<input>", verify: bool = True) -> Graph:
    """The graph the text describes; ParseError (file:line:col) for anything malformed."""
    with gc_paused():  # many long-lived small objects: collections would free nothing
        parser = Parser(text, filename)
        graph = parser.graph()
    if parser.tok.kind != "eof":
        raise parser.error(f"expected end of input after the graph but found "
                           f"'{parser.tok.text}'")
    if verify:
        try:
            verify_graph(graph)
        except VerifyError as exc:
            tok = parser.node_positions.get(exc.node)
            if tok is None:
                raise
            raise parser.error(exc.detail, tok) from None
    return graph
