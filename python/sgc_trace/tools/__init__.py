"""Tools around export and apply: the `sgc-trace` command line (`cli`), the real-model
corpus (`corpus`, `zoo`), and measurements against PyTorch (`measure`, `report`)."""
