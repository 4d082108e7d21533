#!/usr/bin/env python3
"""Generate apf/_bindings.py (ctypes declarations) from include/apf.h.

The header is cbindgen's output, so it is plain C: we drop the preprocessor
lines and the C++-only blocks, give pycparser the standard integer typedefs,
and turn every struct, enum, callback type and function into its ctypes
counterpart. `#define` lines with a number or a string become constants.

    python3 tools/gen_bindings.py [HEADER] [OUTPUT]      # write
    python3 tools/gen_bindings.py --check [HEADER] [OUTPUT]  # exit 1 when stale

A test runs the check, so a header change without regeneration fails.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

from pycparser import c_ast, c_parser

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent
DEFAULT_HEADER = REPO / "include" / "apf.h"
DEFAULT_OUTPUT = PACKAGE / "apf" / "_bindings.py"

# The standard types the header may use, and their ctypes names. pycparser
# only needs them to be type names; what they become is decided here.
STANDARD_TYPES = {
    "int8_t": "ctypes.c_int8",
    "int16_t": "ctypes.c_int16",
    "int32_t": "ctypes.c_int32",
    "int64_t": "ctypes.c_int64",
    "uint8_t": "ctypes.c_uint8",
    "uint16_t": "ctypes.c_uint16",
    "uint32_t": "ctypes.c_uint32",
    "uint64_t": "ctypes.c_uint64",
    "size_t": "ctypes.c_size_t",
    "ssize_t": "ctypes.c_ssize_t",
    "intptr_t": "ctypes.c_ssize_t",
    "uintptr_t": "ctypes.c_size_t",
    "bool": "ctypes.c_bool",
}
BUILTIN_TYPES = {
    ("char",): "ctypes.c_char",
    ("signed", "char"): "ctypes.c_byte",
    ("unsigned", "char"): "ctypes.c_ubyte",
    ("short",): "ctypes.c_short",
    ("unsigned", "short"): "ctypes.c_ushort",
    ("int",): "ctypes.c_int",
    ("unsigned", "int"): "ctypes.c_uint",
    ("unsigned",): "ctypes.c_uint",
    ("long",): "ctypes.c_long",
    ("unsigned", "long"): "ctypes.c_ulong",
    ("long", "long"): "ctypes.c_longlong",
    ("unsigned", "long", "long"): "ctypes.c_ulonglong",
    ("float",): "ctypes.c_float",
    ("double",): "ctypes.c_double",
    ("_Bool",): "ctypes.c_bool",
}
PRELUDE = "".join(f"typedef int {name};\n" for name in STANDARD_TYPES)

DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+(.+?)\s*$")
CONDITIONAL = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b\s*(.*)$")
INT_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b")


COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|/\*.*?\*/|//[^\n]*', re.S)


class HeaderError(Exception):
    pass


def strip_comments(text: str) -> str:
    """Comments blanked out, keeping line numbers and string literals."""

    def blank(match: re.Match) -> str:
        token = match.group(0)
        if token.startswith('"'):
            return token
        return " " + "\n" * token.count("\n")

    return COMMENT_OR_STRING.sub(blank, text)


# What a C17 compiler (not C++) predefines, as far as the header can ask.
PREDEFINED = {"__STDC__": 1, "__STDC_VERSION__": 201710}


def eval_condition(expr: str, defines: dict) -> bool:
    """Evaluate an #if expression: defined(), integer macros, && || !,
    comparisons and arithmetic; unknown identifiers are 0, as in C."""
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                  lambda m: "1" if (m.group(1) or m.group(2)) in defines else "0", expr)
    expr = INT_SUFFIX.sub(r"\1", expr)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)

    def value(m: re.Match) -> str:
        v = defines.get(m.group(0))
        return str(v) if isinstance(v, int) else "0"

    expr = re.sub(r"\b[A-Za-z_]\w*\b",
                  lambda m: m.group(0) if m.group(0) in ("and", "or", "not") else value(m), expr)
    try:
        return bool(eval(expr, {"__builtins__": {}}))  # noqa: S307 - digits and operators only
    except Exception as exc:
        raise HeaderError(f"cannot evaluate #if {expr!r}: {exc}") from exc


def strip_preprocessor(text: str) -> tuple[str, list[tuple[str, str]]]:
    """C as a C17 compiler sees it (conditionals evaluated, no preprocessor
    lines, so no C++-only parts), and the #defines in order."""
    lines = []
    defines: list[tuple[str, str]] = []
    known: dict = dict(PREDEFINED)
    # One entry per open conditional: [this branch kept, some branch taken].
    stack: list[list[bool]] = []

    def live() -> bool:
        return all(kept for kept, _ in stack)

    for raw in text.splitlines():
        cond = CONDITIONAL.match(raw)
        if cond:
            kind, arg = cond.group(1), cond.group(2).strip()
            if kind in ("if", "ifdef", "ifndef"):
                if kind == "if":
                    kept = eval_condition(arg, known) if live() else False
                else:
                    kept = (arg.split()[0] in known) == (kind == "ifdef")
                stack.append([kept, kept])
            elif not stack:
                raise HeaderError(f"#{kind} without #if: {raw!r}")
            elif kind == "elif":
                taken = stack[-1][1]
                kept = not taken and eval_condition(arg, known)
                stack[-1] = [kept, taken or kept]
            elif kind == "else":
                stack[-1] = [not stack[-1][1], True]
            else:
                stack.pop()
            lines.append("")
            continue
        if not live():
            lines.append("")
            continue
        define = DEFINE.match(raw) or re.match(r"^\s*#\s*define\s+(\w+)\s*()$", raw)
        if define:
            name, body = define.group(1), define.group(2)
            defines.append((name, body))
            value = define_value(body, known)
            known[name] = value if value is not None else 1
        lines.append("" if raw.lstrip().startswith("#") else raw)
    if stack:
        raise HeaderError("unterminated #if")
    return "\n".join(lines), defines


