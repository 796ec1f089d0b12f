"""Python helpers for ThinkingBox-format datasets, run by the TypeScript side as subprocesses.

- ``parse_test_files``: finds the ``!`` YAML defaults and task functions of test files (static, via ``ast``;
  nothing is executed). Reads the YAML with PyYAML, as the reference framework does, so it runs with the
  interpreter of the venv that ``thinkingbox/requirements.txt`` describes.
- ``run_test_case``: runs one test function against an episode's terminal context (the grading subprocess),
  with the dataset's own Python environment and our ``thinkingbox.common`` shim (``thinkingbox/shim``).
- ``loopback_forward``: inside the dataset sandbox, relays chosen loopback ports to host services, then runs
  the tool server.
- ``typesense_standin``: a lexical stand-in (SQLite FTS5) for the part of Typesense's HTTP API that dataset
  tool servers call.

All but ``parse_test_files`` use the standard library only. Each is run as ``python -m tbt_thinkingbox.<module>``
with cwd=thinkingbox/, except ``loopback_forward``, which is run by path with ``python3 -I``.
"""
