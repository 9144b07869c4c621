"""smbwire: wire analyzer for SMB3 and SMB Direct storage traffic."""

__version__ = "0.1.0"
