"""``python -m rmqstore.cli``: the same as the ``rmqstore`` script."""

from . import main

main()
