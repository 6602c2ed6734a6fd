"""``python -m runx_actors …`` is the ``runx-actors`` command."""

from runx_actors.cli import main

if __name__ == "__main__":
    main()
