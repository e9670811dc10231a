"""TF v1 control flow (Switch/Merge/Enter/Exit/NextIteration/LoopCond) recovered into
functional If/While nodes, as TensorFlow's FunctionalizeControlFlow does for tfcompile; the
importer then converts those like any functional If/While (control.py).

Contract: `functionalize(g)` rewrites `g.nodes` in place when the graph has v1 control
flow ops (else leaves it alone):
- A cond: the Merges that are not a loop's (no NextIteration input) of one name scope
  whose inputs lead back (through data edges) to Switches on one predicate, and that do
  not read one another, become one `If` on that predicate (output i: Merge i; the other
  Merges become Identities of it). A Merge's input from Switch outputs 0 is the else
  branch, from outputs 1 the then branch, whichever order the Merge lists them. The branch
  functions take, as arguments, the data inputs of those Switches and the values the
  branches read that depend on no Switch (Const nodes are copied into the branch, so
  shapes and axes stay known). Inner conds (a Merge inside a branch) are recovered first.
- A while loop: the Enter nodes of one `frame_name`; an Enter read by a Merge is a carried
  value (`Merge(Enter, NextIteration)` -> `Switch(Merge, LoopCond)` -> `Exit` and the body's
  `Switch:1`), any other Enter a loop invariant (carried unchanged). It becomes a
  `While(carried..., invariants...)` whose cond function computes the LoopCond's input from
  the Merges and whose body computes the NextIteration inputs from the `Switch:1`s; `Exit`
  i reads `While:i`. Conds are recovered before loops (a cond inside a loop body becomes an
  `If` in the body); a loop inside a loop body is recovered first (its Exits are then
  results of the inner While).
- Control edges inside a frame or a branch are dropped, as are control inputs that name a
  node the rewrite removed or a leftover of the frames (a cond's pivot, Switch(pred, pred)
  and the nodes reading it; an inner loop's Exit its outer body does not read): a v1
  body's stateful ops keep no order (the bodies flowc makes read no variables of the graph
  anyway).
- The recovered functions live in `g.synthetic` (name -> nodes, argument refs, result
  refs), which `TfGraph.function_graph` serves like a library function.
- A malformed frame (a Merge without its NextIteration or Switch, Switches on different
  LoopConds, a body reading a value of its frame without an Enter, a branch holding a
  loop, a Merge whose inputs reach no Switch) is a one-line TfImportError naming the node.
"""

from __future__ import annotations

from typing import Any

from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.loader import Ref, TfGraph, TfNode
from flowc.frontend.tf.protos import AttrValue

V1_OPS = frozenset(("Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond",
                    "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration"))
_LOOP_OPS = ("Enter", "Exit", "NextIteration", "LoopCond", "RefEnter", "RefExit",
             "RefNextIteration")


def _op(node: TfNode) -> str:
    return node.op[3:] if node.op.startswith("Ref") else node.op


def _func(name: str) -> AttrValue:
    attr = AttrValue()
    attr.func.name = name
    return attr


