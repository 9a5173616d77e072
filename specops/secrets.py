"""Secrets (tokens, keys): read on this machine at run time, shown as `***` everywhere.

A secret is named in hosts.yaml by where its value lives on this machine (`{env: VAR}` or
`{file: PATH}`), never by the value itself. The value is read when a run starts, sent to
the host into a 0600 file, and loaded into the environment of the processes that need
it by the process that starts them: it never travels in argv, where `ps` shows it to
every user of the host.

Everything specops prints or writes passes through one sink here: `mask_text` on final
text (after any encoding: the JSON-escaped and shell-quoted forms of a value are masked
too), `dumps_masked` for a JSON document, `clip` where text is cut (the mask comes first,
so no piece of a secret survives a cut), `redact` for structures. Once a value is known in
this process it is masked wherever it appears (terminal, live view, `--json`, journal,
state files, manifest, report, errors); values under secret-looking names (`HF_TOKEN=`,
`"api_key": ...`, `--api-key ...`) are masked whether known or not. The set of known
values only grows: masking too much is harmless, masking too little is the leak this
module exists to prevent.
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.errors import ConfigError

MASK = "***"
#: Environment variable names (upper case, as the convention goes) whose values are
#: treated as secret wherever they appear; `key: ~/.ssh/id` in hosts.yaml is a path, not one.
#: The word must stand alone between underscores (HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY):
#: TOKENIZERS_PARALLELISM or KEYBOARD_LAYOUT hold no secret.
SECRET_NAME = re.compile(r"^(?:[A-Z0-9]+_)*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)S?(?:_[A-Z0-9]+)*$")
#: Names of any case whose values servers and clients echo (`api_key`, `token`, an
#: `Authorization` header, `--api-key`'s flag): the last word decides, so `max_tokens` or
#: `tokenizer_path` hold no secret; a tokenizer's special tokens (`eos_token`) are text.
SECRET_KEY = re.compile(r"^(?:[a-z0-9]+[_-])*(?:api[_-]?key|(?:secret|access|private)[_-]?key|token|password|passwd"
                        r"|secret|authorization|credentials?)$", re.IGNORECASE)
NOT_SECRET_KEY = re.compile(r"^(?:bos|eos|pad|unk|sep|cls|mask)[_-]token$", re.IGNORECASE)
#: Values that are never secret whatever their variable is called (a boolean, a number):
#: masking "false" everywhere would hide every "false" in a log.
NOT_SECRET_VALUE = re.compile(r"^(?:true|false|yes|no|on|off|none|null|[-+]?[0-9]+(?:\.[0-9]+)?)$", re.IGNORECASE)
#: Shorter values are not masked inside other text (they would mask ordinary words); a
#: declared secret this short (or a number) is masked where it stands as a whole token.
MIN_MASKED_LEN = 4
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def looks_secret(name: str) -> bool:
    """An environment name by convention (HF_TOKEN) or a key of any case servers echo (api_key)."""
    if SECRET_NAME.search(name):
        return True
    return bool(SECRET_KEY.match(name)) and not NOT_SECRET_KEY.match(name)


def could_be_secret(value: str) -> bool:
    """False for values no secret takes (booleans, numbers): those are never masked."""
    return not NOT_SECRET_VALUE.match(value.strip())


@dataclass(frozen=True)
class SecretSource:
    """Where a secret's value lives on this machine; `name` is the variable on the host."""

    name: str
    env: str | None = None
    file: str | None = None  # as hosts.yaml writes it
    where: str = ""
    #: the inventory's folder: a relative `file` lives there, as `key:` and `known_hosts:` do
    base: str | None = None

    @property
    def path(self) -> Path:
        """The file on this machine: `~` expanded, a relative path joined to `base`."""
        path = Path(os.path.expanduser(self.file or ""))
        if path.is_absolute() or not self.base:
            return path
        return Path(os.path.normpath(os.path.join(self.base, path)))

    def read(self) -> str:
        """The value, or a ConfigError naming the secret and where it was looked for."""
        if self.env is not None:
            value = os.environ.get(self.env)
            if not value:
                raise ConfigError(f"secret {self.name}: environment variable {self.env} is not set on this machine",
                                  where=self.where or None, hint=f"export {self.env}=... before running specops")
        else:
            path = self.path
            shown = self.file if str(path) == self.file else f"{self.file} ({path})"
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"secret {self.name}: cannot read {shown}: {exc.strerror}",
                                  where=self.where or None) from None
            except UnicodeDecodeError:  # (its bytes are never shown: they may be the secret)
                raise ConfigError(f"secret {self.name}: {self.file} is not UTF-8 text",
                                  where=self.where or None) from None
            if not value:
                raise ConfigError(f"secret {self.name}: {self.file} is empty", where=self.where or None)
        if "\n" in value or "\0" in value:
            raise ConfigError(f"secret {self.name}: the value spans several lines", where=self.where or None)
        remember(value, declared=True)
        return value


