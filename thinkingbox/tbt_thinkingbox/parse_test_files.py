"""Static scan of ThinkingBox test files (no test code is executed).

stdin:  a JSON array of absolute file paths.
stdout: one JSON object
  {"files": [{"file": PATH,
              "defaults": [{"yaml": TEXT, "line": N, "value": V | "error": E}],
              "tasks": [{"function", "line", "yaml", "yaml_line", "value" | "error", "params", "native",
                         "defaults_before"}],
              "problems": [{"file", "line", "message"}]}]}

"defaults" are the module-level "!" strings in file order. As the reference framework reads a file, each one
updates (key by key) the defaults of the functions after it: a task's defaults are the first "defaults_before".

TEXT is the string literal's value with its leading "!" removed. Line L (1-based) of TEXT is file line
``line + L - 1`` (``yaml_line`` for tasks): exact for ordinary string literals; when the literal contains
escaped newlines or is an implicit concatenation the mapping is best effort and starts at the literal's
first line.

A file with problems still lists what could be read from it, except a file that does not parse (a
SyntaxError or an unreadable file), which has no defaults and no tasks. Functions reported as problems
(``async def``, unsupported parameters) are not listed as tasks.
"""

from __future__ import annotations

import ast
import json
import sys
from typing import Any

import yaml

TEST_PARAMS = ("x", "judge")

# libyaml when present: the bench has 4 MB of YAML.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):
    """PyYAML's safe loader, as the reference framework reads this YAML, except that timestamps stay strings
    (the text as written; JSON has no dates and the tool servers parse their own)."""


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


# Nodes that aliases may add to one "!" YAML string once expanded (our JSON output has no aliases). A 323-byte
# alias bomb (nine levels of nine aliases) expands to 387 million nodes and hung the importer; a document that
# uses anchors for sharing adds a few hundred at most. (The TypeScript reader refuses more than 100 aliases.)
MAX_ALIAS_NODES = 10_000


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _alias_growth(root: yaml.Node) -> int | None:
    """How many nodes the aliases below root add when expanded; None when an alias contains itself.

    The composed graph shares one node per anchor, so sizes are counted once per node (no expansion here)."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        if key in on_path:
            return None
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                return None
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)] - len(size)


def _load(text: str, first_line: int) -> dict[str, Any]:
    """{"value": V} or {"error": {"line": N, "message": M}} (N is a file line)."""
    try:
        # yaml.load's own steps, with the alias expansion measured between composing and constructing.
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            # An alias needs an anchor (`&`) and a reference (`*`): most strings have neither, and skip the count.
            growth = _alias_growth(node) if node is not None and "&" in text and "*" in text else 0
            if growth is None:
                return {"error": {"line": first_line, "message": "YAML: an alias refers to a node that holds it"}}
            if growth > MAX_ALIAS_NODES:
                return {
                    "error": {
                        "line": first_line,
                        "message": f"YAML: aliases expand to more than {MAX_ALIAS_NODES} nodes (an alias bomb); "
                        "write the values out or share less",
                    }
                }
            value = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
        json.dumps(value)
        return {"value": value}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = first_line + (mark.line if mark else 0)
        return {"error": {"line": line, "message": f"YAML: {str(e).splitlines()[0]}"}}
    except (TypeError, ValueError) as e:
        return {"error": {"line": first_line, "message": f"YAML value is not JSON data: {e}"}}


def _bang_string(stmt: ast.stmt) -> str | None:
    """The value of a statement that is a bare string literal starting with "!", else None."""
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
        and stmt.value.value.startswith("!")
    ):
        return stmt.value.value
    return None


def _text_line(stmt: ast.stmt) -> int:
    """The file line holding the first line of the string's value (see module docstring)."""
    node = stmt.value  # type: ignore[attr-defined]
    return int(node.lineno)


