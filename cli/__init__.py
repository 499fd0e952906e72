"""The `daedalus` command line: one module per command group."""
