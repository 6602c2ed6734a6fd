"""``python -m runx_actors …`` is the ``runx-actors`` command (Ctrl-C handled from the
first line: ``runx_actors._entry``)."""

from runx_actors._entry import main

if __name__ == "__main__":
    main()
