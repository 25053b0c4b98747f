"""The `.pyi` stubs list exactly what the native module exports, with the same
methods, so type checkers never see a stale API."""

import ast
import inspect
import pathlib

from weir import _native

STUBS = pathlib.Path(__file__).resolve().parents[1] / "python" / "weir" / "_native.pyi"


def stub_names():
    tree = ast.parse(STUBS.read_text())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {item.name for item in node.body if isinstance(item, ast.FunctionDef)} | {
                item.target.id for item in node.body if isinstance(item, ast.AnnAssign)
            }
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.Assign):
            continue  # type aliases
    return names


def test_stubs_match_the_native_module():
    stubs = stub_names()
    exported = {name for name in dir(_native) if not name.startswith("_")}
    assert set(stubs) == exported, f"only in stubs: {set(stubs) - exported}; only in module: {exported - set(stubs)}"
    for name, members in stubs.items():
        native = getattr(_native, name)
        if members is None or not inspect.isclass(native) or issubclass(native, Exception):
            continue
        public = {member for member in dir(native) if not member.startswith("_")}
        declared = {member for member in members if not member.startswith("_")}
        assert declared == public, f"{name}: only in stubs {declared - public}, only in module {public - declared}"
