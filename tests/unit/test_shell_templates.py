"""Issue 35, finding 2: a `{{ }}` in a shell script stays literal, or the playbook is refused.

Shell mode quotes each value (`'...'`), which protects it only where a quoted word is a
word. Hostile values are rendered in every context a script can put them in, the result
run with bash: the value comes out literally, or the check (`config.shellscan`, run when
the playbook loads) refused the script, naming file:line and the fix."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specops.config.playbook import load_playbook
from specops.config.shellscan import check_script, placements
from specops.config.templating import render
from specops.errors import ConfigError
from specops.steps import KINDS

HOSTILE = ["$(echo INJECTED)", "'; echo INJECTED #", '"; echo INJECTED; "', "`echo INJECTED`", "EOF\necho INJECTED",
           "a\nEOF\necho INJECTED\ncat <<EOF", "\\", "it's", "${HOME}", "*", "-n", "", "  lead and trail  ", "\n\n",
           "a'b\"c`d$e\\f", "x[$(echo INJECTED)]", "))", "'\"'\"'", "}}"]
VALUES = st.one_of(st.sampled_from(HOSTILE),
                   st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30))

#: where the value lands: (template, what bash prints for value v or None when refused)
PLACES = {
    "bare": ("printf '%s' {{ x }}", lambda v: v),
    "concatenated": ("printf '%s' pre{{ x }}post", lambda v: f"pre{v}post"),
    "command substitution": ("""printf '%s' "$(printf '%s.' {{ x }})\"""", lambda v: v + "."),
    "substitution, bare": ("printf '%s' $(printf '%s' {{ x }} | od -An -tx1 | tr -d ' \\n')",
                           lambda v: v.encode().hex()),
    "double quotes": ('printf \'%s\' "{{ x }}"', None),
    "single quotes": ("printf '%s' '{{ x }}'", None),
    "ansi quotes": ("printf '%s' $'{{ x }}'", None),
    "heredoc": ("cat <<EOF\n{{ x }}\nEOF", None),
    "quoted heredoc": ("cat <<'EOF'\n{{ x }}\nEOF", None),
    "indented heredoc": ("cat <<-EOF\n\t{{ x }}\n\tEOF", None),
    "backticks": ("printf '%s' `printf '%s' {{ x }}`", None),
    "substitution in backticks": ("printf '%s' \"`printf '%s' $(printf '%s' {{ x }})`\"", None),
    "arithmetic": ("echo $(( {{ x }} ))", None),
    "comment": ("true # {{ x }}", None),
    "double quotes in a substitution": ("""printf '%s' $(printf '%s' "{{ x }}")""", None),
}
#: around the placement: a script the value's line sits inside (%s is the placement)
WRAPPERS = ["%s", "{ %s; }", "( %s )", "if true; then\n  %s\nfi", "f() {\n  %s\n}\nf", "%s | cat",
            "x=1; %s; y=2", "for i in 1; do %s; done"]


def _bash(script: str) -> str:
    out = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    return out.stdout.decode("utf-8", "surrogateescape")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(sorted(PLACES)), wrapper=st.sampled_from(WRAPPERS), value=VALUES)
def test_a_value_comes_out_literally_or_the_script_is_refused(place: str, wrapper: str, value: str) -> None:
    template, expected = PLACES[place]
    script = wrapper % template
    try:
        check_script(script, "p.yaml:7", "step 'x'")
    except ConfigError as exc:
        assert expected is None, f"{place} was refused: {exc.message}"
        assert exc.where and exc.where.startswith("p.yaml:") and "leave it bare" in (exc.hint or "")
        return
    assert expected is not None, f"{place} ({script!r}) was accepted"
    assert _bash(render(script, {"x": value}, shell=True)) == expected(value)


@pytest.mark.parametrize("place", sorted(p for p, (_, e) in PLACES.items() if e is None))
def test_the_refused_places_do_run_a_value_as_code(place: str) -> None:
    """Why each refusal is there: without it, one of the hostile values runs (or comes out
    altered): so the property above could fail."""
    template, _ = PLACES[place]
    bad = [v for v in HOSTILE if _bash(render(template, {"x": v}, shell=True)) not in (v, v + "\n")]
    assert bad, f"{place}: every hostile value came out literally; the refusal is not needed"


def test_a_quoted_template_in_a_playbook_is_refused_at_load_with_its_line(tmp_path: Path) -> None:
    pb = tmp_path / "p.yaml"
    pb.write_text(textwrap.dedent("""\
        name: q
        steps:
          - name: fine
            shell: echo {{ workdir }}
          - name: greet
            shell:
              cmd: |
                set -e
                echo start
                echo "hello {{ who }}"
        """))
    with pytest.raises(ConfigError) as err:
        load_playbook(pb, KINDS)
    assert err.value.where == f"{pb}:10"
    assert "{{ who }} sits inside double quotes" in err.value.message and "step" in err.value.message
    assert "leave it bare" in (err.value.hint or "") and "| raw" in (err.value.hint or "")


def test_rollback_scripts_and_plain_scalars_are_checked_too(tmp_path: Path) -> None:
    pb = tmp_path / "p.yaml"
    pb.write_text("steps:\n  - name: a\n    shell: 'true'\n    rollback: rm -rf '{{ workdir }}/x'\n")
    with pytest.raises(ConfigError) as err:
        load_playbook(pb, KINDS)
    assert err.value.where == f"{pb}:4" and "single quotes" in err.value.message
    pb.write_text("steps:\n  - name: a\n    shell: echo '{{ x | raw }}' {{ y }} \"$(cat {{ z }})\"\n")
    assert [s.name for s in load_playbook(pb, KINDS).steps] == ["a"]  # raw: the author quotes it


def test_placements_name_each_context() -> None:
    script = "echo {{ a }} \"{{ b }}\" '{{ c }}' $(x {{ d }}) `{{ e }}`\ncat <<E\n{{ f }}\nE\necho {{ g }} # {{ h }}"
    assert [(p.expr, p.line, p.context) for p in placements(script)] == [
        ("{{ a }}", 1, "bare"), ("{{ b }}", 1, "double quotes"), ("{{ c }}", 1, "single quotes"),
        ("{{ d }}", 1, "command substitution"), ("{{ e }}", 1, "backticks"), ("{{ f }}", 3, "a heredoc"),
        ("{{ g }}", 5, "bare"), ("{{ h }}", 5, "a comment")]


def test_a_template_inside_a_double_bracket_test_is_refused_since_bash_evaluates_it(tmp_path: Path) -> None:
    """`[[ A -eq B ]]` evaluates its operands as arithmetic, where an array subscript runs a
    command substitution even from a single-quoted value: such a `{{ }}` is refused."""
    mark = tmp_path / "RAN"
    script = "[[ {{ x }} -eq 0 ]] 2>/dev/null; true"
    _bash(render(script, {"x": f"a[$(touch {mark})]"}, shell=True))
    assert mark.exists()  # the hole: the quoted value ran
    with pytest.raises(ConfigError) as err:
        check_script(script, "p.yaml:3", "step 'x'")
    assert "a [[ ]] test" in err.value.message
    check_script("[[ -n {{ x | raw }} ]] && [[ $a == b ]]; printf '%s' {{ x }}", "p.yaml:3", "step 'x'")
