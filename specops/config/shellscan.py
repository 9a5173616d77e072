"""Where each `{{ }}` of a shell script template sits, as bash will read the rendered text.

Shell-mode templating quotes every value (`'...'`), which keeps it literal only where a
quoted word is a word: bare, or inside `$( )`. Inside double quotes a `'` is an ordinary
character, so `"{{ x }}"` with `$(id)` ran it; inside single quotes the value's own `'`
ends the quote; a heredoc body, backticks, arithmetic and comments are the same. Such a
`{{ }}` is refused when the playbook loads, naming file:line and the fix: leave it bare
(specops quotes it), or say `| raw` and quote it yourself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specops.errors import ConfigError

#: the contexts a value is literal in, once shell-quoted
SAFE = ("bare", "command substitution")
_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^']*)'|\"([^\"]*)\"|\\?([A-Za-z0-9_.\-]+))")
_RAW = re.compile(r"\|\s*raw\s*(?:-)?$")


@dataclass(frozen=True)
class Placement:
    """One `{{ expr }}`: its text, the script line it starts on (1-based), its context."""

    expr: str
    line: int
    context: str


def placements(text: str) -> list[Placement]:
    """Every `{{ }}` of `text` with the shell context it lands in."""
    return _Scanner(text).run()


class _Scanner:
    def __init__(self, text: str):
        self.text = text
        self.i = 0
        self.stack: list[str] = ["bare"]  # bare | squote | dquote | ansi | backtick | cmdsub | arith | comment | dtest
        self.arith_depth: list[int] = []
        self.heredocs: list[tuple[str, bool]] = []  # (delimiter, strip tabs) pending at the next newline
        self.found: list[Placement] = []

    def line(self) -> int:
        return self.text.count("\n", 0, self.i) + 1

    def context(self) -> str:
        names = {"squote": "single quotes", "dquote": "double quotes", "ansi": "$'...' quotes",
                 "backtick": "backticks", "arith": "arithmetic", "comment": "a comment", "heredoc": "a heredoc",
                 "dtest": "a [[ ]] test"}
        if "backtick" in self.stack:  # its text is re-read after `\` removal: a `'` or `` ` `` of the value ends it
            return names["backtick"]
        for state in reversed(self.stack):  # the innermost quoting names it
            if state in names:
                return names[state]
            if state == "cmdsub":
                return "command substitution"
        return "bare"

    def jinja(self) -> bool:
        """Skip a `{{ }}` (recorded), `{% %}` or `{# #}` at i; True when one was there."""
        two = self.text[self.i:self.i + 2]
        ends = {"{{": "}}", "{%": "%}", "{#": "#}"}
        if two not in ends:
            return False
        end = self.text.find(ends[two], self.i + 2)
        end = len(self.text) if end < 0 else end + 2
        if two == "{{":
            self.found.append(Placement(self.text[self.i:end], self.line(), self.context()))
        self.i = end
        return True

    def run(self) -> list[Placement]:
        t = self.text
        while self.i < len(t):
            if self.jinja():
                continue
            state = self.stack[-1]
            c = t[self.i]
            step = getattr(self, "_" + state)
            step(c)
        return self.found

    # each state's reader: consumes at least one character
    def _word_start(self) -> bool:
        j = self.i - 1
        return j < 0 or self.text[j] in " \t\n;&|()<>"

    def _bare(self, c: str) -> None:
        t, i = self.text, self.i
        if c == "\\":
            self.i += 2
        elif c == "'":
            self.stack.append("squote")
            self.i += 1
        elif c == '"':
            self.stack.append("dquote")
            self.i += 1
        elif t.startswith("$'", i):
            self.stack.append("ansi")
            self.i += 2
        elif t.startswith("((", i):  # an arithmetic command
            self.stack.append("arith")
            self.arith_depth.append(0)
            self.i += 2
        elif self._substitution():
            pass
        elif c == ")" and self.stack[-1] == "cmdsub":
            self.stack.pop()
            self.i += 1
        elif c == "#" and self._word_start():
            self.stack.append("comment")
            self.i += 1
        elif t.startswith("[[", i) and self._word_start() and self.stack[-1] != "dtest":
            self.stack.append("dtest")
            self.i += 2
        elif t.startswith("]]", i) and self.stack[-1] == "dtest":
            self.stack.pop()
            self.i += 2
        elif t.startswith("<<", i) and not t.startswith("<<<", i):
            m = _HEREDOC.match(t, i)
            if m:
                word = m.group(2) if m.group(2) is not None else m.group(3) if m.group(3) is not None else m.group(4)
                self.heredocs.append((word, m.group(1) == "-"))
                self.i = m.end()
            else:
                self.i += 2
        elif c == "\n" and self.heredocs:
            self.i += 1
            self._heredoc_bodies()
        else:
            self.i += 1

    _cmdsub = _bare
    _dtest = _bare

    def _squote(self, c: str) -> None:
        self.i += 1
        if c == "'":
            self.stack.pop()

    def _ansi(self, c: str) -> None:
        self.i += 2 if c == "\\" else 1
        if c == "'":
            self.stack.pop()

    def _dquote(self, c: str) -> None:
        if c == "\\":
            self.i += 2
        elif c == '"':
            self.stack.pop()
            self.i += 1
        elif not self._substitution():
            self.i += 1

    def _substitution(self) -> bool:
        """Enter `$((`, `$(` or a backtick at i, read alike bare and in double quotes; True when one was there."""
        t, i = self.text, self.i
        if t.startswith("$((", i):
            self.stack.append("arith")
            self.arith_depth.append(0)
            self.i += 3
        elif t.startswith("$(", i):
            self.stack.append("cmdsub")
            self.i += 2
        elif t[i] == "`":
            self.stack.append("backtick")
            self.i += 1
        else:
            return False
        return True

    def _backtick(self, c: str) -> None:
        self.i += 2 if c == "\\" else 1
        if c == "`":
            self.stack.pop()

    def _arith(self, c: str) -> None:
        if c == "(":
            self.arith_depth[-1] += 1
        elif c == ")":
            if self.arith_depth[-1] == 0 and self.text.startswith("))", self.i):
                self.stack.pop()
                self.arith_depth.pop()
                self.i += 2
                return
            self.arith_depth[-1] -= 1
        self.i += 1

    def _comment(self, c: str) -> None:
        if c == "\n":
            self.stack.pop()
            return  # the newline is read by the state below (a pending heredoc starts there)
        self.i += 1

    def _heredoc_bodies(self) -> None:
        """Read the pending heredocs' bodies, line by line, up to each delimiter line."""
        pending, self.heredocs = self.heredocs, []
        for word, strip in pending:
            self.stack.append("heredoc")
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                body = self.text[self.i:end]
                if (body.lstrip("\t") if strip else body) == word:
                    self.i = end + 1
                    break
                while self.i < end:
                    if not self.jinja():
                        self.i += 1
                self.i = end + 1
            self.stack.pop()

    def _heredoc(self, c: str) -> None:  # never the top of the stack outside _heredoc_bodies
        self.i += 1


def _is_raw(expr: str) -> bool:
    return bool(_RAW.search(expr[2:-2].strip()))


def check_script(text: str, where: str, what: str) -> None:
    """Refuse a `{{ }}` that would not stay literal where it sits in a shell script.
    `where` is the file:line of the script's key; `what` names the step for the message."""
    for p in placements(text):
        if p.context in SAFE or _is_raw(p.expr):
            continue
        raise ConfigError(
            f"{what}: {p.expr} sits inside {p.context} (line {p.line} of the script): specops shell-quotes "
            "each value, so there its quotes would be text and the value could run as code",
            where=_line_of(where, text, p.line),
            hint=f"leave it bare (specops quotes it): {p.expr} instead of \"{p.expr}\"; to quote it yourself, "
                 "write it with | raw; or pass the value in the step's env: and use \"$NAME\"")


def _line_of(where: str, text: str, line: int) -> str:
    """file:line of the script's `line`: a block scalar (`cmd: |`) starts on the next line."""
    file, sep, start = where.rpartition(":")
    if not sep or not start.isdigit():
        return where
    first = int(start) + (1 if text.endswith("\n") else 0)
    return f"{file}:{first + line - 1}"
