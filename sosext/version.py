"""sosext's version, in one place below every layer (the package, the banner, eeversion)."""

VERSION = "0.1.0"