def parse_sources(node: Any, where: str, base: Path | None = None) -> dict[str, SecretSource]:
    """`secrets:` of hosts.yaml: NAME -> {env: VAR} | {file: PATH}. A relative PATH is a file
    beside the inventory (`base`, its folder), as `key:` and `known_hosts:` are; `~` is this
    machine's home."""
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise ConfigError("'secrets' must map variable names to {env: VAR} or {file: PATH}", where=where)
    out: dict[str, SecretSource] = {}
    for name, spec in node.items():
        name = str(name)
        if not _NAME.match(name):
            raise ConfigError(f"secrets: '{name}' is not an environment variable name", where=where)
        if not isinstance(spec, Mapping) or len(spec) != 1 or not ({"env", "file"} & set(spec)):
            raise ConfigError(f"secrets.{name} must be {{env: LOCAL_VARIABLE}} or {{file: LOCAL_PATH}}, "
                              "never the value itself", where=where)
        (kind, value), = spec.items()
        if not isinstance(value, str) or not value:
            raise ConfigError(f"secrets.{name}.{kind} must be a non-empty string", where=where)
        out[name] = SecretSource(name, env=value if kind == "env" else None, file=value if kind == "file" else None,
                                 where=where, base=os.path.abspath(base) if base is not None else None)
    return out


def env_file_text(values: Mapping[str, str]) -> str:
    """The host-side file the starting process sources (`set -a; . FILE`)."""
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(values.items()))


_LOADER = 'set -a; while [ "$1" != -- ]; do . "$1" || exit 111; shift; done; shift; set +a; exec "$@"'


def loader_argv(*env_files: str) -> list[str]:
    """Prefix for an argv that loads `env_files` (in order) into the environment, then execs
    the rest: the values never appear in any process's arguments, and the exec'd process
    is the one `ps` shows."""
    return ["bash", "-c", _LOADER, "specops-env", *env_files, "--"]


# ----- masking ------------------------------------------------------------------------

#: The redaction registry: process-wide on purpose, not run state (issue 22 weighed moving
#: it onto run.state.Run). A value must be masked on every path out of the process, and
#: most of them have no run at hand: the CLI's console and its error lines (printed after
#: a run ended, or for a bad inventory before one began), values remembered while hosts.yaml
#: and the arms load (before any Run exists), and the writers below the run (journal,
#: results, manifest, server state files). Two runs in one process sharing it only mask
#: more in each other's output, never less: the safe direction for this registry.
#: Keyed by the secret value itself; it only grows (remember() adds, nothing removes).
_known: set[str] = set()  # masked wherever they appear, inside any text
_tokens: set[str] = set()  # masked only as whole tokens (short or number-like declared secrets)
_lock = threading.Lock()
#: A cache of the two sets above as one regex, rebuilt under _lock whenever either grows,
#: so it always masks exactly what they hold.
_pattern: re.Pattern[str] | None = None


def _quoted_forms(value: str) -> list[str]:
    """`value` as it reads inside a quoted shell word: a `'` is written `'"'"'` by
    shlex.quote (and `\\'` by bash's %q), so the plain value never appears in the line;
    and inside a Python repr (`\\` for a backslash, `\\'` where it holds both quotes), the
    form a Python server's error or `server_args=ServerArgs(...)` line writes it in."""
    forms = [value, repr(value)[1:-1]]
    if "'" in value:
        forms += [value.replace("'", "'\"'\"'"), value.replace("'", "\\'")]
    return list(dict.fromkeys(forms))