# ---------------------------------------------------------------------------------------------------
# The native pattern: per server S,
#   assert x.effects["S"]["result_db_hash"] == x.effects["S"]["golden_db_hash"]   (either order, optional msg)
# optionally followed by
#   for r in x.effects["S"].get("rubrics_yesno", []):
#       assert judge.text_yesno(x.response, r)                                 (optional msg)
# ---------------------------------------------------------------------------------------------------


def _str_const(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _effects_server(node: ast.AST) -> str | None:
    """S for the expression ``x.effects["S"]``."""
    if not isinstance(node, ast.Subscript) or not isinstance(node.ctx, ast.Load):
        return None
    value = node.value
    if not (
        isinstance(value, ast.Attribute)
        and value.attr == "effects"
        and isinstance(value.value, ast.Name)
        and value.value.id == "x"
    ):
        return None
    return _str_const(node.slice)


def _hash_ref(node: ast.AST) -> tuple[str, str] | None:
    """(S, key) for ``x.effects["S"]["key"]``."""
    if not isinstance(node, ast.Subscript):
        return None
    server = _effects_server(node.value)
    key = _str_const(node.slice)
    if server is None or key is None:
        return None
    return server, key


def _simple_msg(msg: ast.expr | None) -> bool:
    """Assert messages allowed in the native pattern: none, a string literal, an f-string or a name."""
    return msg is None or _str_const(msg) is not None or isinstance(msg, (ast.JoinedStr, ast.Name))


def _hash_assert(stmt: ast.stmt) -> str | None:
    if not isinstance(stmt, ast.Assert) or not _simple_msg(stmt.msg):
        return None
    test = stmt.test
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and len(test.comparators) == 1
    ):
        return None
    left, right = _hash_ref(test.left), _hash_ref(test.comparators[0])
    if left is None or right is None or left[0] != right[0]:
        return None
    if {left[1], right[1]} != {"result_db_hash", "golden_db_hash"}:
        return None
    return left[0]


def _rubric_loop(stmt: ast.stmt) -> str | None:
    if not isinstance(stmt, ast.For) or stmt.orelse or getattr(stmt, "type_comment", None):
        return None
    if not isinstance(stmt.target, ast.Name):
        return None
    it = stmt.iter
    # x.effects["S"].get("rubrics_yesno", [])
    if not (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Attribute)
        and it.func.attr == "get"
        and not it.keywords
        and len(it.args) == 2
        and _str_const(it.args[0]) == "rubrics_yesno"
        and isinstance(it.args[1], ast.List)
        and not it.args[1].elts
    ):
        return None
    server = _effects_server(it.func.value)
    if server is None or len(stmt.body) != 1:
        return None
    inner = stmt.body[0]
    if not isinstance(inner, ast.Assert) or not _simple_msg(inner.msg):
        return None
    call = inner.test
    # judge.text_yesno(x.response, r)
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "text_yesno"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "judge"
        and not call.keywords
        and len(call.args) == 2
        and isinstance(call.args[0], ast.Attribute)
        and call.args[0].attr == "response"
        and isinstance(call.args[0].value, ast.Name)
        and call.args[0].value.id == "x"
        and isinstance(call.args[1], ast.Name)
        and call.args[1].id == stmt.target.id
    ):
        return None
    return server


def detect_native(func: ast.FunctionDef, body: list[ast.stmt], module_names: set[str]) -> dict[str, Any] | None:
    """The native description of a task body (after its YAML docstring), or None for anything else."""
    params = _param_names(func)
    if any(p not in TEST_PARAMS for p in params) or func.args.vararg or func.args.kwarg:
        return None
    if func.decorator_list:
        return None
    # Without parameters, x and judge are injected as globals: a module-level definition would shadow them.
    for name in TEST_PARAMS:
        if name not in params and name in module_names:
            return None
    if not body:
        return None
    servers: list[str] = []
    rubrics = False
    i = 0
    while i < len(body):
        server = _hash_assert(body[i])
        if server is None or server in servers:
            return None
        servers.append(server)
        i += 1
        if i < len(body):
            loop_server = _rubric_loop(body[i])
            if loop_server is not None:
                if loop_server != server:
                    return None
                rubrics = True
                i += 1
    return {"kind": "hash_and_rubrics", "servers": servers, "rubrics": rubrics}


