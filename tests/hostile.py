"""A corpus of hostile inputs, for tests that put each one into every field a user controls.

Values that would run a command if they reached a shell create the file CANARY: a test replaces the placeholder
by a path of its own (`values(canary)`) and checks that the file never appears. The others probe parsers, paths,
encodings, limits and types. Every value survives `json.dumps` (NaN and infinities as the non-standard tokens
Python writes, lone surrogates as `\\ud800` escapes), so it can be sent as any JSON field; `as_text` gives the
form for URL paths and query strings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Stands for the canary file's path in the values below.
CANARY = "CANARY"
LONG = 100_000


@dataclass(frozen=True)
class Hostile:
    name: str
    value: Any
    # What it tries: shell (a command, if bash read it), eval (a command, for another interpreter), sbatch (a
    # directive or an option), path, encoding, size, number, type.
    kind: str

    def with_canary(self, canary: Path) -> Any:
        return _replace(self.value, str(canary))


def _replace(value: Any, canary: str) -> Any:
    if isinstance(value, str):
        return value.replace(CANARY, canary)
    if isinstance(value, list):
        return [_replace(item, canary) for item in value]
    if isinstance(value, dict):
        return {_replace(key, canary): _replace(item, canary) for key, item in value.items()}
    return value


_TOUCH = f"touch {CANARY}"

HOSTILE: tuple[Hostile, ...] = (
    # Commands, in every way a shell could be talked into running one.
    Hostile("single_quote_breakout", f"x'; {_TOUCH}; echo '", "shell"),
    Hostile("double_quote_breakout", f'x"; {_TOUCH}; echo "', "shell"),
    Hostile("escaped_quote_breakout", f"x\\'; {_TOUCH}; #", "shell"),
    Hostile("command_substitution", f"$({_TOUCH})", "shell"),
    Hostile("backticks", f"`{_TOUCH}`", "shell"),
    Hostile("ifs_instead_of_spaces", f"x;touch${{IFS}}{CANARY}", "shell"),
    Hostile("newline_then_command", f"x\n{_TOUCH}", "shell"),
    # Not a separator for bash, but for line splitters that also honour \r (Python's str.splitlines).
    Hostile("carriage_return_then_command", f"x\r{_TOUCH}", "encoding"),
    Hostile("semicolon", f"x; {_TOUCH}", "shell"),
    Hostile("and_and", f"x && {_TOUCH}", "shell"),
    Hostile("or_or", f"false || {_TOUCH}", "shell"),
    Hostile("pipe", f"x | tee {CANARY}", "shell"),
    Hostile("redirect", f"x > {CANARY}", "shell"),
    Hostile("background", f"x & {_TOUCH} &", "shell"),
    Hostile("process_substitution", f"<({_TOUCH})", "shell"),
    Hostile("arithmetic_expansion", f"$((0))$({_TOUCH})", "shell"),
    Hostile("parameter_expansion", "${HOME}${PATH:0:1}$SLURM_JOB_ID", "shell"),
    # Commands for other interpreters than the shell: Python's eval, a Jinja template.
    Hostile("python_eval", f"__import__('os').system('{_TOUCH}')", "eval"),
    Hostile("template_injection", f"{{{{ cycler.__init__.__globals__.os.popen('{_TOUCH}').read() }}}}", "eval"),
    Hostile("everything_at_once", f'\'"`$({_TOUCH})`";\n{_TOUCH} && {_TOUCH} | {_TOUCH} # \\', "shell"),
    # Slurm directives and sbatch/srun options.
    Hostile("sbatch_directive_after_newline", f"x\n#SBATCH --wrap={_TOUCH}", "sbatch"),
    Hostile("sbatch_directive", f"#SBATCH --wrap={_TOUCH}", "sbatch"),
    Hostile("sbatch_output_redirect", f"x\n#SBATCH --output={CANARY}", "sbatch"),
    Hostile("option_wrap", f"--wrap={_TOUCH}", "sbatch"),
    Hostile("option_output", f"--output={CANARY}", "sbatch"),
    Hostile("short_option", "-h", "sbatch"),
    Hostile("long_option", "--help", "sbatch"),
    Hostile("option_value_pair", "debug --account=root", "sbatch"),
    # Paths and names of things on disk.
    Hostile("parent_traversal", "../../etc/passwd", "path"),
    Hostile("absolute_path", "/etc/passwd", "path"),
    Hostile("dot_dot", "..", "path"),
    Hostile("canary_path", CANARY, "path"),
    Hostile("encoded_traversal", "..%2f..%2fetc%2fpasswd", "path"),
    Hostile("backslash_traversal", "..\\..\\windows", "path"),
    Hostile("glob_star", "*", "path"),
    Hostile("glob_root", "/*", "path"),
    Hostile("brace_and_tilde", "{a,b}~root", "path"),
    # Encodings and characters that are not plain text.
    Hostile("nul", f"x\x00{_TOUCH}", "encoding"),
    Hostile("control_characters", "\x07\x08\x0b\x0c\x1b[31mred\x1b[0m\x7f", "encoding"),
    Hostile("tab", "a\tb", "encoding"),
    Hostile("non_ascii", "café ünïcødé 训练 Ελληνικά", "encoding"),
    Hostile("right_to_left_override", "run\u202egpj.exe", "encoding"),
    Hostile("zero_width_and_combining", "a\u200bb\u0301\ufeff", "encoding"),
    Hostile("emoji", "🔥💥🚀", "encoding"),
    Hostile("lone_surrogate", "x\ud800y", "encoding"),
    Hostile("html", "<script>alert(1)</script>", "encoding"),
    Hostile("sql", "x'); DROP TABLE run; --", "encoding"),
    Hostile("format_strings", "%s%n%x{0}{name}", "encoding"),
    Hostile("url_encoded_nul", "%00", "encoding"),
    # Sizes.
    Hostile("empty", "", "size"),
    Hostile("blank", "   ", "size"),
    Hostile("long_100kb", "A" * LONG, "size"),
    Hostile("long_100kb_commands", (f"$({_TOUCH});" * (LONG // 20))[:LONG], "size"),
    # Numbers where they do not belong, or beyond any bound.
    Hostile("negative", -1, "number"),
    Hostile("zero", 0, "number"),
    Hostile("beyond_any_file_size", 2**62, "number"),
    Hostile("int64_overflow", 2**63, "number"),
    Hostile("huge_int", 10**40, "number"),
    Hostile("negative_huge_int", -(10**40), "number"),
    Hostile("float_for_int", 1.5, "number"),
    Hostile("huge_float", 1e308, "number"),
    Hostile("nan", math.nan, "number"),
    Hostile("infinity", math.inf, "number"),
    Hostile("negative_infinity", -math.inf, "number"),
    Hostile("digits_5000", "9" * 5000, "number"),
    Hostile("hex_string", "0x10", "number"),
    Hostile("exponent_string", "1e3", "number"),
    # Digits that are not ASCII, which Python's \d matches and int() reads.
    Hostile("fullwidth_digit", "\uff11", "number"),
    Hostile("arabic_indic_digit", "\u0663", "number"),
    Hostile("fullwidth_digit_in_time", "0\uff10:10:00", "number"),
    # Types where they do not belong.
    Hostile("null", None, "type"),
    Hostile("true", True, "type"),
    Hostile("empty_list", [], "type"),
    Hostile("list_of_commands", [f"$({_TOUCH})", f"`{_TOUCH}`"], "type"),
    Hostile("object", {f"$({_TOUCH})": f"`{_TOUCH}`"}, "type"),
)

assert len({item.name for item in HOSTILE}) == len(HOSTILE), "corpus names are unique"


def values(canary: Path) -> dict[str, Any]:
    """Each value by name, with the canary's path in place of the placeholder."""
    return {item.name: item.with_canary(canary) for item in HOSTILE}


def tries_to_run(value: Any) -> bool:
    """The value would create the canary if a shell ran it (after `values` put the path in)."""
    if isinstance(value, str):
        return any(command in value for command in ("touch", "tee ", "> ", "--output="))
    if isinstance(value, list):
        return any(tries_to_run(item) for item in value)
    if isinstance(value, dict):
        return any(tries_to_run(key) or tries_to_run(item) for key, item in value.items())
    return False


def json_safe(value: Any) -> bool:
    """Whether standard JSON, encoded as UTF-8, can carry the value: no NaN, no infinity, no lone surrogate."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return not any(0xD800 <= ord(char) <= 0xDFFF for char in value)
    if isinstance(value, list):
        return all(json_safe(item) for item in value)
    if isinstance(value, dict):
        return all(json_safe(key) and json_safe(item) for key, item in value.items())
    return True


def as_text(value: Any) -> str | None:
    """The value as it would be typed into a URL path or query string; None for values a URL cannot hold."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None