class _Rewrite:
    def __init__(self, g: TfGraph):
        self.g = g
        self.nodes = g.nodes
        self.removed: set[str] = set()

    def fail(self, node: TfNode, message: str) -> None:
        raise TfImportError(f"{self.g.path}: node '{node.name}' ({node.op}): {message}")

    def readers(self) -> dict[Ref, list[TfNode]]:
        found: dict[Ref, list[TfNode]] = {}
        for node in self.nodes.values():
            for ref in node.inputs:
                found.setdefault(ref, []).append(node)
        return found

    def function(self, name: str, args: int, bind: dict[Ref, int], results: list[Ref],
                 inside: set[str], kind: str) -> str:
        """Register the synthetic function of `args` arguments computing `results` over
        the nodes `inside` (copied, control edges dropped), ref r read as argument
        `bind[r]`."""
        table: dict[str, TfNode] = {}
        arg_refs = []
        for i in range(args):
            arg = f"{name}/{kind}_arg{i}"
            table[arg] = TfNode(arg, "_Arg", [], {})
            arg_refs.append((arg, 0))

        def mapped(ref: Ref) -> Ref:
            return arg_refs[bind[ref]] if ref in bind else ref

        for node_name in inside:
            node = self.nodes[node_name]
            table[node_name] = TfNode(node.name, node.op, [mapped(r) for r in node.inputs],
                                      node.attrs)
        self.g.synthetic[name] = (table, arg_refs, [mapped(r) for r in results])
        return name

    def walk(self, starts: list[Ref], stop: Any) -> set[str]:
        """The nodes `starts` lead back to by data edges; `stop(ref)` is True for a ref
        not to follow (an argument), else it may raise for a malformed one."""
        inside: set[str] = set()
        stack = [r for r in starts if not stop(r)]
        while stack:
            name = stack.pop()[0]
            if name in inside:
                continue
            inside.add(name)
            stack += [r for r in self.nodes[name].inputs if not stop(r)]
        return inside

    # ---- conds ----------------------------------------------------------------------
    def is_loop_merge(self, node: TfNode) -> bool:
        return any(_op(self.nodes[r[0]]) in ("NextIteration", "Enter") for r in node.inputs)

    def is_cond_switch(self, node: TfNode) -> bool:
        return _op(node) == "Switch" and len(node.inputs) == 2 and \
            _op(self.nodes[node.inputs[1][0]]) != "LoopCond"

    def probe(self, merge: TfNode, active: list[str]) -> tuple[Ref, set[str], list[Any]]:
        """(predicate, Switches, [(branch nodes, result) for else, then]) of cond Merge
        `merge`; every cond Merge its inputs lead back to is replaced by an If first."""
        if merge.name in active:
            self.fail(merge, "is on a cycle of conds")
        if len(merge.inputs) != 2:
            self.fail(merge, f"a cond Merge of {len(merge.inputs)} inputs (flowc recovers "
                      "two-way conds)")
        switches: set[str] = set()
        branches, ports = [], []
        for ref in merge.inputs:
            hits: set[int] = set()

            def stop(ref: Ref, hits: set[int] = hits) -> bool:
                node = self.nodes[ref[0]]
                if self.is_cond_switch(node):
                    switches.add(node.name)
                    hits.add(ref[1])
                    return True
                if _op(node) == "Merge" and not self.is_loop_merge(node):
                    self.cond(node, [*active, merge.name])
                    return False   # now an If
                if _op(node) in V1_OPS:
                    self.fail(merge, f"a branch reads '{node.name}' ({node.op}): flowc does "
                              "not recover a while loop inside a v1 cond")
                return False

            branches.append((self.walk([ref], stop), ref))
            ports.append(hits)
        preds = {self.nodes[s].inputs[1] for s in switches}
        if len(preds) != 1:
            self.fail(merge, "its inputs lead back to no Switch" if not preds else
                      "its inputs lead back to Switches on different predicates")
        if ports[0] == {0, 1} or ports[1] == {0, 1}:
            self.fail(merge, "a branch reads both outputs of a Switch")
        if ports[0] == {1} or ports[1] == {0}:   # the then branch comes first
            branches.reverse()
        return preds.pop(), switches, branches

    def siblings(self, merge: TfNode, pred: Ref, active: list[str]) -> list[Any]:
        """The other Merges of `merge`'s cond (its name scope, the same predicate, neither
        reading the other), probed."""
        scope = merge.name.rpartition("/")[0]
        found = []
        for other in list(self.nodes.values()):
            if other.name == merge.name or other.name.rpartition("/")[0] != scope or \
                    _op(other) != "Merge" or self.is_loop_merge(other) or \
                    other.name in active:
                continue
            try:
                probed = self.probe(other, [*active, merge.name])
            except TfImportError:
                continue   # not this cond's (reported when it is recovered on its own)
            if probed[0] == pred:
                found.append((other, probed))
        return found

    def cond(self, merge: TfNode, active: list[str]) -> None:
        """Replace cond Merge `merge` and the other Merges of its cond by one If (output i:
        Merge i's value; the others become Identities of it)."""
        pred, switches, branches = self.probe(merge, active)
        group = [(merge, (pred, switches, branches)),
                 *self.siblings(merge, pred, active)]
        switches = set().union(*(probed[1] for _, probed in group))
        # arguments: the Switches' data inputs, then what the branches read that depends on
        # no Switch (computed outside, passed in)
        args: list[Ref] = sorted({self.nodes[s].inputs[0] for s in switches})
        kept: list[set[str]] = [set(), set()]
        results: list[list[Ref]] = [[], []]
        for _, (_, _, pair) in group:
            for k, (inside, result) in enumerate(pair):
                inside, external = self.split(inside, switches)
                if result[0] not in inside and result[0] not in switches:
                    external.add(result)
                args += [r for r in sorted(external) if r not in args]
                kept[k] |= inside
                results[k].append(result)
        bind = {r: i for i, r in enumerate(args)}
        bind.update({(s, p): bind[self.nodes[s].inputs[0]] for s in switches for p in (0, 1)})
        funcs = [self.function(f"{merge.name}/{kind}", len(args), bind, results[k], kept[k],
                               kind) for k, kind in enumerate(("else", "then"))]
        attrs = {"then_branch": _func(funcs[1]), "else_branch": _func(funcs[0])}
        self.nodes[merge.name] = TfNode(merge.name, "If", [pred, *args], attrs)
        for i, (other, _) in enumerate(group[1:], 1):
            self.nodes[other.name] = TfNode(other.name, "Identity", [(merge.name, i)], {})
        self.removed |= kept[0] | kept[1] | switches

    def split(self, inside: set[str], switches: set[str]) -> tuple[set[str], set[Ref]]:
        """The branch nodes that depend on a Switch (or are Consts), and the refs of the
        others that those read (computed outside, passed in)."""
        depends: dict[str, bool] = {}

        def dep(name: str) -> bool:
            stack = [name]
            while stack:
                top = stack[-1]
                if top in depends:
                    stack.pop()
                    continue
                pending = [r[0] for r in self.nodes[top].inputs
                           if r[0] in inside and r[0] not in depends]
                if pending:
                    stack += pending
                    continue
                stack.pop()
                depends[top] = any(r[0] in switches or depends.get(r[0], False)
                                   for r in self.nodes[top].inputs)
            return depends[name]

        kept = {n for n in inside if dep(n) or self.nodes[n].op == "Const"}
        external = {r for n in kept for r in self.nodes[n].inputs
                    if r[0] not in kept and r[0] not in switches}
        return kept, external

    # ---- loops ----------------------------------------------------------------------
    def loop(self, frame: str, enters: list[TfNode], done: set[str], active: list[str],
             frames: dict[str, list[TfNode]]) -> None:
        if frame in done:
            return
        if frame in active:
            self.fail(enters[0], f"while frame '{frame}' is inside itself")
        readers = self.readers()
        carried, invariants = [], []
        for enter in enters:
            merges = [n for n in readers.get((enter.name, 0), []) if _op(n) == "Merge"]
            if not merges:
                invariants.append(enter)
                continue
            merge = merges[0]
            nexts = [r for r in merge.inputs if _op(self.nodes[r[0]]) == "NextIteration"]
            if len(merge.inputs) != 2 or len(nexts) != 1:
                self.fail(merge, f"the Merge of while frame '{frame}' needs an Enter and a "
                          "NextIteration input")
            switches = [n for n in readers.get((merge.name, 0), []) if _op(n) == "Switch"]
            if len(switches) != 1:
                self.fail(merge, f"the Merge of while frame '{frame}' feeds "
                          f"{len(switches)} Switches, not one")
            carried.append((enter, merge, switches[0], self.nodes[nexts[0][0]]))
        if not carried:
            self.fail(enters[0], f"while frame '{frame}' carries no value (no Merge reads "
                      "its Enters)")
        conds = {s.inputs[1] for _, _, s, _ in carried}
        if len(conds) != 1:
            self.fail(carried[0][2], f"the Switches of while frame '{frame}' read different "
                      "LoopConds")
        loop_cond = self.nodes[next(iter(conds))[0]]
        if _op(loop_cond) != "LoopCond":
            self.fail(carried[0][2], f"the Switch of while frame '{frame}' reads "
                      f"'{loop_cond.name}' ({loop_cond.op}), not a LoopCond")
        own = {e.name for e in enters} | {n.name for c in carried for n in c[1:]} | {
            loop_cond.name}
        inv_refs = [(e.name, 0) for e in invariants]

        def stopper(fed: set[Ref]) -> Any:
            def stop(ref: Ref) -> bool:
                if ref in fed:
                    return True
                node = self.nodes[ref[0]]
                if _op(node) == "Exit" and node.name not in own:
                    self.loop(self.frame_of(node, frames), frames[self.frame_of(node, frames)],
                              done, [*active, frame], frames)
                    return False
                if node.name in own or _op(node) in V1_OPS or node.op in (
                        "Placeholder", "_Arg"):
                    self.fail(node, f"while frame '{frame}' reads it without an Enter")
                return False
            return stop

        cond_fed = {(m.name, 0) for _, m, _, _ in carried} | set(inv_refs)
        cond_inside = self.walk([loop_cond.inputs[0]], stopper(cond_fed))
        body_fed = {(s.name, 1) for _, _, s, _ in carried} | set(inv_refs)
        body_results = [n.inputs[0] for _, _, _, n in carried]
        body_inside = self.walk(body_results, stopper(body_fed))
        name = f"{frame}/while"
        while name in self.nodes:
            name += "_"
        count = len(carried) + len(inv_refs)
        inv_bind = {r: len(carried) + i for i, r in enumerate(inv_refs)}
        cond_fn = self.function(f"{name}/cond", count, {
            **{(m.name, 0): i for i, (_, m, _, _) in enumerate(carried)}, **inv_bind},
            [loop_cond.inputs[0]], cond_inside, "cond")
        body_fn = self.function(f"{name}/body", count, {
            **{(s.name, 1): i for i, (_, _, s, _) in enumerate(carried)}, **inv_bind},
            body_results + inv_refs, body_inside, "body")
        inputs = [e.inputs[0] for e, _, _, _ in carried] + [e.inputs[0] for e in invariants]
        self.nodes[name] = TfNode(name, "While", inputs, {"cond": _func(cond_fn),
                                                          "body": _func(body_fn)})
        for i, (_, _, switch, _) in enumerate(carried):
            for exit_node in readers.get((switch.name, 0), []):
                if _op(exit_node) == "Exit":
                    self.nodes[exit_node.name] = TfNode(exit_node.name, "Identity",
                                                        [(name, i)], {})
        self.removed |= own | cond_inside | body_inside
        done.add(frame)

    def frame_of(self, exit_node: TfNode, frames: dict[str, list[TfNode]]) -> str:
        """The frame an Exit leaves: the frame of the Enter its Switch's Merge reads."""
        switch = self.nodes[exit_node.inputs[0][0]]
        merge = self.nodes[switch.inputs[0][0]]
        for ref in merge.inputs:
            enter = self.nodes[ref[0]]
            if _op(enter) == "Enter":
                return enter.attrs["frame_name"].s.decode()
        self.fail(exit_node, "leaves no while frame flowc can find (its Switch reads no "
                  "Merge of an Enter)")
        raise AssertionError


