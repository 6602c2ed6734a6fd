"""``examples/`` is the package ``runx_actors._examples`` (``pyproject.toml`` maps it).

This marker makes it a regular package, so an editable install resolves it to this
directory and a wheel carries ``loop-orchestration/`` as package data; see
``runx_actors.host._cli_demo.example_package_path``. Add nothing inside
``loop-orchestration/``: its package digest covers every file there.
"""
