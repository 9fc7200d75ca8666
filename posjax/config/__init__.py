"""The config machinery, together: `defaults` (the default config and its size variants, the
one a config file starts from), `validation` (every cross-field check, before JAX starts),
`overrides` (`--config.a.b=v` on the command line) and `cli` (what the entry points share: bad
input is one line and exit 2).

The field declarations themselves (type, default, doc, check) are posjax.schema, at the bottom
of the package, because every layer reads them; this package sits above models and data,
whose own checks validation calls.
"""