def define_value(body: str, known: dict):
    """The Python value of a #define body, or None if it is not a constant.
    Earlier integer macros may appear in it."""
    body = body.strip()
    if not body:
        return None
    body = INT_SUFFIX.sub(r"\1", body)
    body = re.sub(r"\b[A-Za-z_]\w*\b",
                  lambda m: str(known[m.group(0)]) if isinstance(known.get(m.group(0)), int)
                  else m.group(0), body)
    # cbindgen writes typed constants as casts: (uint32_t)5.
    body = re.sub(r"\(\s*(?:const\s+)?[A-Za-z_]\w*\s*\)\s*(?=[\d(\-])", "", body)
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError:
        return None
    allowed = (
        ast.Expression, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator,
        ast.unaryop,
    )
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return None
    value = eval(compile(tree, "<define>", "eval"), {"__builtins__": {}})  # noqa: S307
    return value if isinstance(value, (int, str)) else None


def const_eval(node: c_ast.Node, known: dict[str, int]) -> int:
    if isinstance(node, c_ast.Constant):
        return int(INT_SUFFIX.sub(r"\1", node.value), 0)
    if isinstance(node, c_ast.ID):
        return known[node.name]
    if isinstance(node, c_ast.UnaryOp):
        value = const_eval(node.expr, known)
        return {"-": -value, "+": value, "~": ~value}[node.op]
    if isinstance(node, c_ast.BinaryOp):
        left, right = const_eval(node.left, known), const_eval(node.right, known)
        ops = {
            "+": lambda a, b: a + b, "-": lambda a, b: a - b,
            "*": lambda a, b: a * b, "<<": lambda a, b: a << b,
            ">>": lambda a, b: a >> b, "|": lambda a, b: a | b,
            "&": lambda a, b: a & b,
        }
        return ops[node.op](left, right)
    if isinstance(node, c_ast.Cast):
        return const_eval(node.expr, known)
    raise HeaderError(f"unsupported constant expression: {node!r}")


