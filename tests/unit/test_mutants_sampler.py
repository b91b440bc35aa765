"""The AST mutator of the sampled mutation runs (testing/mutants.py): where it mutates, and what."""

from __future__ import annotations

from testing import mutants

SOURCE = '''
LIMIT = 10


def allowed(size: int, log: object) -> bool:
    """Whether ``size`` fits."""
    log.info("checking %s", size)
    if not size <= LIMIT:
        return False
    notify(kind="size", size=size)
    return True
'''


def test_only_function_bodies_are_mutated_never_constants_docstrings_annotations_or_log_lines() -> None:
    found = {(site.line, site.operator) for site in mutants.sites(SOURCE)}
    assert found == {
        (8, "drop_not"),
        (8, "compare0"),
        (9, "flip_bool"),
        (9, "return_none"),
        (10, "drop_call"),
        (10, "keyword_none"),
        (10, "string"),
        (11, "return_none"),
        (11, "flip_bool"),
    }, found


def test_each_mutant_changes_one_thing() -> None:
    by_operator = {site.operator: site for site in mutants.sites(SOURCE)}
    assert "if not size < LIMIT:" in mutants.apply(SOURCE, by_operator["compare0"])
    assert "if size <= LIMIT:" in mutants.apply(SOURCE, by_operator["drop_not"])
    dropped = mutants.apply(SOURCE, by_operator["drop_call"])
    assert "notify(" not in dropped and "pass" in dropped and "log.info" in dropped
    assert "notify(kind='XXsizeXX', size=size)" in mutants.apply(SOURCE, by_operator["string"])
    assert "LIMIT = 10" in mutants.apply(SOURCE, by_operator["return_none"])
    assert mutants.apply(SOURCE, by_operator["return_none"]).rstrip().endswith("return None")


def test_a_run_can_be_narrowed_to_named_functions() -> None:
    source = SOURCE + "\n\ndef other() -> int:\n    return 1 + 2\n"
    assert {site.line for site in mutants.sites(source, {"other"})} == {15}
    assert {site.line for site in mutants.sites(source, {"allowed"})} == {8, 9, 10, 11}


def test_in_process_a_mutant_changes_the_code_of_its_own_function_or_method_only() -> None:
    source = (
        "from functools import cache\n\n\n@cache\ndef table() -> int:\n    return 1 + 2\n\n\n"
        "class Gate:\n    def open(self, n: int) -> bool:\n        return n < 3\n\n\ndef other() -> int:\n    return 4\n"
    )
    plain = mutants.code_objects(compile(mutants.unparsed(source), "m.py", "exec"))
    assert set(plain) == {"table", "Gate.open", "other"}
    by_line = {site.line: site for site in mutants.sites(source) if site.operator in {"arith", "compare0"}}
    for line, name in [(6, "table"), (11, "Gate.open")]:
        mutated = mutants.code_objects(compile(mutants.apply(source, by_line[line]), "m.py", "exec"))
        assert {key for key in mutated if mutated[key] != plain[key]} == {name}


def test_a_score_counts_each_mutant_by_its_newest_result_and_scores_the_killable_apart() -> None:
    lines = [
        {"mutant": 1, "line": 3, "operator": "a", "outcome": "failed"},
        {"mutant": 2, "line": 4, "operator": "b", "outcome": "passed"},
        {"mutant": 3, "line": 5, "operator": "c", "outcome": "passed"},
        {"mutant": 4, "line": 6, "operator": "d", "outcome": "skipped"},
        {"mutant": 5, "line": 7, "operator": "e", "outcome": "timeout"},
        {"mutant": 2, "line": 4, "operator": "b", "outcome": "failed"},  # run again once a test pinned it
    ]
    text = mutants.score(lines, set())
    assert text.startswith("4 run, 3 killed, 1 survived: 75 % (95 % interval 30–95 %)")
    assert "survived #3 line 5 c" in text and "#2" not in text
    text = mutants.score(lines, {3})
    assert "1 cannot change behaviour, so 3 of 3 killable killed: 100 % (95 % interval 44–100 %)" in text
    assert "survived #3 line 5 c (cannot change behaviour)" in text


def test_only_a_survivor_can_be_called_unable_to_change_behaviour() -> None:
    lines = [{"mutant": 1, "line": 3, "operator": "a", "outcome": "failed"}]
    try:
        mutants.score(lines, {1})
    except SystemExit as refused:
        assert "[1]" in str(refused)
    else:
        raise AssertionError("a killed mutant was accepted as unable to change behaviour")


def test_a_package_is_mutated_in_the_module_its_callers_import() -> None:
    assert mutants.module_name("engine/workflows/templates/__init__.py") == "engine.workflows.templates"
    assert mutants.module_name("engine/runs/retry.py") == "engine.runs.retry"
