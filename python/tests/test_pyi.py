"""`python/sgc.pyi` holds the native module's own signatures: every public function and
class of `sgc` is typed there and nothing else is; each function's parameters are the
module's, in order; each default is the module's (a literal it shows, else the command
line's default, `sgc.defaults()`); each class's methods and properties are the module's.
Runs without torch."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

sgc = pytest.importorskip("sgc", reason="the native module is not installed: pip install ./python")

PYI = Path(__file__).resolve().parents[1] / "sgc.pyi"


def _stub() -> ast.Module:
    return ast.parse(PYI.read_text())


def _native_params(fn) -> list[tuple[str, str | None]]:
    """(name, default text or None) of a builtin from its `__text_signature__`."""
    text = fn.__text_signature__
    assert text, f"{fn.__name__} has no text signature"
    inner = text.strip()[1:-1]
    out = []
    for part in re.split(r",\s*(?![^()]*\))", inner):
        part = part.strip()
        if not part or part in ("$self", "/", "*"):
            continue
        name, _, default = part.partition("=")
        out.append((name.strip(), default.strip() or None))
    return out


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, object]]:
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, d) for a, d in zip(positional, defaults) if a.arg != "self"]
    out += [(a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return out


def _value(node) -> object:
    return eval(compile(ast.Expression(node), str(PYI), "eval"), {})  # literals and `1 / 3`


def test_every_public_name_is_typed_and_nothing_else():
    stub = _stub()
    typed = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(sgc) if not n.startswith("_") and n != "sgc"}
    assert typed == public, f"only in the stub: {typed - public}; only in the module: {public - typed}"


def test_function_signatures_and_defaults_are_the_modules():
    defaults = sgc.defaults()
    for fn in (n for n in _stub().body if isinstance(n, ast.FunctionDef)):
        native = _native_params(getattr(sgc, fn.name))
        stub = _stub_params(fn)
        assert [n for n, _ in native] == [n for n, _ in stub], f"{fn.name}: parameters differ"
        for (name, theirs), (_, ours) in zip(native, stub):
            where = f"{fn.name}({name})"
            if theirs is None:
                assert ours is None, f"{where}: the module has no default, the stub {ast.unparse(ours)}"
                continue
            assert ours is not None, f"{where}: the module's default is {theirs}, the stub has none"
            if theirs == "...":  # computed by the module: the command line's default
                assert name in defaults, f"{where}: a computed default that sgc.defaults() does not give"
                assert _value(ours) == defaults[name], f"{where}: {ast.unparse(ours)} != {defaults[name]}"
            else:
                assert _value(ours) == ast.literal_eval(theirs), f"{where}: {ast.unparse(ours)} != {theirs}"


def test_class_members_are_the_modules():
    for cls in (n for n in _stub().body if isinstance(n, ast.ClassDef)):
        native = getattr(sgc, cls.name)
        members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        theirs = {m for m in vars(native) if not m.startswith("_")}
        if issubclass(native, BaseException):
            # Exceptions: the stub types their attributes (set on each instance), no methods.
            assert not members, cls.name
            continue
        assert members == theirs, f"{cls.name}: only in the stub {members - theirs}, only in the module {theirs - members}"
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            text = getattr(getattr(native, fn.name), "__text_signature__", None)
            if text is None:  # a property
                assert any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list), \
                    f"{cls.name}.{fn.name} is a property in the module"
                continue
            assert [n for n, _ in _native_params(getattr(native, fn.name))] == [n for n, _ in _stub_params(fn)], \
                f"{cls.name}.{fn.name}: parameters differ"


def test_strategies_come_from_one_registry_and_plan_reads_what_they_say():
    """`sgc.strategies()` is the registry the command line's `--strategy` help is made from:
    every name plans (or says it needs a budget), and every option a strategy reads is a
    keyword of `sgc.plan`."""
    import inspect

    keywords = {name for name, _ in _native_params(sgc.plan)}
    entries = sgc.strategies()
    names = [s["name"] for s in entries]
    assert names[:3] == ["none", "chen-sqrt", "sublinear"], names
    assert len(set(names)) == len(names)
    for s in entries:
        missing = set(s["reads"]) - keywords
        assert not missing, f"{s['name']} reads {missing}, which sgc.plan does not take"
        assert s["budget_of"], s
    assert inspect.isbuiltin(sgc.strategies)