# ---------------------------------------------------------------------------------------------------


def _param_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = func.args
    names = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def _required_unsupported(func: ast.FunctionDef) -> list[str]:
    """Parameters the runner cannot supply: anything but x/judge that has no default."""
    a = func.args
    positional = a.posonlyargs + a.args
    n_no_default = len(positional) - len(a.defaults)
    bad = [p.arg for i, p in enumerate(positional) if i < n_no_default and p.arg not in TEST_PARAMS]
    bad += [p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None and p.arg not in TEST_PARAMS]
    return bad


def _module_bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for stmt in tree.body:
        for node in (
            ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else [stmt]
        ):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
    return names


def parse_source(path: str, source: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"file": path, "defaults": [], "tasks": [], "problems": []}

    def problem(line: int, message: str) -> None:
        out["problems"].append({"file": path, "line": int(line), "message": message})

    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        problem(e.lineno or 1, f"syntax error: {e.msg}")
        return out
    except (ValueError, UnicodeDecodeError) as e:  # null bytes, bad encoding
        problem(1, f"cannot parse: {e}")
        return out

    module_names = _module_bound_names(tree)
    tasks_by_name: dict[str, dict[str, Any]] = {}
    for stmt in tree.body:
        text = _bang_string(stmt)
        if text is not None:
            out["defaults"].append({"yaml": text[1:], "line": _text_line(stmt), **_load(text[1:], _text_line(stmt))})
            continue
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = stmt.body[0] if stmt.body else None
        text = _bang_string(first) if first is not None else None
        if text is None:
            # A function without a "!" string is a helper. A top-level redefinition of a task replaces it.
            if stmt.name in tasks_by_name:
                problem(
                    stmt.lineno,
                    f"{stmt.name} redefines the test function at line {tasks_by_name[stmt.name]['line']} "
                    "(it is no longer a task)",
                )
                del tasks_by_name[stmt.name]
            continue
        if isinstance(stmt, ast.AsyncFunctionDef):
            problem(stmt.lineno, f"{stmt.name}: async test functions are not supported")
            tasks_by_name.pop(stmt.name, None)
            continue
        bad = _required_unsupported(stmt)
        if bad:
            problem(
                stmt.lineno,
                f"{stmt.name}: unsupported parameter(s) {', '.join(bad)} (test functions take x and/or judge)",
            )
            tasks_by_name.pop(stmt.name, None)
            continue
        if stmt.name in tasks_by_name:
            problem(
                stmt.lineno,
                f"{stmt.name} is defined twice (lines {tasks_by_name[stmt.name]['line']} and {stmt.lineno}); "
                "the last one is used",
            )
            del tasks_by_name[stmt.name]
        tasks_by_name[stmt.name] = {
            "function": stmt.name,
            "line": stmt.lineno,
            "yaml": text[1:],
            "yaml_line": _text_line(first),  # type: ignore[arg-type]
            **_load(text[1:], _text_line(first)),  # type: ignore[arg-type]
            "params": _param_names(stmt),
            "native": detect_native(stmt, stmt.body[1:], module_names),
            "defaults_before": len(out["defaults"]),
        }
    # Later definitions win, as in Python; keep file order of the surviving definitions.
    out["tasks"] = sorted(tasks_by_name.values(), key=lambda t: t["line"])
    return out


def parse_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        return {
            "file": path,
            "defaults": [],
            "tasks": [],
            "problems": [{"file": path, "line": 1, "message": f"cannot read file: {e.strerror or e}"}],
        }
    return parse_source(path, source)


def main() -> int:
    try:
        paths = json.load(sys.stdin)
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("expected a JSON array of file paths")
    except (ValueError, json.JSONDecodeError) as e:
        print(f"parse_test_files: bad input: {e}", file=sys.stderr)
        return 2
    result = {"files": [parse_file(p) for p in paths]}
    sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
