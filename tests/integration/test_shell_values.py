"""Issue 55, point 2: in a shell script the renderer quotes every `{{ }}` as one word; no
scanner judges what is safe. Through the CLI on a local host, as a user runs it: a value from
`--var`, hosts.yaml or a registered result arrives as exactly one word with its exact value,
wherever the template puts it it never runs, a command that would run it as code (eval,
arithmetic) is refused when the playbook loads, and raw shell text (`| raw_shell`) comes only
from the playbook file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from tests.support.deploy import inventory, run_cli, write_yaml

#: each value a user might pass; `{P}` is the file a value that ran would create
VALUES = ["$(touch {P})", "`touch {P}`", "a; touch {P}", "a\ntouch {P}", "it's", 'say "hi"', "'\"'\"'",
          "back\\slash\\", "two  words ", "", " ", "*", "~", "${HOME}", "-n", "é ü", "a\tb", "}}", "EOF\ntouch {P}",
          "\\{{ v }}", "x[$(touch {P})]"]
#: where a template may put a value: (text before `set --`, the words set, the one word for value v)
PLACES: dict[str, tuple[str, str, Callable[[str], str]]] = {
    "bare": ("", "{{ v }}", lambda v: v),
    "double quotes": ("", '"{{ v }}"', lambda v: v),
    "single quotes": ("", "'{{ v }}'", lambda v: v),
    "assignment": ("w={{ v }}; ", '"$w"', lambda v: v),
    "option": ("", "--opt={{ v }}", lambda v: f"--opt={v}"),
    "concatenated": ("", "pre{{ v }}post", lambda v: f"pre{v}post"),
    "command substitution": ("", "\"$(printf '%s' {{ v }})\"", lambda v: v),
    "backticks": ("", "\"`printf '%s' {{ v }}`\"", lambda v: v),
}


def _var(name: str, value: object) -> list[str]:
    """`--var NAME=VALUE` that the CLI's YAML reading returns exactly (a JSON string is YAML)."""
    return ["--var", f"{name}={json.dumps(value)}"]


def _values(tmp_path: Path) -> list[str]:
    return [v.replace("{P}", str(tmp_path / "PWNED")) for v in VALUES]


def _words(path: Path) -> list[tuple[int, str]]:
    """(number of words, first word) per line a step wrote with `printf '%s\\0%s\\0'`."""
    parts = path.read_bytes().decode().split("\0")[:-1]
    return [(int(parts[i]), parts[i + 1]) for i in range(0, len(parts), 2)]


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return inventory(tmp_path, {"h0": {"connection": "local", "workdir": str(tmp_path / "w0")}})


def _deploy(tmp_path: Path, inv: Path, steps: list[dict], *extra: str, **playbook: object):
    pb = write_yaml(tmp_path / "p.yaml", {"name": "t", **playbook, "steps": steps})
    return pb, run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), *extra)


def _one_word_steps(values: list[str], source: str) -> list[dict]:
    """A step per place: each value set as the positional parameters, `$#` and `$1` written."""
    steps = [{"name": "workdir", "shell": ["mkdir", "-p", "{{ workdir }}"]}]
    for place, (before, words, _) in PLACES.items():
        line = f"{before}set -- {words}; printf '%s\\0%s\\0' \"$#\" \"$1\" >> {{{{ workdir }}}}/{place.replace(' ', '_')}"
        lines = [line.replace("{{ v }}", f"{{{{ {source}{i} }}}}") for i in range(len(values))]
        steps.append({"name": place, "shell": "\n".join(lines)})
    return steps


def _assert_one_word_each(tmp_path: Path, values: list[str]) -> None:
    for place, (_, _, expected) in PLACES.items():
        got = _words(tmp_path / "w0" / place.replace(" ", "_"))
        want = [(1, expected(v)) for v in values]
        assert got == want, place
    assert not (tmp_path / "PWNED").exists()


