"""Symbolic dim expressions: sums and products of symbols and ints, floor/ceil division.

Contract:
- A dim (`types.Dim`) is an int >= 0, a str or None (`?`). A str dim is a symbol (`N`) or
  an expression over symbols in its canonical text (`N*S`, `S+1`, `ceildiv(S,2)`,
  `2*N*S-S`): `canonical(text)` parses any such text (`+`, `-`, `*`, parentheses, integer
  constants, `floordiv(E,K)` / `ceildiv(E,K)` with a constant K > 0) and returns the
  canonical dim: an int when the expression is constant, else its canonical text, so equal
  polynomials have equal text. A malformed text is a ValueError naming it.
- The canonical text is a sum of terms, each `C*F1*F2...` (the coefficient omitted when 1,
  factors sorted by text, a symbol repeated for a power), terms sorted by degree (highest
  first) then text, the constant last; a minus sign replaces `+` before a negative term;
  it has no spaces. A division that does not come out exact stays a factor
  `floordiv(E,K)` / `ceildiv(E,K)` over the canonical text of E.
- Arithmetic on dims (`add`, `sub`, `mul`, `product`, `floordiv`, `ceildiv`, `divide`)
  takes ints, str dims or None and returns the canonical dim; None (an unknown dim) in,
  None out. `floordiv`/`ceildiv` divide by an int > 0 only (ValueError otherwise);
  `divide(a, b)` is the exact quotient by an int or a single term, else None.
- `symbols(dim)` is the set of symbols a dim mentions; `substitute(dim, values)`
  replaces the symbols `values` gives (ints or dims) and returns the canonical dim;
  `evaluate(dim, values)` is the int a dim takes (every symbol given, else KeyError
  naming the missing one). `fold(dim, ...)` computes a dim in another algebra (codegen's
  index arithmetic) from leaf and operation callbacks.
`ir/` code only; no import from the rest of flowc.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

Monomial = tuple[str, ...]  # sorted factor texts: symbols and division atoms
Poly = dict[Monomial, int]  # monomial -> nonzero coefficient; () is the constant
Dim = int | str | None
T = TypeVar("T")

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")
_DIVS = ("floordiv", "ceildiv")


# ---------------------------------------------------------------- polynomials

def _const(c: int) -> Poly:
    return {(): c} if c else {}


def _symbol(name: str) -> Poly:
    return {(name,): 1}


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
        if not out[m]:
            del out[m]
    return out


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
            if not out[m]:
                del out[m]
    return out


def _div(a: Poly, k: int, ceil: bool) -> Poly:
    if k <= 0:
        raise ValueError(f"a dim is divided only by a constant > 0, found {k}")
    if all(c % k == 0 for c in a.values()):
        return {m: c // k for m, c in a.items()}
    if set(a) <= {()}:  # a constant
        c = a.get((), 0)
        return _const(-(-c // k) if ceil else c // k)
    return {(f"{_DIVS[ceil]}({_text(a)},{k})",): 1}


def _text(p: Poly) -> str:
    if not p:
        return "0"
    terms = sorted(p.items(), key=lambda mc: (-len(mc[0]), mc[0]) if mc[0] else (1, ()))
    out = []
    for i, (m, c) in enumerate(terms):
        body = "*".join(m)
        mag = abs(c)
        term = body if mag == 1 and body else (f"{mag}*{body}" if body else str(mag))
        out.append(("-" if c < 0 else ("+" if i else "")) + term)
    return "".join(out)


def _dim_of(p: Poly) -> int | str:
    if set(p) <= {()}:
        return p.get((), 0)
    return _text(p)


# ---------------------------------------------------------------- parsing

class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = []
        pos = 0
        for m in _TOKEN.finditer(text):
            if m.end() == m.start() or m.start() != pos:
                break
            pos = m.end()
            if m.group(3) is not None and m.group(3).isspace():
                continue
            self.tokens.append(m.group(1) or m.group(2) or m.group(3))
        if text[pos:].strip():
            self.fail(f"unexpected '{text[pos:].strip()[0]}'")
        self.pos = 0

    def fail(self, why: str):
        raise ValueError(f"dim expression '{self.text}': {why}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            self.fail(f"expected '{want}'" if want else "unexpected end")
        self.pos += 1
        return tok

    def parse(self) -> Poly:
        p = self.expr()
        if self.peek() is not None:
            self.fail(f"unexpected '{self.peek()}'")
        return p

    def expr(self) -> Poly:
        sign = 1
        if self.peek() == "-":
            self.take()
            sign = -1
        p = _mul(_const(sign), self.term())
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            p = _add(p, self.term(), sign)
        return p

    def term(self) -> Poly:
        p = self.factor()
        while self.peek() == "*":
            self.take()
            p = _mul(p, self.factor())
        return p

    def factor(self) -> Poly:
        tok = self.take()
        if tok.isdigit():
            return _const(int(tok))
        if tok == "(":
            p = self.expr()
            self.take(")")
            return p
        if tok in _DIVS:
            self.take("(")
            inner = self.expr()
            self.take(",")
            k = self.take()
            if not k.isdigit() or int(k) == 0:
                self.fail(f"{tok} divides by a constant > 0, found '{k}'")
            self.take(")")
            return _div(inner, int(k), tok == "ceildiv")
        if tok[0].isalpha() or tok[0] == "_":
            return _symbol(tok)
        self.fail(f"unexpected '{tok}'")
        raise AssertionError  # fail raises


def _poly(dim: int | str) -> Poly:
    if isinstance(dim, bool):
        raise ValueError(f"not a dim: {dim!r}")
    if isinstance(dim, int):
        return _const(dim)
    return _Parser(dim).parse()


def canonical(text: str) -> int | str:
    """The canonical dim of an expression text (see the module docstring)."""
    return _dim_of(_poly(text))


# ---------------------------------------------------------------- arithmetic on dims

def add(a: Dim, b: Dim) -> Dim:
    return None if a is None or b is None else _dim_of(_add(_poly(a), _poly(b)))


def sub(a: Dim, b: Dim) -> Dim:
    return None if a is None or b is None else _dim_of(_add(_poly(a), _poly(b), -1))


def mul(a: Dim, b: Dim) -> Dim:
    if a == 0 or b == 0:
        return 0
    return None if a is None or b is None else _dim_of(_mul(_poly(a), _poly(b)))


def product(dims: Iterable[Dim]) -> Dim:
    """The product of `dims` (1 for none; 0 if any is 0, even beside an unknown dim)."""
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def divide(a: Dim, b: Dim) -> Dim:
    """`a / b` when it is exact as polynomials (b an int or a single term, as a reshape's
    -1 needs: `N*S*H / H` is `N*S`), else None."""
    if a is None or b is None or b == 0:
        return None
    pa, pb = _poly(a), _poly(b)
    if pa == pb:
        return 1
    if len(pb) != 1:
        return None
    (mb, cb), = pb.items()
    out: Poly = {}
    for m, c in pa.items():
        rest = list(m)
        for f in mb:
            if f not in rest:
                return None
            rest.remove(f)
        if c % cb:
            return None
        out[tuple(rest)] = c // cb
    return _dim_of(out)


def floordiv(a: Dim, k: int) -> Dim:
    return None if a is None else _dim_of(_div(_poly(a), k, ceil=False))


def ceildiv(a: Dim, k: int) -> Dim:
    return None if a is None else _dim_of(_div(_poly(a), k, ceil=True))


# ---------------------------------------------------------------- symbols and values

def symbols(dim: Dim) -> set[str]:
    """The symbols `dim` mentions (inside divisions too)."""
    if not isinstance(dim, str):
        return set()
    return {t for t in _TOKEN.findall(dim) for t in [t[1]] if t and t not in _DIVS}


def substitute(dim: Dim, values: Mapping[str, Dim]) -> Dim:
    """`dim` with the symbols of `values` replaced (see the module docstring)."""
    if not isinstance(dim, str) or not symbols(dim) & set(values):
        return dim
    if any(values.get(s, 0) is None for s in symbols(dim)):
        return None
    return _dim_of(_Substitute(dim, values).parse())


def evaluate(dim: Dim, values: Mapping[str, int]) -> int:
    """The int `dim` takes with every symbol of it given by `values`."""
    if dim is None:
        raise ValueError("an unknown dim (?) has no value")
    missing = sorted(symbols(dim) - set(values))
    if missing:
        raise KeyError(f"dim {dim}: no value for symbol {missing[0]}")
    out = substitute(dim, values)
    assert isinstance(out, int)
    return out


class _Substitute(_Parser):
    """A parser reading each symbol of `values` as its value."""

    def __init__(self, text: str, values: Mapping[str, Dim]):
        super().__init__(text)
        self.values = values

    def factor(self) -> Poly:
        tok = self.peek()
        if tok in self.values and tok not in _DIVS:
            self.take()
            return _poly(self.values[tok])
        return super().factor()


_ATOM = re.compile(r"(floordiv|ceildiv)\((.*),(\d+)\)\Z")


def fold(dim: int | str, symbol: Callable[[str], T], const: Callable[[int], T],
         add: Callable[[T, T], T], mul: Callable[[T, T], T],
         div: Callable[[T, int, bool], T]) -> T:
    """`dim` computed in another algebra (codegen's index arithmetic): `symbol(name)` and
    `const(c)` make leaves, `add`, `mul` and `div(x, k, ceil)` combine them, term by term
    of the canonical polynomial (a negative coefficient is a `const` factor)."""
    if isinstance(dim, int):
        return const(dim)
    total: T | None = None
    for monomial, coef in _poly(dim).items():
        term: T | None = None if coef == 1 else const(coef)
        for factor in monomial:
            atom = _ATOM.match(factor)
            value = (div(fold(canonical(atom.group(2)), symbol, const, add, mul, div),
                         int(atom.group(3)), atom.group(1) == "ceildiv")
                     if atom else symbol(factor))
            term = value if term is None else mul(term, value)
        term = const(1) if term is None else term
        total = term if total is None else add(total, term)
    return const(0) if total is None else total


def is_symbol(dim: Dim) -> bool:
    """Whether `dim` is a bare symbol (not an int, None or a compound expression)."""
    return isinstance(dim, str) and dim.isidentifier() and dim not in _DIVS
