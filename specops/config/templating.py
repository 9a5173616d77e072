"""Jinja2 templating with StrictUndefined; in a shell script each value is one inert word.

Shell mode renders every `{{ }}` as one shell word holding exactly its value (`shell_word`):
the value itself when it is made only of characters no shell reads specially, else `$'...'`
with every other byte written `\\xHH`. That text holds nothing but those characters, `$`, `'`
and `\\`, so wherever the template put it (bare, in double or single quotes, a heredoc,
backticks, a comment) bash can neither expand nor split it: a value never runs, and no scanner
decides where it sits. Where bash reads a word (bare, `$( )`, backticks) it is the exact value;
a lone `"{{ x }}"` or `'{{ x }}'` loses the template's quotes, so it is there too.

What a command then does with its word is the command's: `eval` and bash arithmetic run it,
so a script that uses them and takes values is refused when the playbook loads
(`check_script`). Raw shell text says so, `{{ name | raw_shell }}`, and comes only from the
playbook file: `name` a literal of its `vars:`, never hosts.yaml, `--var` or a registered result.
"""

from __future__ import annotations

import contextvars
import functools
import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from specops.errors import ConfigError

if TYPE_CHECKING:
    import jinja2
    from jinja2 import nodes

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.S)
#: characters no shell context reads specially (shlex's own safe set)
_SAFE = re.compile(r"[\w@%+=:,./-]", re.ASCII)
#: `"{{ x }}"` / `'{{ x }}{{ y }}'`: quotes around nothing but expressions, standing as a word
#: of its own (or an assignment's value)
_LONE_QUOTED = re.compile(r"""(?<![^\s=])(["'])((?:\{\{(?:(?!\}\}).)*\}\})+)\1(?![^\s;&|)<>])""", re.S)
#: shell text that runs a word as code: eval, let, arithmetic, [[ ]] (its -eq evaluates);
#: `((` and `[[` where bash reads them as such, not in `f((a))` or a JSON `[[1,2]]`
_EVALUATES = re.compile(r"(?<![\w.-])(eval|let)(?![\w.'-])|(?<![^\s;&|!$])\(\(|\$\[|(?<![^\s;&|!(])\[\[(?=\s)")
_JINJA_MARKS = ("{{", "{%", "{#")


class _Raw(str):
    """Raw shell text from the playbook file, pasted unquoted."""


class _RawRefused(Exception):
    """`raw_shell` of a value that is not the playbook's own text."""


#: per shell template text, the playbook literals its `raw_shell` may paste (set at load)
_RAW_LITERALS: dict[str, frozenset[str]] = {}
_raw_allowed: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("raw_allowed", default=frozenset())


def shell_word(value: str) -> str:
    """`value` as one shell word that is inert in any quoting context (see the module doc)."""
    if "\0" in value:
        raise ValueError("a shell word cannot hold a NUL byte")
    if not value:
        return "''"
    if all(_SAFE.match(c) for c in value):
        return value
    body = "".join(c if _SAFE.match(c) else "".join(f"\\x{b:02x}" for b in c.encode()) for c in value)
    return f"$'{body}'"


def _shell_finalize(value: Any) -> Any:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, (list, tuple)):  # one word per item
        return " ".join(shell_word(str(v)) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return shell_word("" if value is None else str(value))


def _raw_shell(value: Any) -> _Raw:
    if not isinstance(value, str) or value not in _raw_allowed.get():
        raise _RawRefused
    return _Raw(value)


@functools.cache
def _envs() -> dict[str, jinja2.Environment]:
    """The three environments, made at the first template: jinja2 is imported here, not at
    the top, so a playbook without `{{ }}` never loads it (0.1 s of every command's start)."""
    import jinja2
    from jinja2.nativetypes import NativeEnvironment

    envs = {"plain": jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True),
            "shell": jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                        finalize=_shell_finalize),
            "native": NativeEnvironment(undefined=jinja2.StrictUndefined)}
    for name in ("plain", "native"):
        envs[name].filters["quote"] = lambda v: shlex.quote(str(v))
    envs["shell"].filters["quote"] = lambda v: v  # every value is quoted once, on the way out
    envs["shell"].filters["raw_shell"] = _raw_shell
    return envs