def functionalize(g: TfGraph) -> None:
    """Recover `g`'s v1 conds and loops as If/While nodes (the module docstring)."""
    if not any(n.op in V1_OPS for n in g.nodes.values()):
        return
    rewrite = _Rewrite(g)
    for node in list(g.nodes.values()):
        current = g.nodes[node.name]
        if _op(current) == "Merge" and current.op != "If" and \
                not rewrite.is_loop_merge(current):
            rewrite.cond(current, [])
    frames: dict[str, list[TfNode]] = {}
    for node in g.nodes.values():
        if _op(node) == "Enter":
            frames.setdefault(node.attrs["frame_name"].s.decode(), []).append(node)
    done: set[str] = set()
    for frame, enters in frames.items():
        rewrite.loop(frame, enters, done, [], frames)
    for name in rewrite.removed:
        g.nodes.pop(name, None)
    # what is left of the frames (a cond's pivots: Switch(pred, pred) and the Identities
    # read only by control edges; an Exit of an inner loop its outer body does not read)
    # orders nothing once the frames are functions
    dead = {n.name for n in g.nodes.values() if n.op in V1_OPS}
    while True:
        more = {n.name for n in g.nodes.values() if n.name not in dead and any(
            r[0] in dead or r[0] not in g.nodes for r in n.inputs)}
        if not more:
            break
        dead |= more
    for name in dead:
        del g.nodes[name]
    for node in g.nodes.values():
        node.controls = [c for c in node.controls if c in g.nodes]
