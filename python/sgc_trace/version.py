"""The version of `sgc_trace`, written into every graph it exports (`meta.exporter`)."""

__version__ = "0.2.0"