class Generator:
    def __init__(self) -> None:
        self.structs: dict[str, list[tuple[str, c_ast.Node]] | None] = {}
        self.struct_order: list[str] = []
        self.aliases: dict[str, str] = {}  # typedef name -> ctypes expression
        self.callbacks: dict[str, c_ast.Node] = {}
        self.callback_order: list[str] = []
        self.enums: dict[str, list[tuple[str, int]]] = {}
        self.constants: dict[str, int | str] = {}
        self.functions: list[tuple[str, c_ast.FuncDecl]] = []

    # --- collecting -----------------------------------------------------
    def collect(self, tree: c_ast.FileAST) -> None:
        for ext in tree.ext:
            if isinstance(ext, c_ast.Typedef):
                self.typedef(ext)
            elif isinstance(ext, c_ast.Decl):
                if isinstance(ext.type, c_ast.FuncDecl):
                    self.functions.append((ext.name, ext.type))
                elif isinstance(ext.type, c_ast.Enum):
                    self.enum(ext.type)
                elif isinstance(ext.type, c_ast.Struct):
                    self.struct(ext.type)
                else:
                    raise HeaderError(f"unsupported declaration {ext.name}")

    def typedef(self, td: c_ast.Typedef) -> None:
        if td.name in STANDARD_TYPES:
            return
        inner = td.type
        if isinstance(inner, c_ast.TypeDecl) and isinstance(inner.type, c_ast.Struct):
            struct = inner.type
            tag = struct.name or td.name
            self.struct(struct, tag)
            if tag != td.name:
                self.aliases[td.name] = tag
            return
        if isinstance(inner, c_ast.TypeDecl) and isinstance(inner.type, c_ast.Enum):
            self.enum(inner.type, td.name)
            self.aliases[td.name] = "ctypes.c_int"
            return
        if isinstance(inner, c_ast.PtrDecl) and isinstance(inner.type, c_ast.FuncDecl):
            self.callbacks[td.name] = inner.type
            self.callback_order.append(td.name)
            return
        self.aliases[td.name] = self.ctype(inner)

    def struct(self, struct: c_ast.Struct, tag: str | None = None) -> None:
        tag = tag or struct.name
        if tag not in self.structs:
            self.struct_order.append(tag)
            self.structs[tag] = None
        if struct.decls is not None:
            self.structs[tag] = [(d.name, d.type) for d in struct.decls]

    def enum(self, enum: c_ast.Enum, name: str | None = None) -> None:
        values = []
        next_value = 0
        known = dict(self.constants)
        for item in enum.values.enumerators:
            if item.value is not None:
                next_value = const_eval(item.value, known)
            values.append((item.name, next_value))
            known[item.name] = next_value
            self.constants[item.name] = next_value
            next_value += 1
        self.enums[name or enum.name] = values

    # --- types ------------------------------------------------------------
    def ctype(self, node: c_ast.Node) -> str:
        if isinstance(node, c_ast.TypeDecl):
            return self.ctype(node.type)
        if isinstance(node, c_ast.IdentifierType):
            names = tuple(n for n in node.names if n not in ("const", "volatile"))
            if len(names) == 1 and names[0] in STANDARD_TYPES:
                return STANDARD_TYPES[names[0]]
            if len(names) == 1 and names[0] in self.aliases:
                return names[0]
            if len(names) == 1 and (names[0] in self.structs or names[0] in self.callbacks):
                return names[0]
            if names in BUILTIN_TYPES:
                return BUILTIN_TYPES[names]
            if names == ("void",):
                return "None"
            raise HeaderError(f"unknown type {' '.join(names)}")
        if isinstance(node, c_ast.Struct):
            return node.name
        if isinstance(node, c_ast.Enum):
            return "ctypes.c_int"
        if isinstance(node, c_ast.PtrDecl):
            target = node.type
            if isinstance(target, c_ast.FuncDecl):
                return self.functype(target)
            inner = self.ctype(target)
            if inner == "None":
                return "ctypes.c_void_p"
            # A char* is bytes with an explicit length, never a C string:
            # keep it a pointer so ctypes does not stop at a NUL.
            return f"ctypes.POINTER({inner})"
        if isinstance(node, c_ast.ArrayDecl):
            return f"({self.ctype(node.type)} * {const_eval(node.dim, self.constants)})"
        raise HeaderError(f"unsupported type node {type(node).__name__}")

    def params(self, func: c_ast.FuncDecl) -> list[tuple[str, str]]:
        if func.args is None:
            return []
        result = []
        for i, param in enumerate(func.args.params):
            if isinstance(param, c_ast.EllipsisParam):
                raise HeaderError("variadic functions are not supported")
            ctype = self.ctype(param.type)
            if ctype == "None":  # (void)
                continue
            result.append((param.name or f"arg{i}", ctype))
        return result

    def functype(self, func: c_ast.FuncDecl) -> str:
        args = ", ".join(t for _, t in self.params(func))
        ret = self.ctype(func.type)
        return f"ctypes.CFUNCTYPE({ret}{', ' if args else ''}{args})"

    # --- output -----------------------------------------------------------
    def render(self, source_name: str, defines: list[tuple[str, str]]) -> str:
        out = [
            f'"""ctypes declarations generated from {source_name} by tools/gen_bindings.py.',
            "",
            "Do not edit: run `python3 tools/gen_bindings.py` after a header change.",
            '"""',
            "# fmt: off",
            "# ruff: noqa",
            "import ctypes",
            "",
        ]
        out.append("# Constants (#define)")
        known: dict = {}
        for name, body in defines:
            value = define_value(body, known)
            if value is not None:
                known[name] = value
                out.append(f"{name} = {value!r}")
        out.append("")
        for enum_name, values in self.enums.items():
            out.append(f"# enum {enum_name}")
            for name, value in values:
                out.append(f"{name} = {value}")
            out.append(f"{enum_name}_NAMES = {{")
            for name, value in values:
                out.append(f"    {value}: {name!r},")
            out.append("}")
            out.append("")
        for tag in self.struct_order:
            out.append(f"class {tag}(ctypes.Structure):")
            out.append("    pass")
            out.append("")
        for name, target in self.aliases.items():
            out.append(f"{name} = {target}")
        out.append("")
        for name in self.callback_order:
            out.append(f"{name} = {self.functype(self.callbacks[name])}")
        out.append("")
        for tag in self.struct_order:
            fields = self.structs[tag]
            if fields is None:
                continue  # opaque
            out.append(f"{tag}._fields_ = [")
            for field, ftype in fields:
                out.append(f"    ({field!r}, {self.ctype(ftype)}),")
            out.append("]")
            out.append("")
        out.append("# name: (restype, [(parameter, argtype), ...])")
        out.append("FUNCTIONS = {")
        for name, func in self.functions:
            ret = self.ctype(func.type)
            params = ", ".join(f"({p!r}, {t})" for p, t in self.params(func))
            out.append(f"    {name!r}: ({ret}, [{params}]),")
        out.append("}")
        out.append("")
        out.append("")
        out.append("def declare(lib):")
        out.append('    """Set restype and argtypes of every function on a ctypes.CDLL."""')
        out.append("    for name, (restype, params) in FUNCTIONS.items():")
        out.append("        fn = getattr(lib, name)")
        out.append("        fn.restype = restype")
        out.append("        fn.argtypes = [t for _, t in params]")
        out.append("    return lib")
        out.append("")
        return "\n".join(out)


def generate(header_text: str, source_name: str = "include/apf.h") -> str:
    code, defines = strip_preprocessor(strip_comments(header_text))
    parser = c_parser.CParser()
    try:
        tree = parser.parse(PRELUDE + code, filename=source_name)
    except Exception as exc:  # pycparser raises its own ParseError
        raise HeaderError(f"cannot parse {source_name}: {exc}") from exc
    gen = Generator()
    gen.collect(tree)
    return gen.render(source_name, defines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if OUTPUT is stale")
    ap.add_argument("header", nargs="?", default=str(DEFAULT_HEADER))
    ap.add_argument("output", nargs="?", default=str(DEFAULT_OUTPUT))
    args = ap.parse_args(argv)
    header = Path(args.header)
    output = Path(args.output)
    text = generate(header.read_text(), "include/apf.h")
    if args.check:
        if not output.exists() or output.read_text() != text:
            print(f"{output} is stale: run python3 {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