@functools.lru_cache(maxsize=4096)
def _template(env: str, text: str) -> jinja2.Template:
    """Compiled once per text: a playbook's steps render the same strings for every host
    (2000 hosts x 20 steps compiled each one anew: 27 s before a run could start)."""
    if env == "shell":
        text = _LONE_QUOTED.sub(r"\2", text)
    return _envs()[env].from_string(text)


@functools.lru_cache(maxsize=4096)
def _expression(text: str) -> Callable[..., Any]:
    """Compiled once per text, as _template: a cache keyed by the expression's own text, so
    the same entry is right for every host and every run in the process."""
    return _envs()["plain"].compile_expression(text, undefined_to_none=False)


def _undefined_name(exc: jinja2.UndefinedError) -> str:
    match = re.search(r"'([^']+)' is undefined", str(exc))
    return match.group(1) if match else str(exc)


def render(text: str, variables: dict[str, Any], *, shell: bool = False, where: str = "") -> Any:
    """Render one string. A string that is a single `{{ expr }}` keeps its native type
    (a list stays a list), except in shell mode where everything becomes quoted text."""
    if "{{" not in text and "{%" not in text:
        return text
    import jinja2

    try:
        if shell:
            token = _raw_allowed.set(_RAW_LITERALS.get(text, frozenset()))
            try:
                return _template("shell", text).render(variables)
            finally:
                _raw_allowed.reset(token)
        if _SINGLE_EXPR.match(text):
            value = _template("native", text).render(variables)
            if isinstance(value, jinja2.Undefined):
                str(value)  # raises UndefinedError with the variable's name
            return value
        return _template("plain", text).render(variables)
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"undefined variable '{_undefined_name(exc)}'", where=where) from None
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template error: {exc}", where=where) from None
    except _RawRefused:
        raise ConfigError("raw_shell pastes text of the playbook file only, and a value here was set elsewhere "
                          "(hosts.yaml, --var or a registered result)", where=where,
                          hint="drop | raw_shell (the value is then quoted as one word), or leave the playbook's "
                               "vars: value as it is") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:  # a value of the wrong kind
        raise ConfigError(f"cannot render {text.strip()!r}: {exc}", where=where) from None


def render_tree(value: Any, variables: dict[str, Any], *, where: str = "") -> Any:
    """Render every string inside dicts/lists (never in shell mode: a shell script is rendered
    by `render(..., shell=True)` after `check_script` saw it at load)."""
    if isinstance(value, str):
        return render(value, variables, where=where)
    if isinstance(value, list):
        return [render_tree(v, variables, where=where) for v in value]
    if isinstance(value, dict):
        return {k: render_tree(v, variables, where=where) for k, v in value.items()}
    return value


def evaluate(expression: str, variables: dict[str, Any], *, where: str = "") -> Any:
    """Evaluate a bare expression (for `when:`)."""
    import jinja2

    try:
        return _expression(expression)(**variables)
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"undefined variable '{_undefined_name(exc)}' in when: {expression}", where=where) from None
    except jinja2.TemplateError as exc:
        raise ConfigError(f"bad when: expression '{expression}': {exc}", where=where) from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:  # e.g. `'x' in arms` with arms=3
        raise ConfigError(f"cannot evaluate when: {expression}: {exc}", where=where) from None


@functools.lru_cache(maxsize=1024)
def names_in(expression: str) -> frozenset[str]:
    """The variables a bare expression (a `when:`) reads; empty when it does not parse (the
    evaluation then says why). Cached by the expression's text, which alone decides it."""
    import jinja2
    from jinja2 import meta

    try:
        return frozenset(meta.find_undeclared_variables(_envs()["plain"].parse("{{ (" + expression + ") }}")))
    except jinja2.TemplateError:
        return frozenset()