def test_each_var_value_arrives_as_one_word_with_its_exact_value(tmp_path: Path, inv: Path) -> None:
    values = _values(tmp_path)
    args = [a for i, v in enumerate(values) for a in _var(f"v{i}", v)]
    _, res = _deploy(tmp_path, inv, _one_word_steps(values, "v"), *args)
    assert res.exit_code == 0, res.output
    _assert_one_word_each(tmp_path, values)


def test_inventory_values_arrive_as_one_word_too(tmp_path: Path) -> None:
    values = _values(tmp_path)
    inv = inventory(tmp_path, {"h0": {"connection": "local", "workdir": str(tmp_path / "w0")}},
                    {f"h{i}": v for i, v in enumerate(values)})
    _, res = _deploy(tmp_path, inv, _one_word_steps(values, "h"))
    assert res.exit_code == 0, res.output
    _assert_one_word_each(tmp_path, values)


def test_registered_output_arrives_as_one_word(tmp_path: Path, inv: Path) -> None:
    evil = f"$(touch {tmp_path / 'PWNED'}); `touch {tmp_path / 'PWNED'}`"
    _, res = _deploy(tmp_path, inv, [
        {"name": "emit", "shell": ["printf", "%s", evil], "register": "r"},
        {"name": "use", "shell": "mkdir -p {{ workdir }}; set -- {{ r.stdout }}; "
                                 "printf '%s\\0%s\\0' \"$#\" \"$1\" > {{ workdir }}/out"}])
    assert res.exit_code == 0, res.output
    assert _words(tmp_path / "w0" / "out") == [(1, evil)]
    assert not (tmp_path / "PWNED").exists()


#: templates an earlier scanner judged wrongly, and every other place a value can sit: run for
#: each hostile value, none may run it (the value comes out as text, whatever text it is)
NEVER_RUN = [
    'echo "\\{{ x }}"',  # the scanner skipped the character after a backslash
    '{% if x != "%}" %}{% endif %}echo "v={{ x }}"',  # a `%}` in a Jinja string put it out of step
    'echo "v={{ x }}"', "echo 'v={{ x }}'", "echo $'v={{ x }}'", 'echo "a"{{ x }}"b"',
    "cat <<EOF\n{{ x }}\nEOF", "cat <<'EOF'\n{{ x }}\nEOF", "cat <<-EOF\n\t{{ x }}\n\tEOF",
    "echo `echo {{ x }}`", "echo \"`echo \"{{ x }}\"`\"", "true # {{ x }}", 'echo "$(echo "{{ x }}")"',
    "echo \\{{ x }}", "echo ${{ x }}", "echo '\"{{ x }}\"'",
]
HOSTILE = ["$(touch {P})", "`touch {P}`", "'; touch {P}; '", '"; touch {P}; "', "\ntouch {P}\n",
           "EOF\ntouch {P}\nEOF", "\\\"; touch {P}; \\\"", "\\'; touch {P}; '"]


@pytest.mark.parametrize("template", NEVER_RUN)
def test_a_value_never_runs_wherever_the_template_puts_it(tmp_path: Path, inv: Path, template: str) -> None:
    pwned = tmp_path / "PWNED"
    hostile = [v.replace("{P}", str(pwned)) for v in HOSTILE]
    _, res = _deploy(tmp_path, inv, [{"name": "place", "shell": "{% for x in xs %}" + template + "\n{% endfor %}"}],
                     *_var("xs", hostile))
    assert res.exit_code == 0, res.output
    assert not pwned.exists()


def test_a_rollback_script_is_quoted_alike(tmp_path: Path, inv: Path) -> None:
    pwned = tmp_path / "PWNED"
    rollback = "{% for x in xs %}echo \"\\{{ x }}\"; echo 'v={{ x }}'; echo {{ x }}\n{% endfor %}"
    _, res = _deploy(tmp_path, inv, [{"name": "fails", "shell": "false", "rollback": rollback}],
                     *_var("xs", [v.replace("{P}", str(pwned)) for v in HOSTILE]))
    assert res.exit_code == 1 and "rolled back" in res.output, res.output
    assert not pwned.exists()


