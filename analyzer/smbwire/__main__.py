"""`python -m smbwire` = the `smbwire` command."""

from .cli import main

main()