def is_false(value: Any) -> bool:
    """A `when:` result that skips its step: falsy, or a string that says false."""
    return not value or (isinstance(value, str) and value.strip().lower() in ("false", "0", "no", ""))


def check_script(text: str, where: str, what: str, playbook_vars: Mapping[str, Any]) -> None:
    """At load, for a shell script template: it parses; each `raw_shell` pastes a playbook
    literal (remembered for render); a script that runs eval or arithmetic takes no values.
    `where` is the file:line of the script's key, `what` names the step."""
    if not any(m in text for m in _JINJA_MARKS):
        return  # nothing to render: jinja2 stays unloaded (see _envs)
    import jinja2
    from jinja2 import nodes

    try:
        tree = _envs()["plain"].parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{what}: template error: {exc.message}", where=script_line(where, text, exc.lineno)) from None
    literals = {_raw_literal(f, where, text, what, playbook_vars) for f in tree.find_all(nodes.Filter)
                if f.name in ("raw", "raw_shell")}
    _RAW_LITERALS[text] = _RAW_LITERALS.get(text, frozenset()) | literals
    if any(not isinstance(n, nodes.TemplateData) and not _is_raw(n) for o in tree.find_all(nodes.Output) for n in o.nodes):
        _refuse_evaluators(tree, where, text, what)


def _is_raw(node: nodes.Node) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Filter) and node.name == "raw_shell"


def _raw_literal(f: nodes.Filter, where: str, text: str, what: str, playbook_vars: Mapping[str, Any]) -> str:
    """The playbook text a `raw_shell` filter pastes; anything else is refused."""
    from jinja2 import nodes

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{what}: {why}: raw shell text may come only from the playbook file",
                           where=script_line(where, text, f.lineno),
                           hint="leave the value bare (specops quotes it as one word), or set the text in the "
                                "playbook's vars: and write {{ name | raw_shell }}")

    if f.name == "raw":
        raise refuse("'| raw' is now '| raw_shell', which takes a playbook variable")
    if isinstance(f.node, nodes.Const) and isinstance(f.node.value, str) and not f.args and not f.kwargs:
        return f.node.value
    if not isinstance(f.node, nodes.Name) or f.args or f.kwargs:
        raise refuse("raw_shell takes a playbook variable ({{ name | raw_shell }}) or a string literal")
    value = playbook_vars.get(f.node.name)
    if f.node.name not in playbook_vars:
        raise refuse(f"'{f.node.name}' is not a variable of this playbook (its vars:)")
    if not isinstance(value, str) or any(m in value for m in _JINJA_MARKS):
        raise refuse(f"'{f.node.name}' is not a literal (its value in vars: is a template or not a string)")
    return value


def _refuse_evaluators(tree: nodes.Template, where: str, text: str, what: str) -> None:
    """eval, let, (( )), $[ ] and [[ ]] read a word as code: refused in a script taking values."""
    from jinja2 import nodes

    for data in tree.find_all(nodes.TemplateData):
        m = _EVALUATES.search(data.data)
        if m:
            line = data.lineno + data.data.count("\n", 0, m.start())
            word = m.group(1) or {"((": "arithmetic (( ))", "$[": "arithmetic $[ ]", "[[": "[[ ]]"}[m.group(0)]
            raise ConfigError(
                f"{what}: the script runs {word} (line {line} of the script) and takes template values: "
                f"{word} would run a value as code, even one quoted as a single word",
                where=script_line(where, text, line),
                hint="pass values to commands that read them as data ([ \"$n\" -eq 3 ], a program's argv), or "
                     "paste playbook text with {{ name | raw_shell }}")


def script_line(where: str, text: str, line: int) -> str:
    """file:line of the script's `line`: a block scalar (`cmd: |`) starts on the next line."""
    file, sep, start = where.rpartition(":")
    if not sep or not start.isdigit():
        return where
    first = int(start) + (1 if text.endswith("\n") else 0)
    return f"{file}:{first + line - 1}"
