"""Issue 55, point 2: the renderer quotes each `{{ }}` of a shell script as one word; no scanner
judges where it sits.

Hostile values are rendered in every context a script can put them in and the result run
with bash: nowhere does a value run, and where bash reads a word (bare, `$( )`, backticks, a
lone quoted expression) it is exactly the value. A script that runs eval or arithmetic (which
reparse a word as code) and takes values is refused at load; `raw_shell` pastes only playbook
literals."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specops.config.playbook import Step, load_playbook
from specops.config.templating import check_script, render, shell_word
from specops.errors import ConfigError
from specops.steps import KINDS

#: values that would print INJECTED if any of them ran (their own text says INJ""ECTED)
HOSTILE = ['$(echo INJ""ECTED)', "'; echo INJ\"\"ECTED #", '"; echo INJ""ECTED; "', '`echo INJ""ECTED`',
           'EOF\necho INJ""ECTED', 'a\nEOF\necho INJ""ECTED\ncat <<EOF', "\\", "it's", "${HOME}", "*", "-n", "",
           "  lead and trail  ", "\n\n", "a'b\"c`d$e\\f", "))", "'\"'\"'", "}}", '\\"; echo INJ""ECTED; \\"',
           "\\'; echo INJ\"\"ECTED; '", "é ü\t~", "%}", "{{ x }}"]
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
VALUES = st.one_of(st.sampled_from(HOSTILE), TEXT)

#: where the value lands: (template, what bash prints for value v; None: some text, never run)
PLACES: dict[str, tuple[str, Callable[[str], str] | None]] = {
    "bare": ("printf '%s' {{ x }}", lambda v: v),
    "concatenated": ("printf '%s' pre{{ x }}post", lambda v: f"pre{v}post"),
    "assignment": ("w={{ x }}; printf '%s' \"$w\"", lambda v: v),
    "lone double quotes": ('printf \'%s\' "{{ x }}"', lambda v: v),
    "lone single quotes": ("printf '%s' '{{ x }}'", lambda v: v),
    "lone quotes, two values": ('printf \'%s\' "{{ x }}{{ x }}"', lambda v: v + v),
    "command substitution": ("""printf '%s' "$(printf '%s.' {{ x }})\"""", lambda v: v + "."),
    "substitution, bare": ("printf '%s' $(printf '%s' {{ x }} | od -An -tx1 | tr -d ' \\n')",
                           lambda v: v.encode().hex()),
    "backticks": ("printf '%s' \"`printf '%s.' {{ x }}`\"", lambda v: v + "."),
    "double quotes": ('printf \'%s\' "v={{ x }}"', None),
    "single quotes": ("printf '%s' 'v={{ x }}'", None),
    "escaped in double quotes": ('printf \'%s\' "\\{{ x }}"', None),
    "escaped": ("printf '%s' \\{{ x }}", None),
    "after a dollar": ("printf '%s' ${{ x }}", None),
    "ansi quotes": ("printf '%s' $'{{ x }}'", None),
    "quoted pieces": ('printf \'%s\' "a"{{ x }}"b"', lambda v: f"a{v}b"),
    "heredoc": ("cat <<EOF\n{{ x }}\nEOF", None),
    "quoted heredoc": ("cat <<'EOF'\n{{ x }}\nEOF", None),
    "indented heredoc": ("cat <<-EOF\n\t{{ x }}\n\tEOF", None),
    "jinja string with %}": ('{% if x != "%}" %}{% endif %}printf \'%s\' "v={{ x }}"', None),
    "comment": ("true # {{ x }}", None),
    "double quotes in a substitution": ("""printf '%s' $(printf '%s' "v={{ x }}")""", None),
    "nested bash -c, single-quoted": ("bash -c 'printf %s \"{{ x }}\"'", None),
}
#: around the placement: a script the value's line sits inside (%s is the placement)
WRAPPERS = ["%s", "{ %s; }", "( %s )", "if true; then\n  %s\nfi", "f() {\n  %s\n}\nf", "%s | cat",
            "x=1; %s; y=2", "for i in 1; do %s; done"]


def _bash(script: str) -> str:
    out = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    return out.stdout.decode("utf-8", "surrogateescape")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(sorted(PLACES)), wrapper=st.sampled_from(WRAPPERS), value=VALUES)
def test_a_value_never_runs_and_is_exact_where_bash_reads_a_word(place: str, wrapper: str, value: str) -> None:
    template, expected = PLACES[place]
    script = wrapper % template
    check_script(script, "p.yaml:7", "step 'x'", {})  # no place is refused: the renderer makes each safe
    out = _bash(render(script, {"x": value}, shell=True))
    assert "INJECTED" not in out, (place, value, out)
    if expected is not None:
        assert out == expected(value), (place, value)


@settings(max_examples=200, deadline=None)
@given(value=TEXT)
def test_a_shell_word_is_the_value(value: str) -> None:
    word = shell_word(value)
    assert _bash(f"set -- {word}; printf '%s' \"$#:$1\"") == f"1:{value}"
    assert set(word) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-$'\\")


def test_a_value_is_quoted_as_one_word() -> None:
    evil = "x; touch PWNED; echo $(id) `id` 'q' \"d\""
    out = render("echo {{ v }} > {{ path }} {{ n }} {{ e }}", {"v": evil, "path": "/tmp/a b", "n": 3, "e": ""},
                 shell=True)
    assert out == ("echo $'x\\x3b\\x20touch\\x20PWNED\\x3b\\x20echo\\x20\\x24\\x28id\\x29\\x20\\x60id\\x60\\x20"
                   "\\x27q\\x27\\x20\\x22d\\x22' > $'/tmp/a\\x20b' 3 ''")
    assert render("ls {{ d }}/x", {"d": "/srv/spec-ops_1"}, shell=True) == "ls /srv/spec-ops_1/x"  # plain stays plain
    with pytest.raises(ConfigError, match="NUL"):
        render("echo {{ v }}", {"v": "a\0b"}, shell=True, where="p.yaml:3")