def _json_forms(value: str) -> set[str]:
    """`value` inside a JSON string, once and twice encoded (a JSON document held in a JSON
    string), ASCII-escaped or not: a `"` or `\\` in a secret is written `\\"` or `\\\\`, so
    masking after encoding must know these forms too."""
    forms = {value}
    for _ in range(2):
        forms |= {json.dumps(f, ensure_ascii=ascii_only)[1:-1] for f in forms for ascii_only in (True, False)}
    return forms


def _forms(value: str) -> set[str]:
    """Every form of `value` the sink masks: as is, shell-quoted, Python-repr'd, JSON-escaped,
    and HTML-escaped (report.html writes a `"` as `&quot;`)."""
    forms = {j for q in _quoted_forms(value) for j in _json_forms(q)}
    return forms | {html.escape(f) for f in forms}


def remember(value: str, *, declared: bool = False) -> None:
    """Mask `value` from now on in everything `redact` sees.

    A value of MIN_MASKED_LEN characters or more that is not a number or boolean is masked
    wherever it appears, inside other text too. A shorter or number-like value is masked
    only when `declared` (a hosts.yaml secret, which the user named as one), and then only
    as a whole token: "20240517" in "password is 20240517" is masked, the "20" of a declared
    "20" inside "2026" or "c=200" is not (masking every such substring would hide ordinary
    numbers and words in every output; a two-character secret protects nothing anyway)."""
    global _pattern
    if not value:
        return
    whole = len(value) < MIN_MASKED_LEN or not could_be_secret(value)
    if whole and not declared:
        return
    target = _tokens if whole else _known
    with _lock:
        if value in target:
            return
        target.add(value)
        inside = sorted({f for v in _known for f in _forms(v)}, key=len, reverse=True)
        tokens = sorted({f for v in _tokens for f in _forms(v)}, key=len, reverse=True)
        parts = [re.escape(v) for v in inside]
        if tokens:
            parts.append(r"(?<![\w])(?:" + "|".join(re.escape(v) for v in tokens) + r")(?![\w])")
        _pattern = re.compile("|".join(parts))


def remember_env(env: Mapping[str, str] | None) -> None:
    """Mask the values of secret-looking names (HF_TOKEN, ...) of an environment a command
    is given, as arm env is: a step's `env:` token then never shows in its output."""
    for name, value in (env or {}).items():
        if looks_secret(name):
            remember(str(value))


def remember_sources(sources: Iterable[SecretSource]) -> None:
    """Read each declared secret this machine has, only so that `redact` masks it (a command
    that prints server output, a report): one this machine lacks is left out, not an error."""
    for source in sources:
        try:
            source.read()
        except ConfigError:
            pass


def mask_text(text: str) -> str:
    """The sink for final text (a console line, an encoded JSON document, a file's content):
    every known secret in any of its forms, and the value after a secret-looking name, is
    `***`. Call it after encoding and before any cut (`clip` does both)."""
    return _redact_text(text)


def dumps_masked(obj: Any, **kwargs: Any) -> str:
    """`json.dumps(obj, **kwargs)` through the sink: values under secret-looking keys masked
    in the structure, then the encoded text masked (a secret holding `"` or `\\` is escaped
    by the encoding, and only the escaped form is left to match)."""
    return mask_text(json.dumps(redact(obj), **kwargs))


def clip(text: str, limit: int, *, keep: str = "end") -> str:
    """At most `limit` characters of `text` once masked: the last ones (`keep="end"`) or the
    first. Masking comes first, so a cut through a secret cannot leave most of it (a cut
    before the mask left 34 of a 35-character token in the journal: the pattern no longer
    matched what was left)."""
    masked = _redact_text(text)
    if len(masked) <= limit:
        return masked
    return masked[-limit:] if keep == "end" else masked[:limit]


