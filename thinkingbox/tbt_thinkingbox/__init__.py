"""Python helpers for ThinkingBox-format datasets (REFERENCE.md section 6).

- ``parse_test_files``: finds the YAML defaults and task functions of test files (static, via ``ast``).
- ``run_test_case``: runs one test function against an episode's terminal context (grading subprocess).

Both are standard library only and are run as ``python3 -m tbt_thinkingbox.<module>`` with cwd=thinkingbox/.
"""
