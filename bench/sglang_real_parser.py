"""Ground truth for specops's flag reader: SGLang's own parser, built by SGLang's own code.

Imports a release's real `sglang.srt.server_args` from an unpacked tree and runs
`ServerArgs.add_cli_args` on a fresh ArgumentParser, then prints every registered argument
(option strings, dest, nargs, choices, type) as JSON. SGLang needs torch, a GPU and dozens
of packages; none exist here, so every third-party module but the few that shape the
arguments (msgspec, pydantic, packaging, PyYAML) is a stub, package `__init__`s of sglang
are not run, and an sglang module that fails against the stubs becomes a stub too (listed
on stderr). The arguments come from the real code either way.

Not part of specops; a measuring tool. Needs its own interpreter:

    python -m venv /tmp/realvenv && /tmp/realvenv/bin/pip install msgspec pydantic packaging pyyaml
    /tmp/realvenv/bin/python bench/sglang_real_parser.py ~/.cache/specops/sglang/0.5.23 > real.json
"""

import abc
import argparse
import importlib.abc
import importlib.machinery
import json
import sys
import types

# Attributes Python, typing and pydantic probe with hasattr: a stub must not claim them.
_PROTOCOL = {
    "__mro_entries__", "__origin__", "__args__", "__get__", "__set_name__", "__instancecheck__",
    "__subclasscheck__", "__fspath__", "__index__", "__len__", "__wrapped__", "__signature__", "__func__",
    "__self__", "__code__", "__dataclass_fields__", "__supertype__", "__parameters__", "__typing_subst__",
    "__set__", "__delete__", "__enter__", "__exit__", "__aenter__", "__await__", "__iter__", "__next__",
    "__get_validators__", "__modify_schema__",
}
REAL = {"msgspec", "pydantic", "pydantic_core", "typing_extensions", "typing_inspection", "annotated_types",
        "yaml", "packaging"}
# Accelerator back-ends SGLang detects by import or attribute: absent, as on a CUDA box.
ABSENT = ("npu", "hpu", "habana", "mlx", "xpu", "musa", "ipex", "intel", "mindspore")


class _AnyMeta(abc.ABCMeta):
    """A class standing in for any object: attribute, call, index and arithmetic all work."""

    def __getattr__(cls, name):
        if name in _PROTOCOL or name.startswith(("__pydantic", "__get_pydantic")):
            raise AttributeError(name)
        return _Any

    def __getitem__(cls, item):
        return _Any

    def __or__(cls, other):
        return _Any

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __setitem__(cls, key, value):
        pass

    def __add__(cls, other):
        return other

    __radd__ = __add__

    def __contains__(cls, key):
        return False

    def __int__(cls):
        return 0

    def __float__(cls):
        return 0.0

    def __index__(cls):
        return 0

    def __lt__(cls, other):
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __hash__(cls):
        return id(cls)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Any


class _Any(metaclass=_AnyMeta):
    pass


class StubModule(types.ModuleType):
    __path__: list = []
    __version__ = "2.9.0+cu128"

    def __getattr__(self, name):
        if name in ("npu", "hpu", "xpu", "musa", "mlu") or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return _Any


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every third-party module that is not in REAL is a stub."""

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if any(k in top for k in ABSENT) or top == "sglang" or top in sys.stdlib_module_names or top in REAL:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module):
        pass


class SGLangLoader(importlib.machinery.SourceFileLoader):
    """sglang's real modules; top package __init__s skipped, a module that fails becomes a stub."""

    def exec_module(self, module):
        if self.path.endswith("__init__.py") and module.__name__.count(".") < 3 and "arg_groups" not in module.__name__:
            module.__class__ = StubModule
            return
        try:
            super().exec_module(module)
        except Exception as exc:  # noqa: BLE001 - any failure against the stubs: stub it, say so
            print(f"stubbed {module.__name__}: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)
            module.__class__ = StubModule


class SGLangFinder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if not name.startswith("sglang"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            spec.loader = SGLangLoader(name, spec.origin)
        return spec


def main() -> int:
    tree = sys.argv[1]
    sys.path.insert(0, tree + "/python")
    sys.meta_path.insert(0, SGLangFinder())
    sys.meta_path.append(StubFinder())
    import sglang.srt.server_args as server_args  # only after the finders are in place

    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.ServerArgs.add_cli_args(parser)
    out = []
    for action in parser._actions:
        if not action.option_strings or "-h" in action.option_strings:
            continue
        nargs = action.nargs if isinstance(action.nargs, (int, str, type(None))) else repr(action.nargs)
        choices = list(action.choices) if isinstance(action.choices, (list, tuple, set)) else None
        out.append({"names": action.option_strings, "dest": action.dest, "nargs": nargs, "choices": choices,
                    "type": getattr(action.type, "__name__", None)})
    json.dump(out, sys.stdout, default=repr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