def redact(value: Any) -> Any:
    """A copy of `value` (str, bytes, list, tuple, dict) with every known secret masked,
    and with the values of secret-looking keys (`HF_TOKEN: ...`, `HF_TOKEN=...`) masked."""
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, bytes):
        return _redact_text(value.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    if isinstance(value, Mapping):
        return {k: (MASK if isinstance(k, str) and looks_secret(k) and isinstance(v, str) and v and could_be_secret(v)
                    else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return _redact_argv(value)
    if isinstance(value, tuple):
        return tuple(_redact_argv(list(value)))
    return value


def _secret_flag(word: str) -> bool:
    """`--api-key`, `--hf-token`: a flag whose name says its value is a secret."""
    return word.startswith("-") and looks_secret(word.lstrip("-"))


def _redact_argv(items: list[Any]) -> list[Any]:
    """Each item redacted, and the item after a secret flag (an argv's `--api-key`, `sk-...`)
    masked whether its value is known or not."""
    out: list[Any] = []
    for i, v in enumerate(items):
        prev = items[i - 1] if i else None
        if (isinstance(prev, str) and _secret_flag(prev) and isinstance(v, str) and v and not v.startswith("--")
                and could_be_secret(v)):
            out.append(MASK)
        else:
            out.append(redact(v))
    return out


#: NAME=word, the word as the shell reads it: quoted and bare parts side by side
#: (`'ab'"'"'cd'` is one word; stopping at its first quote left `"'"'cd'` unmasked). The
#: first form is an assignment inside one single-quoted word (`'NAME=a b'`, as shlex.quote
#: writes an `env` argument), where a `'` of the value is written `'"'"'`.
_ASSIGNMENT = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)=((?:[^']|'\"'\"')*)"
                         r"|\b([A-Za-z_][A-Za-z0-9_]*)=((?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^\s'\"])+)")
#: `--api-key VALUE` / `--api-key=VALUE` in a command line, and `"--api-key", "VALUE"` in an
#: argv printed as JSON or a Python list.
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_-]*)"
                   r"(?:(=|[ \t]+)((?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^\s'\"])+)"
                   r"|(\"\s*,\s*\")((?:[^\"\\]|\\.)*)(?=\")|('\s*,\s*')([^']*)(?='))")
#: `"api_key": "VALUE"` in encoded JSON, `'api_key': 'VALUE'` in a printed dict.
_PAIR = re.compile(r"([\"'])([A-Za-z_][A-Za-z0-9_-]*)\1(\s*:\s*)([\"'])((?:(?!\4)[^\\]|\\.)*)\4")


def _assignment(m: re.Match[str]) -> str:
    quoted = m.group(1) is not None
    name, value = (m.group(1), m.group(2)) if quoted else (m.group(3), m.group(4))
    if not (looks_secret(name) and could_be_secret(value.replace("'", "").replace('"', ""))):
        return m.group(0)
    return f"{chr(39) if quoted else ''}{name}={MASK}"


def _flag(m: re.Match[str]) -> str:
    """`--api-key VALUE`: the value masked (a shell word, or a string of a printed list)."""
    flag, sep, word = m.group(1), m.group(2), m.group(3)
    if sep is None:
        sep, word = (m.group(4), m.group(5)) if m.group(4) is not None else (m.group(6), m.group(7))
        quote = ""
    else:
        quote = word[0] if word[0] in "'\"" and len(word) > 1 and word[-1] == word[0] else ""
    value = word.strip("'\"")
    if not (_secret_flag(flag) and value and not value.startswith("-") and could_be_secret(value)):
        return m.group(0)
    return f"{flag}{sep}{quote}{MASK}{quote}"


def _pair(m: re.Match[str]) -> str:
    if not (looks_secret(m.group(2)) and m.group(5) and could_be_secret(m.group(5))):
        return m.group(0)
    q, v = m.group(1), m.group(4)
    return f"{q}{m.group(2)}{q}{m.group(3)}{v}{MASK}{v}"


def _redact_text(text: str) -> str:
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    if "=" in text:
        text = _ASSIGNMENT.sub(_assignment, text)
    if "-" in text:
        text = _FLAG.sub(_flag, text)
    if ":" in text:
        text = _PAIR.sub(_pair, text)
    return text