@pytest.mark.parametrize("script", ["eval {{ x }}", "eval \"{{ x }}\"", "v={{ x }}; eval \"$v\"", "(( {{ x }} ))",
                                    "echo $(( {{ x }} + 1 ))", "echo $[ {{ x }} ]", "[[ {{ x }} -eq 0 ]]",
                                    "let n={{ x }}", "command eval {{ x }}",
                                    "if [[ {{ x }} -gt 1 ]]; then :; fi", "x=1;((x+={{ x }}))"])
def test_a_script_that_runs_a_word_as_code_and_takes_values_is_refused(script: str, tmp_path: Path) -> None:
    """Why: such a script runs a quoted value, e.g. arithmetic evaluates `a[$(...)]`."""
    mark = tmp_path / "RAN"
    _bash(render(script + " 2>/dev/null; true", {"x": f"a[$(touch {mark})]"}, shell=True))
    assert mark.exists(), script  # the hole each refusal closes
    with pytest.raises(ConfigError) as err:
        check_script(f"set -e\n{script}", "p.yaml:3", "step 'x'", {})
    assert "as code" in err.value.message and "line 2 of the script" in err.value.message
    assert err.value.where == "p.yaml:4"


def test_evaluators_without_values_or_inside_jinja_are_fine() -> None:
    check_script("n=$(( 1 + 2 )); [[ $n -eq 3 ]]; eval true", "p.yaml:3", "step 'x'", {})
    check_script("echo {{ ((a)) }} {{ '[[' }} {{ 'eval' }} evaluate leteval", "p.yaml:3", "step 'x'", {})
    check_script("eval {{ code | raw_shell }}", "p.yaml:3", "step 'x'", {"code": "echo hi"})
    check_script("python3 -c 'print((1))' --cfg '[[1,8,3]]' {{ x }} # let's", "p.yaml:3", "step 'x'", {})


def test_raw_shell_pastes_playbook_literals_only() -> None:
    script = "echo hi {{ up | raw_shell }} {{ '; echo lit' | raw_shell }}"
    with pytest.raises(ConfigError, match="raw_shell pastes text of the playbook file only"):
        render(script, {"up": "| tr a-z A-Z"}, shell=True, where="p.yaml:3")  # not seen at load: nothing is raw
    check_script(script, "p.yaml:3", "step 'x'", {"up": "| tr a-z A-Z"})
    assert _bash(render(script, {"up": "| tr a-z A-Z"}, shell=True)) == "HI\nlit\n"
    with pytest.raises(ConfigError, match="set elsewhere") as err:
        render(script, {"up": "; touch PWNED"}, shell=True, where="p.yaml:3: step 1 'x'")
    assert err.value.where == "p.yaml:3: step 1 'x'"


@pytest.mark.parametrize("script, why", [
    ("{{ x | raw_shell }}", "'x' is not a variable of this playbook"),
    ("{{ t | raw_shell }}", "'t' is not a literal"),
    ("{{ n | raw_shell }}", "'n' is not a literal"),
    ("{{ up | upper | raw_shell }}", "raw_shell takes a playbook variable"),
    ("{% filter raw_shell %}{{ x }}{% endfilter %}", "raw_shell takes a playbook variable"),
    ("{{ up | raw_shell(1) }}", "raw_shell takes a playbook variable"),
    ("{{ up | raw }}", "'| raw' is now '| raw_shell'"),
])
def test_raw_shell_of_anything_else_is_refused_at_load(script: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_script(f"true\necho {script}", "p.yaml:3", "step 'x'", {"up": "| cat", "t": "{{ x }}", "n": 3})
    assert why in err.value.message and "step 'x'" in err.value.message and err.value.where == "p.yaml:4"


def test_a_template_error_is_refused_at_load_with_its_line(tmp_path: Path) -> None:
    pb = tmp_path / "p.yaml"
    pb.write_text(textwrap.dedent("""\
        name: q
        vars: {up: "| tr a-z A-Z"}
        steps:
          - name: fine
            shell: echo {{ workdir }} {{ up | raw_shell }}
          - name: broken
            shell:
              cmd: |
                set -e
                echo {{ who }
        """))
    with pytest.raises(ConfigError) as err:
        load_playbook(pb, KINDS)
    assert err.value.where == f"{pb}:10" and "step 2 'broken'" in err.value.message


def test_rollback_scripts_are_checked_too(tmp_path: Path) -> None:
    pb = tmp_path / "p.yaml"
    pb.write_text("steps:\n  - name: a\n    shell: 'true'\n    rollback: eval {{ x }}\n")
    with pytest.raises(ConfigError) as err:
        load_playbook(pb, KINDS)
    assert err.value.where == f"{pb}:4" and "step 1 'a' rollback" in err.value.message
    pb.write_text("steps:\n  - name: a\n    shell: echo '{{ y }}' \"{{ z }}\" \"$(cat {{ z }})\"\n    rollback: [echo, '{{ x }}']\n")
    assert [s.name for s in load_playbook(pb, KINDS).steps] == ["a"]


def test_an_argv_list_stays_unquoted() -> None:
    step = Step(index=0, name="x", kind="shell", args=["printf", "%s", "{{ x }}"], where="p.yaml:3")
    assert KINDS["shell"].render(step, {"x": "a b $(id)"})["cmd"] == ["printf", "%s", "a b $(id)"]