@pytest.mark.parametrize("script, line", [
    ("eval {{ x }}", 1), ('eval "{{ x }}"', 1), ('v={{ x }}\neval "$v"', 2), ("builtin eval {{ x }}", 1),
    ("(( {{ x }} ))", 1), ("echo $(( {{ x }} + 1 ))", 1), ("[[ {{ x }} -eq 0 ]]", 1), ("let n={{ x }}", 1),
])
def test_a_command_that_would_run_a_value_as_code_is_refused_at_load(tmp_path: Path, inv: Path,
                                                                    script: str, line: int) -> None:
    """eval (and bash arithmetic, which runs `a[$(...)]` in a subscript) reparses the one word
    the value arrives as: a script that does so and takes values is refused, naming file:line."""
    pwned = tmp_path / "PWNED"
    pb, res = _deploy(tmp_path, inv, [{"name": "ok", "shell": "true"}, {"name": "evaluates", "shell": {"cmd": f"set -e\n{script}"}}],
                      *_var("x", f"a[$(touch {pwned})]"))
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"{pb}:" in text and f"line {line + 1} of the script" in text, text
    assert "step 2 'evaluates'" in text and "as code" in text, text
    assert not pwned.exists()


def test_eval_of_playbook_text_is_allowed_through_raw_shell(tmp_path: Path, inv: Path) -> None:
    """eval of the playbook's own text is the author's code: a script with no other value may."""
    _, res = _deploy(tmp_path, inv, [{"name": "dir", "shell": ["mkdir", "-p", "{{ workdir }}"]},
                                     {"name": "e", "shell": {"cmd": "eval {{ code | raw_shell }}", "chdir": "{{ workdir }}"}}],
                     vars={"code": "echo from the playbook > out"})
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w0" / "out").read_text() == "from the playbook\n"


def test_raw_shell_takes_a_playbook_literal(tmp_path: Path, inv: Path) -> None:
    _, res = _deploy(tmp_path, inv, [
        {"name": "upper", "shell": "mkdir -p {{ workdir }}; echo hi {{ up | raw_shell }} > {{ workdir }}/o"}],
        vars={"up": "| tr a-z A-Z"})
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w0" / "o").read_text() == "HI\n"


def test_raw_shell_refuses_a_value_from_var_or_hosts_yaml(tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    steps = [{"name": "upper", "shell": "echo hi {{ up | raw_shell }}"}]
    inv = inventory(tmp_path, {"h0": {"connection": "local", "workdir": str(tmp_path / "w0")}})
    pb, res = _deploy(tmp_path, inv, steps, *_var("up", f"; touch {pwned}"), vars={"up": "| tr a-z A-Z"})
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and f"{pb}:" in text and "step 1 'upper'" in text and "raw_shell" in text, text
    inv = inventory(tmp_path, {"h0": {"connection": "local", "workdir": str(tmp_path / "w0")}},
                    {"up": f"; touch {pwned}"})
    _, res = _deploy(tmp_path, inv, steps, vars={"up": "| tr a-z A-Z"})
    assert res.exit_code == 2 and "raw_shell" in res.output, res.output
    _, res = _deploy(tmp_path, inv, [{"name": "sets up", "shell": ["echo"], "register": "up"}, *steps],
                     vars={"up": "| tr a-z A-Z"})
    assert res.exit_code == 2 and "raw_shell" in res.output, res.output
    assert not pwned.exists()


@pytest.mark.parametrize("script, why", [
    ("echo {{ x | raw_shell }}", "'x' is not a variable of this playbook"),
    ("echo {{ t | raw_shell }}", "'t' is not a literal"),
    ("echo {{ (up ~ x) | raw_shell }}", "raw_shell takes a playbook variable"),
    ("echo {{ x | raw }}", "raw_shell"),
])
def test_raw_shell_of_anything_but_a_playbook_literal_is_refused_at_load(tmp_path: Path, inv: Path,
                                                                        script: str, why: str) -> None:
    pb, res = _deploy(tmp_path, inv, [{"name": "r", "shell": script}], *_var("x", "; true"),
                      vars={"up": "| cat", "t": "{{ workdir }}"})
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and f"{pb}:" in text and "step 1 'r'" in text and why in text, text
